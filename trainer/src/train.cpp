#include "volshard/trainer/train.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/core/png.h"
#include "archive_io.h"
#include "volshard/datasets/cache.h"
#include "volshard/datasets/datalist.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/nifti_header.h"
#include "volshard/datasets/volume.h"
#include "volshard/core/seed_streams.h"
#include "volshard/trainer/checkpoint.h"
#include "volshard/trainer/ddp.h"
#include "volshard/trainer/inference.h"
#include "volshard/trainer/loss.h"
#include "volshard/trainer/serialize.h"
#include "volshard/datasets/loader.h"
#include "volshard/transforms/transforms.h"

namespace volshard {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// ---- data -------------------------------------------------------------------

struct DataSplit {
  std::vector<ImageLabelPair> train, val;
};

DataSplit list_data(const TrainOptions& o) {
  DataSplit d;
  if (!o.datalist.empty()) {
    d.train = pairs_from_datalist(o.datalist, "training");
    std::ifstream in(o.datalist);
    const json j = json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("validation"))
      d.val = pairs_from_datalist(o.datalist, "validation");
    return d;
  }
  auto all = pairs_from_folder(o.data_dir, o.image_glob, o.label_glob);
  const auto n = static_cast<int64_t>(all.size());
  int64_t n_val = 0;
  if (o.val_fraction > 0)
    n_val = std::max<int64_t>(1, std::llround(static_cast<double>(n) * o.val_fraction));
  if (n - n_val < 1)
    throw std::invalid_argument(
        "train: " + o.data_dir + " has " + std::to_string(n) +
        " pairs: too few to hold out --val-fraction=" + std::to_string(o.val_fraction));
  d.val.assign(all.end() - n_val, all.end());
  all.resize(static_cast<size_t>(n - n_val));
  d.train = std::move(all);
  return d;
}

std::array<int64_t, 3> spatial_shape(const NiftiHeader& h) {
  std::array<int64_t, 3> s{1, 1, 1};
  for (size_t a = 0; a < 3 && a < h.shape.size(); ++a) s[a] = h.shape[a];
  return s;
}

// ---- machine ------------------------------------------------------------------

std::string loaded_blas() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string name = fs::path(path).filename().string();
    if (name.find("openblas") != std::string::npos || name.find("libblas") != std::string::npos ||
        name.find("mkl_core") != std::string::npos || name.find("libblis") != std::string::npos) {
      std::string kind = "unknown BLAS";
      if (path.find("openblas-openmp") != std::string::npos)
        kind = "OpenBLAS (OpenMP)";
      else if (path.find("openblas-pthread") != std::string::npos)
        kind = "OpenBLAS (pthreads)";
      else if (path.find("openblas") != std::string::npos)
        kind = "OpenBLAS";
      else if (path.find("mkl") != std::string::npos)
        kind = "MKL";
      else if (path.find("blis") != std::string::npos)
        kind = "BLIS";
      else if (path.find("/blas/") != std::string::npos)
        kind = "reference BLAS (slow: apt install libopenblas0-openmp)";
      return kind + " " + path;
    }
  }
  return "none found in /proc/self/maps";
}

// ---- checkpoints ------------------------------------------------------------------

std::vector<char> optimizer_bytes(torch::optim::Optimizer& opt) {
  torch::serialize::OutputArchive archive;
  opt.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  const std::string s = out.str();
  return {s.begin(), s.end()};
}

void load_optimizer(torch::optim::Optimizer& opt, const std::vector<char>& bytes,
                    const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    std::istringstream in(std::string(bytes.begin(), bytes.end()));
    archive.load_from(in);
    opt.load(archive);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": optimizer state does not fit this model/optimizer (" +
                             detail::first_line(e) + ")");
  }
}

void set_lr(torch::optim::Optimizer& opt, double lr, bool adam) {
  for (auto& group : opt.param_groups()) {
    if (adam)
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    else
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
}

double scheduled_lr(const TrainOptions& o, int64_t step, int64_t total_steps) {
  if (o.lr_schedule == LrSchedule::kConstant || total_steps <= 0) return o.lr;
  const double t = std::min(1.0, static_cast<double>(step) / static_cast<double>(total_steps));
  if (o.lr_schedule == LrSchedule::kCosine) return o.lr * 0.5 * (1.0 + std::cos(M_PI * t));
  return o.lr * std::pow(1.0 - t, 0.9);  // poly
}

// ---- outputs -----------------------------------------------------------------------

std::string fmt(double v, int digits = 6) {
  std::ostringstream s;
  s.precision(digits);
  s << v;
  return s.str();
}

// Rewrites a JSON-lines file (atomically) with the lines `keep` accepts; a
// torn last line, which a killed writer leaves, is dropped. A missing file
// stays missing.
template <class Keep>
void keep_json_lines(const std::string& path, Keep keep) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (keep(j)) kept += line + "\n";
  }
  write_file_atomic(path, {kept.data()}, {kept.size()});
}

// Keeps the lines of metrics.jsonl that a resumed run does not redo.
void truncate_metrics(const std::string& path, int64_t keep_steps_upto, int64_t keep_epochs_below) {
  keep_json_lines(path, [&](const json& j) {
    return j.value("type", "") == "step" ? j.value("step", int64_t{0}) <= keep_steps_upto
                                         : j.value("epoch", int64_t{0}) < keep_epochs_below;
  });
}

// curves.png: training loss and validation Dice per epoch, from metrics.jsonl.
void draw_curves(const std::string& metrics_path, const std::string& png_path) {
  std::vector<double> loss, dice;
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("type", "") != "epoch") continue;
    loss.push_back(j.value("loss", 0.0));
    dice.push_back(j.contains("val_dice") && j["val_dice"].is_number() ? j["val_dice"].get<double>()
                                                                       : NAN);
  }
  const int w = 720, h = 400, left = 60, right = 20, top = 40, bottom = 50;
  const Rgb black{0, 0, 0}, loss_colour{0, 80, 200}, dice_colour{0, 150, 0};
  Canvas img(w, h);
  img.line(left, h - bottom, left, top, black);
  img.line(left, h - bottom, w - right, h - bottom, black);
  for (int t = 0; t <= 4; ++t) {  // y axis: 0 .. 1 (Dice loss and Dice both live there)
    const int y = h - bottom - t * (h - top - bottom) / 4;
    img.line(left - 4, y, left, y, black);
    img.text(8, y - 3, fmt(t / 4.0, 2), black);
  }
  const size_t n = loss.size();
  auto px = [&](size_t i) {
    const double x = n <= 1 ? 0.5 : static_cast<double>(i) / static_cast<double>(n - 1);
    return left + static_cast<int>(x * (w - left - right));
  };
  auto py = [&](double v) {
    return h - bottom - static_cast<int>(std::clamp(v, 0.0, 1.0) * (h - top - bottom));
  };
  auto plot = [&](const std::vector<double>& v, Rgb colour) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isnan(v[i])) continue;
      img.fill_circle(px(i), py(v[i]), 3, colour);
      if (i > 0 && !std::isnan(v[i - 1]))
        img.line(px(i - 1), py(v[i - 1]), px(i), py(v[i]), colour, 2);
    }
  };
  plot(loss, loss_colour);
  plot(dice, dice_colour);
  img.text(left + 10, 16, "training Dice loss", loss_colour, 2);
  img.text(left + 260, 16, "validation Dice", dice_colour, 2);
  img.text(w / 2 - 40, h - 22, "epoch 1 .. " + std::to_string(n), black);
  write_png(png_path, img);
}

std::string duration_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

json nan_to_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

// --resume names a RUN folder or a checkpoint file.
std::string resume_checkpoint_path(const TrainOptions& o) {
  return fs::is_directory(o.resume) ? (fs::path(o.resume) / "checkpoint.pt").string() : o.resume;
}

}  // namespace

// ---- validation -----------------------------------------------------------------------

// Each rank scores its uneven shard; the per-volume scores are summed into one
// vector indexed by dataset index (every other rank adds exact zeros), and the
// mean is taken in index order, so the result equals a single process's bit
// for bit.
double validation_dice(UNet& net, const std::vector<ImageLabelPair>& val, const TrainOptions& o,
                       Communicator& comm) {
  const auto n = static_cast<int64_t>(val.size());
  if (n == 0) return NAN;
  DistributedSamplerOptions so;
  so.dataset_size = n;
  so.num_replicas = comm.world_size();
  so.rank = comm.rank();
  so.shuffle = false;
  so.mode = PartitionMode::kUneven;
  const DistributedSampler sampler(so);
  at::Tensor scores = at::zeros({2, n}, at::kDouble);  // row 0: Dice, row 1: counted
  const bool was_training = net.is_training();
  net.train(false);
  {
    torch::NoGradGuard no_grad;
    SlidingWindowOptions sw;
    const int64_t roi = o.roi > 0 ? o.roi : o.feed.crop;
    sw.roi = {roi, roi, roi};
    sw.overlap = o.overlap;
    for (const int64_t i : sampler.indices()) {
      PairOptions po;
      po.label_indices = false;
      po.image_layout = VolumeLayout::kContiguous;
      const Sample s = load_pair(val[static_cast<size_t>(i)], i, po);
      const at::Tensor logits = sliding_window_inference(
          s.image.unsqueeze(0), sw, [&](const at::Tensor& x) { return net.forward(x); });
      const double d = dice_score(logits, s.label.unsqueeze(0));
      if (!std::isnan(d)) {
        scores[0][i] = d;
        scores[1][i] = 1.0;
      }
    }
  }
  net.train(was_training);
  comm.allreduce_sum(scores);  // ranks with fewer volumes still take part
  double sum = 0;
  int64_t counted = 0;
  const auto* v = scores.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    if (v[n + i] > 0) {
      sum += v[i];
      ++counted;
    }
  }
  return counted == 0 ? NAN : sum / static_cast<double>(counted);
}

// ---- checks before start ------------------------------------------------------------------

int64_t training_set_size(const TrainOptions& o) {
  return static_cast<int64_t>(list_data(o).train.size());
}

void check_training_config(const TrainOptions& o, int64_t world_size) {
  o.validate();
  if (world_size < 1)
    throw std::invalid_argument("train: world size " + std::to_string(world_size) +
                                " must be >= 1");
  DataSplit d;
  try {
    d = list_data(o);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  if (d.train.empty()) throw std::invalid_argument("train: no training pairs");
  if (o.val_every > 0 && !d.val.empty() && static_cast<int64_t>(d.val.size()) < world_size)
    throw std::invalid_argument("train: " + std::to_string(d.val.size()) +
                                " validation volumes cannot be split "
                                "unevenly over world size " +
                                std::to_string(world_size) +
                                " (every rank needs one); use fewer ranks or more validation data");
  // Every header, image against label, crop against volume.
  auto check = [&](const ImageLabelPair& p, bool training) {
    NiftiHeader hi, hl;
    try {
      hi = read_nifti_header(p.image);
      hl = read_nifti_header(p.label);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("train: unreadable data: ") + e.what());
    }
    const auto si = spatial_shape(hi), sl = spatial_shape(hl);
    if (si != sl)
      throw std::invalid_argument("train: image " + p.image + " is " + shape_text(si) +
                                  " but label " + p.label + " is " + shape_text(sl));
    if (training && !o.feed.allow_smaller) {
      for (int64_t side : si)
        if (side < o.feed.crop)
          throw std::invalid_argument("train: --crop=" + std::to_string(o.feed.crop) +
                                      " is larger than " + p.image + " (" + shape_text(si) +
                                      "); use a smaller crop or --allow-smaller");
    }
  };
  for (const auto& p : d.train) check(p, true);
  for (const auto& p : d.val) check(p, false);
  if (!o.resume.empty()) {
    const std::string path = resume_checkpoint_path(o);
    if (!fs::exists(path))
      throw std::invalid_argument("train: --resume: " + path + " does not exist");
  }
  if (!o.init_weights.empty() && !fs::exists(o.init_weights))
    throw std::invalid_argument("train: --init-weights: " + o.init_weights + " does not exist");
}

// ---- training --------------------------------------------------------------------------------

TrainSummary train(const TrainOptions& o, Communicator& comm,
                   const std::function<bool()>& stop_requested) {
  o.validate();
  const int64_t rank = comm.rank(), world = comm.world_size();
  const bool lead = rank == 0;
  const fs::path run(o.out_dir);
  const bool tty = lead && ::isatty(STDERR_FILENO);

  // Machine set-up: platform notes (BLAS, threads, allocator).
  tune_allocator_for_volumes();
  const int64_t local_world = std::max<int64_t>(1, o.local_world_size);
  const int64_t threads =
      o.threads > 0
          ? o.threads
          : std::max<int64_t>(
                1, static_cast<int64_t>(std::thread::hardware_concurrency()) / local_world);
  at::set_num_threads(static_cast<int>(threads));
  if (o.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  if (lead) {
    std::error_code ec;
    fs::create_directories(run, ec);
    if (ec)
      throw std::runtime_error(o.out_dir + ": cannot create the run folder (" + ec.message() + ")");
    // Temporary files of writes that were killed half-way (the files they
    // were to replace are intact).
    for (const auto& entry : fs::directory_iterator(run, ec))
      if (entry.path().filename().string().find(".tmp-") != std::string::npos)
        fs::remove(entry.path(), ec);
    std::cerr << "volshard train: " << world << " rank(s) over "
              << to_string(comm.options().backend) << ", " << threads
              << " intra-op thread(s) per rank, BLAS: " << loaded_blas() << "\n";
  }
  comm.barrier();

  const DataSplit data = list_data(o);
  const auto n_train = static_cast<int64_t>(data.train.size());
  const SeedStreams streams(o.seed);

  UNet net(o.model, streams.shared_seed(purpose::kModelInit));
  if (!o.init_weights.empty()) net.load_state_dict(load_tensor_dict(o.init_weights));
  net.set_sync_batchnorm(&comm);
  net.train(true);
  const bool adam = o.optimizer == Optimizer::kAdam;
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (adam) {
    opt = std::make_unique<torch::optim::Adam>(
        net.parameters(), torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  } else {
    opt = std::make_unique<torch::optim::SGD>(
        net.parameters(),
        torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  }

  // Resume: model, optimizer, where in which epoch, and the epoch's loss so far.
  int64_t epoch0 = 0, global_step = 0, resumed_steps = 0;
  double epoch_loss_sum = 0;
  int64_t epoch_loss_steps = 0;
  std::optional<SamplerState> resumed;
  if (!o.resume.empty()) {
    const std::string ckpt_path = resume_checkpoint_path(o);
    const Checkpoint c = load_checkpoint(ckpt_path);
    const json meta = json::parse(c.meta_json);
    net.load_state_dict(c.model);
    load_optimizer(*opt, c.optimizer, ckpt_path);
    resumed = SamplerState::from_json(meta.at("sampler").dump());
    epoch0 = resumed->epoch;
    global_step = meta.at("global_step").get<int64_t>();
    epoch_loss_sum = meta.value("epoch_loss_sum", 0.0);
    epoch_loss_steps = meta.value("epoch_loss_steps", int64_t{0});
    resumed_steps = global_step;
    if (resumed->dataset_size != n_train)
      throw std::runtime_error(ckpt_path + ": the checkpoint's training set has " +
                               std::to_string(resumed->dataset_size) + " volumes, this data has " +
                               std::to_string(n_train));
  }
  // Every rank starts from rank 0's weights (and optimizer state is identical
  // by construction: same checkpoint or fresh).
  {
    std::vector<at::Tensor> state;
    for (auto& kv : net.state_dict()) state.push_back(kv.second);
    broadcast_tensors(state, comm, 0);
  }
  GradientReducer reducer(net.parameters(), comm);

  const PairOptions train_pair = feed_prefix();
  CacheOptions cache_options;
  cache_options.cache_rate = o.cache_rate;
  cache_options.threads = std::max<int64_t>(1, std::min<int64_t>(threads, 4));
  cache_options.progress = tty;
  if (!o.cache_dir.empty()) {
    // Ranks share the folder: entries are written atomically (temporary file,
    // rename), so two ranks writing the same entry leave one whole copy.
    cache_options.cache_dir = o.cache_dir;
    cache_options.config_key = train_pair.config_key();
    cache_options.item_files = files_of(data.train);
  }
  const SampleCache cache(
      [&](int64_t i) { return load_pair(data.train[static_cast<size_t>(i)], i, train_pair); },
      n_train, cache_options);
  LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.workers = o.workers;
  lo.seed = o.seed;
  DataLoader loader(cache.source(), feed_augmentation(o.feed), lo);

  const std::string config_json = o.to_json();
  const std::string metrics_path = (run / "metrics.jsonl").string();
  LineFile metrics, trace;
  if (lead) {
    write_file_atomic((run / "config.json").string(), {config_json.data()}, {config_json.size()});
    if (resumed) truncate_metrics(metrics_path, global_step, epoch0);
    metrics = LineFile(metrics_path, !resumed);
  }
  if (!o.trace_samples.empty()) {
    // The lead starts the trace anew, or on resume drops the steps that a
    // killed run traced after its last checkpoint (they are traced again),
    // before any rank appends.
    if (lead && resumed) {
      keep_json_lines(o.trace_samples,
                      [&](const json& j) { return j.value("step", int64_t{0}) <= global_step; });
    } else if (lead) {
      LineFile(o.trace_samples, true);
    }
    comm.barrier();
    trace = LineFile(o.trace_samples, false);
  }

  DistributedSamplerOptions so;
  so.dataset_size = n_train;
  so.num_replicas = world;
  so.rank = rank;
  so.shuffle = true;
  so.seed = o.seed;
  so.mode = PartitionMode::kPad;
  const int64_t steps_per_epoch =
      (ShardLayout::make(n_train, world, PartitionMode::kPad).num_samples(0) + o.batch_size - 1) /
      o.batch_size;
  const int64_t total_steps = steps_per_epoch * o.epochs;

  auto save = [&](int64_t epoch, int64_t consumed, bool end_of_epoch) {
    if (!lead) return;
    json meta;
    const SamplerState state =
        SamplerState::at(so, end_of_epoch ? epoch + 1 : epoch, end_of_epoch ? 0 : consumed);
    meta["sampler"] = json::parse(state.to_json());
    meta["global_step"] = global_step;
    meta["epoch_loss_sum"] = end_of_epoch ? 0.0 : epoch_loss_sum;
    meta["epoch_loss_steps"] = end_of_epoch ? 0 : epoch_loss_steps;
    meta["seed"] = o.seed;
    meta["world_size"] = world;
    meta["config"] = json::parse(config_json);
    Checkpoint c{meta.dump(), net.state_dict(), optimizer_bytes(*opt)};
    save_checkpoint((run / "checkpoint.pt").string(), c);
  };

  TrainSummary summary;
  summary.global_step = global_step;
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t epoch = epoch0; epoch < o.epochs; ++epoch) {
    const bool restore = resumed && epoch == resumed->epoch && resumed->consumed > 0;
    DistributedSampler sampler =
        restore ? DistributedSampler::restore(*resumed, rank, world) : DistributedSampler(so);
    sampler.set_epoch(epoch);
    const int64_t consumed0 = restore ? resumed->consumed : 0;
    loader.start_epoch(sampler.indices().to_vector(), epoch);
    if (!restore) {
      epoch_loss_sum = 0;
      epoch_loss_steps = 0;
    }
    const auto t_epoch = std::chrono::steady_clock::now();
    double epoch_wait = 0, epoch_time = 0;
    int64_t epoch_samples = 0, step_in_run = 0;
    bool stop = false;
    while (true) {
      const auto t0 = std::chrono::steady_clock::now();
      std::optional<Batch> batch = loader.next();
      if (!batch) break;
      const double lr = scheduled_lr(o, global_step, total_steps);
      set_lr(*opt, lr, adam);
      opt->zero_grad();
      const at::Tensor logits = net.forward(batch->image);
      DiceLossOptions dl;
      dl.sigmoid = true;
      const at::Tensor loss = dice_loss(logits, batch->label, dl);
      reducer.prepare();
      loss.backward();
      reducer.finish();
      opt->step();
      ++global_step;
      ++step_in_run;
      const double step_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // One small all-reduce per step: mean loss, data wait, crops, and
      // whether any rank wants to stop (all ranks then stop after this step).
      const bool want_stop =
          (stop_requested && stop_requested()) || (o.max_steps >= 0 && global_step >= o.max_steps);
      at::Tensor stats =
          at::tensor({loss.item<double>(), batch->wait_seconds, step_seconds,
                      static_cast<double>(batch->image.size(0)), want_stop ? 1.0 : 0.0},
                     at::kDouble);
      comm.allreduce_sum(stats);
      const auto* s = stats.data_ptr<double>();
      const double mean_loss = s[0] / static_cast<double>(world);
      const double wait_fraction = s[1] / std::max(s[2], 1e-12);
      const double crops = s[3];
      stop = s[4] > 0;
      epoch_loss_sum += mean_loss;
      ++epoch_loss_steps;
      epoch_wait += s[1] / static_cast<double>(world);
      epoch_time += s[2] / static_cast<double>(world);
      epoch_samples += static_cast<int64_t>(crops);
      const double samples_per_s = crops / std::max(s[2] / static_cast<double>(world), 1e-12);
      summary.last_loss = mean_loss;

      if (trace.is_open()) {
        std::string lines;
        for (const SampleMeta& m : batch->meta) {
          json t;
          t["epoch"] = epoch;
          t["step"] = global_step;
          t["rank"] = rank;
          t["index"] = m.index;
          t["patch"] = m.patch_index;
          t["crop_start"] = m.crop_start;
          t["crop_centre"] = m.crop_centre;
          t["foreground"] = m.foreground_centre;
          t["rot90_k"] = m.rot90_k;
          lines += t.dump() + "\n";
        }
        trace.write(lines);
      }
      if (lead) {
        json line;
        line["type"] = "step";
        line["epoch"] = epoch;
        line["step"] = global_step;
        line["loss"] = mean_loss;
        line["lr"] = lr;
        line["samples_per_s"] = samples_per_s;
        line["data_wait"] = wait_fraction;
        metrics.write(line.dump() + "\n");
        const int64_t left =
            (o.epochs - epoch) * steps_per_epoch - (global_step - epoch * steps_per_epoch);
        const double per_step =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() /
            static_cast<double>(global_step - resumed_steps);
        std::ostringstream p;
        p << "epoch " << epoch + 1 << "/" << o.epochs << " step " << global_step << "/"
          << total_steps << " loss " << fmt(mean_loss, 4) << " | " << fmt(samples_per_s, 3)
          << " samples/s | data-wait " << fmt(100 * wait_fraction, 2) << "% | ETA "
          << duration_text(per_step * static_cast<double>(left));
        if (tty)
          std::cerr << "\r" << p.str() << "   " << std::flush;
        else
          std::cout << p.str() << "\n" << std::flush;
      }
      const int64_t consumed = consumed0 + step_in_run * o.batch_size * world;
      const bool periodic = o.checkpoint_every > 0 && global_step % o.checkpoint_every == 0;
      const bool epoch_done = consumed >= n_train;
      if ((periodic || stop) && !epoch_done) save(epoch, consumed, false);
      if (stop && !epoch_done) {
        summary.interrupted = true;
        break;
      }
    }
    if (summary.interrupted) break;
    if (tty) std::cerr << "\n";

    double val_dice = NAN;
    if (o.val_every > 0 && (epoch + 1) % o.val_every == 0 && !data.val.empty()) {
      val_dice = validation_dice(net, data.val, o, comm);
      summary.last_val_dice = std::isnan(val_dice) ? -1 : val_dice;
    }
    summary.epochs_done = epoch + 1;
    summary.global_step = global_step;
    if (lead) {
      json line;
      line["type"] = "epoch";
      line["epoch"] = epoch;
      line["step"] = global_step;
      line["loss"] =
          epoch_loss_steps > 0 ? epoch_loss_sum / static_cast<double>(epoch_loss_steps) : NAN;
      line["val_dice"] = nan_to_null(val_dice);
      line["lr"] = scheduled_lr(o, global_step - 1, total_steps);
      line["samples_per_s"] = static_cast<double>(epoch_samples) / std::max(epoch_time, 1e-12);
      line["data_wait"] = epoch_wait / std::max(epoch_time, 1e-12);
      line["seconds"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_epoch).count();
      metrics.write(line.dump() + "\n");
      std::cout << "epoch " << epoch + 1 << "/" << o.epochs << ": loss "
                << fmt(line["loss"].get<double>(), 4)
                << (std::isnan(val_dice) ? std::string() : ", validation Dice " + fmt(val_dice, 4))
                << "\n"
                << std::flush;
      save(epoch, 0, true);
      save_tensor_dict((run / "model.pt").string(), net.state_dict());
      draw_curves(metrics_path, (run / "curves.png").string());
    }
    if (stop) {  // the stop landed on the epoch's last step: its end-of-epoch checkpoint is the
                 // resume point
      summary.interrupted = epoch + 1 < o.epochs;
      break;
    }
  }
  summary.global_step = global_step;
  if (lead && summary.interrupted) save_tensor_dict((run / "model.pt").string(), net.state_dict());
  comm.barrier();
  return summary;
}

// ---- predict ------------------------------------------------------------------------------

void predict(const PredictOptions& o) {
  o.validate();
  UNet net(o.model);
  net.load_state_dict(load_tensor_dict(o.model_path));
  net.train(false);
  const Volume volume = read_volume_as_float(o.image_path);
  if (volume.data.size(0) != o.model.in_channels)
    throw std::runtime_error(o.image_path + ": has " + std::to_string(volume.data.size(0)) +
                             " channel(s), the model takes " + std::to_string(o.model.in_channels));
  const at::Tensor image = scale_intensity(volume.data).unsqueeze(0);
  torch::NoGradGuard no_grad;
  const Predictor forward = [&](const at::Tensor& x) { return net.forward(x); };
  at::Tensor logits;
  if (o.roi > 0) {
    SlidingWindowOptions sw;
    sw.roi = {o.roi, o.roi, o.roi};
    sw.overlap = o.overlap;
    logits = sliding_window_inference(image, sw, forward);
  } else {
    logits = whole_volume_inference(image, o.model.size_multiple(), forward);
  }
  logits = logits.squeeze(0);  // C x X x Y x Z
  at::Tensor out;
  const bool multi = logits.size(0) > 1;
  if (o.output == PredictOutput::kLogits)
    out = logits;
  else if (o.output == PredictOutput::kProb)
    out = multi ? at::softmax(logits, 0) : at::sigmoid(logits);
  else
    out = multi ? logits.argmax(0, true).to(at::kByte) : (logits > 0).to(at::kByte);
  write_volume(o.out_path, out.contiguous(), volume.affine);
}

}  // namespace volshard
