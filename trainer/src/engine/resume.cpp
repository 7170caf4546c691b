#include "engine/resume.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/optim.h"
#include "io/checkpoint.h"
#include "parallel/ddp.h"
#include "volshard/trainer/train.h"

namespace volshard {

using json = nlohmann::json;

std::string resume_checkpoint_path(const TrainOptions& o) {
  return std::filesystem::is_directory(o.resume)
             ? (std::filesystem::path(o.resume) / "checkpoint.pt").string()
             : o.resume;
}

namespace {

// A value as written before and after an option became a list: crop and roi
// were one number until they took x,y,z, and a cube is still written [96].
json one(const json& v) { return v.is_array() && v.size() == 1 ? v.at(0) : v; }
bool same_value(const json& a, const json& b) { return one(a) == one(b); }

}  // namespace

std::string option_differences(const std::string& saved_json, const std::string& now_json,
                               const std::function<bool(const std::string&)>& counted) {
  const json saved = json::parse(saved_json, nullptr, false),
             now = json::parse(now_json, nullptr, false);
  if (!saved.is_object() || !now.is_object()) return "";
  std::string out;
  for (auto it = now.begin(); it != now.end(); ++it) {
    if (!counted(it.key()) || !saved.contains(it.key()) ||
        same_value(saved.at(it.key()), it.value()))
      continue;
    out += (out.empty() ? "" : "; ") + Field(it.key().c_str(), "").flag() + " " +
           one(saved.at(it.key())).dump() + " there, " + one(it.value()).dump() + " here";
  }
  return out;
}

namespace {

std::string differences(const json& saved, const json& now,
                        const std::function<bool(const std::string&)>& counted) {
  return option_differences(saved.dump(), now.dump(), counted);
}

// What a resumed run must share with the run it continues: the data, the
// randomness and what the network is (other options, such as the learning
// rate or the number of epochs, may change). Every difference is named.
void check_resumed_config(const json& now, const json& saved, const std::string& path) {
  const std::set<std::string>& kept = TrainOptions::keys_with(Field::Role::kKept);
  const std::string d =
      differences(saved, now, [&](const std::string& key) { return kept.count(key) > 0; });
  if (!d.empty())
    throw FieldError("train: " + field_ref("resume") + "=" + path + " was trained otherwise: " + d +
                     ". Resume with the run's own options (or give " + field_ref("resume_anyway") +
                     " to continue regardless)");
}

}  // namespace

ResumeState start_state(const TrainOptions& o, Model& net, torch::optim::Optimizer& opt,
                        int64_t train_size, Communicator& comm) {
  ResumeState s;
  if (!o.resume.empty()) {
    const std::string path = resume_checkpoint_path(o);
    const Checkpoint c = load_checkpoint(path);
    const json meta = json::parse(c.meta_json);
    const json saved = meta.value("config", json::object()), now = json::parse(o.to_json());
    if (!o.resume_anyway) check_resumed_config(now, saved, path);
    if (comm.rank() == 0) {  // the options that may change (learning rate, epochs, ...) and did
      const std::string changes = differences(saved, now, [](const std::string&) { return true; });
      const int64_t epoch = meta.at("sampler").value("epoch", int64_t{0});  // 0-based
      const int64_t saved_world = meta.value("world_size", int64_t{0});
      const std::string elastic =
          saved_world > 0 && saved_world != comm.world_size()
              ? "; on " + std::to_string(comm.world_size()) + " rank(s), where it trained on " +
                    std::to_string(saved_world) +
                    ": an elastic resume (the rest of the epoch is dealt over " +
                    std::to_string(comm.world_size()) + ", no sample skipped or repeated)"
              : std::string();
      print_run_line(std::cerr,
                     "volshard train: resuming epoch " + std::to_string(epoch + 1) + "/" +
                         std::to_string(o.epochs) + " (sampler epoch " + std::to_string(epoch) +
                         ", 0-based as sampler-inspect's) at step " +
                         std::to_string(meta.at("global_step").get<int64_t>()) + " from " + path +
                         elastic +
                         (changes.empty() ? std::string() : " with changed options: " + changes));
    }
    net.load_state_dict(c.model);
    load_optimizer(opt, c.optimizer, path);
    s.sampler = SamplerState::from_json(meta.at("sampler").dump());
    s.global_step = meta.at("global_step").get<int64_t>();
    s.epoch_loss_sum = meta.value("epoch_loss_sum", 0.0);
    s.epoch_loss_steps = meta.value("epoch_loss_steps", int64_t{0});
    if (meta.contains("grad_scaler") && meta.at("grad_scaler").is_object()) {
      const json& g = meta.at("grad_scaler");
      s.grad_scaler =
          GradScalerState{g.at("scale").get<double>(), g.at("growth_tracker").get<int64_t>()};
    }
    if (meta.contains("best") && meta.at("best").is_object()) {
      const json& b = meta.at("best");
      s.best_metric = b.at("metric").get<double>();
      s.best_epoch = b.at("epoch").get<int64_t>();
      s.best_step = b.at("step").get<int64_t>();
    }
    if (s.sampler->dataset_size != train_size)
      throw std::runtime_error(path + ": the checkpoint's training set has " +
                               std::to_string(s.sampler->dataset_size) +
                               " volumes, this data has " + std::to_string(train_size));
  }
  std::vector<at::Tensor> weights;
  for (auto& kv : net.state_dict()) weights.push_back(kv.second);
  broadcast_tensors(weights, comm, 0);
  return s;
}

void write_checkpoint(const std::string& path, const ResumeState& s, const TrainOptions& o,
                      int64_t world_size, const std::string& config_json,
                      const std::string& data_files, const Model& net,
                      torch::optim::Optimizer& opt) {
  json meta;
  meta["sampler"] = json::parse(s.sampler.value().to_json());
  meta["global_step"] = s.global_step;
  meta["epoch_loss_sum"] = s.epoch_loss_sum;
  meta["epoch_loss_steps"] = s.epoch_loss_steps;
  if (s.best_epoch >= 0)
    meta["best"] = {{"metric", s.best_metric}, {"epoch", s.best_epoch}, {"step", s.best_step}};
  if (s.grad_scaler)
    meta["grad_scaler"] = {{"scale", s.grad_scaler->scale},
                           {"growth_tracker", s.grad_scaler->growth_tracker}};
  meta["seed"] = o.seed;
  meta["world_size"] = world_size;
  meta["config"] = json::parse(config_json);
  if (!data_files.empty()) meta["data_files"] = json::parse(data_files);
  save_checkpoint(path, Checkpoint{meta.dump(), net.state_dict(), optimizer_bytes(opt)});
}

}  // namespace volshard
