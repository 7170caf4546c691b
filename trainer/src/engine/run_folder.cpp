#include "engine/run_folder.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "engine/progress.h"
#include "volshard/core/file_io.h"
#include "volshard/core/png.h"
#include "volshard/core/torch_archive.h"
#include "volshard/trainer/serialize.h"

namespace volshard {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

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
  write_string_atomic(path, kept);
}

// Keeps the lines of metrics.jsonl that a resumed run does not redo.
void truncate_metrics(const std::string& path, int64_t keep_steps_upto, int64_t keep_epochs_below) {
  keep_json_lines(path, [&](const json& j) {
    return j.value("type", "") == "step" ? j.value("step", int64_t{0}) <= keep_steps_upto
                                         : j.value("epoch", int64_t{0}) < keep_epochs_below;
  });
}

// The CRC-32 of a file's bytes, as 8 hex digits.
std::string file_crc32_hex(const std::string& file) {
  const std::vector<char> bytes = read_file(file);
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", archive_crc32(bytes.data(), bytes.size()));
  return hex;
}

json metrics_json(const char* type, const MetricsLine& line) {
  return {{"type", type},
          {"epoch", line.epoch},
          {"step", line.step},
          {"loss", line.loss},
          {"lr", line.lr},
          {"samples_per_s", line.samples_per_s},
          {"data_wait", line.data_wait}};
}

}  // namespace

void create_run_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create the run folder (" + ec.message() + ")");
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().find(".tmp-") != std::string::npos)
      fs::remove(entry.path(), ec);
}

RunFolder::RunFolder(const TrainOptions& o, const ResumeState& resumed, Communicator& comm)
    : dir_(o.out_dir), config_json_(o.to_json()) {
  const bool lead = comm.rank() == 0;
  const bool resuming = resumed.sampler.has_value();
  if (lead) {
    write_string_atomic(path("config.json"), config_json_);
    if (!resuming) {  // a fresh run (--overwrite) keeps no best of an older one
      std::error_code ec;
      fs::remove(path("best_model.pt"), ec);
      fs::remove(path("best_model.json"), ec);
    }
    if (resuming)
      truncate_metrics(path("metrics.jsonl"), resumed.global_step, resumed.first_epoch());
    metrics_ = LineFile(path("metrics.jsonl"), !resuming);
    if (o.fingerprints) {
      if (resuming)  // the steps after the checkpoint are taken again
        keep_json_lines(path("fingerprints.jsonl"), [&](const json& j) {
          return j.value("type", "") != "step" ||
                 j.value("step", int64_t{0}) <= resumed.global_step;
        });
      fingerprints_ = LineFile(path("fingerprints.jsonl"), !resuming);
    } else if (!resuming) {
      std::error_code ec;
      fs::remove(path("fingerprints.jsonl"), ec);
    }
  }
  if (o.trace_samples.empty()) return;
  // The steps a killed run traced after its last checkpoint are traced again.
  if (lead && resuming) {
    keep_json_lines(o.trace_samples, [&](const json& j) {
      return j.value("step", int64_t{0}) <= resumed.global_step;
    });
  } else if (lead) {
    LineFile(o.trace_samples, true);
  }
  comm.barrier();  // no rank appends before the lead has started the trace
  trace_ = LineFile(o.trace_samples, false);
}

void RunFolder::trace(int64_t epoch, int64_t step, int64_t rank,
                      const std::vector<SampleMeta>& meta) {
  if (!trace_.is_open()) return;
  std::string lines;
  for (const SampleMeta& m : meta) {
    const json t = {{"epoch", epoch},
                    {"step", step},
                    {"rank", rank},
                    {"index", m.index},
                    {"patch", m.patch_index},
                    {"crop_start", m.crop_start},
                    {"crop_centre", m.crop_centre},
                    {"foreground", m.foreground_centre},
                    {"rot90_k", m.rot90_k},
                    {"flipped", m.flipped}};
    // The intensity steps applied, in order, with what each drew.
    json intensity = json::array();
    for (const auto& [name, drawn] : m.intensity)
      intensity.push_back({{"step", name}, {"drawn", drawn}});
    json spatial = json::array();  // RandZoom, RandAffine or Rand3DElastic
    for (const auto& [name, drawn] : m.spatial)
      spatial.push_back({{"step", name}, {"drawn", drawn}});
    json row = t;
    row["spatial"] = std::move(spatial);
    row["intensity"] = std::move(intensity);
    lines += row.dump() + "\n";
  }
  trace_.write(lines);
}

void RunFolder::write_fingerprint(const std::string& json_line) {
  if (fingerprints_.is_open()) fingerprints_.write(json_line + "\n");
}

void RunFolder::write_step(const MetricsLine& line) {
  json j = metrics_json("step", line);
  if (line.loss_scale > 0) {
    j["loss_scale"] = line.loss_scale;
    j["skipped"] = line.skipped;
  }
  metrics_.write(j.dump() + "\n");
}

void RunFolder::write_epoch(const MetricsLine& line, double val_dice,
                            const std::vector<double>& per_class,
                            const std::vector<std::string>& class_names, double seconds,
                            const std::vector<double>& val_rank_seconds) {
  json j = metrics_json("epoch", line);
  auto number = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };
  j["val_dice"] = number(val_dice);
  if (per_class.size() > 1 && !std::isnan(val_dice)) {
    json list = json::array();
    for (double d : per_class) list.push_back(number(d));
    j["val_dice_per_class"] = list;
    j["val_classes"] = class_names;
  }
  j["seconds"] = seconds;
  if (!val_rank_seconds.empty()) j["val_seconds"] = val_rank_seconds;
  metrics_.write(j.dump() + "\n");
}

void RunFolder::save_model(const NamedTensors& state) const {
  save_tensor_dict(path("model.pt"), state);
}

void RunFolder::save_best(const NamedTensors& state, double metric, int64_t epoch,
                          int64_t step) const {
  save_tensor_dict(path("best_model.pt"), state);
  // Two files, two writes: the record names the weights it describes, so a
  // kill between them is seen (best_model_record_matches).
  nlohmann::json j{{"metric", "mean validation Dice"},
                   {"value", metric},
                   {"epoch", epoch + 1},
                   {"step", step},
                   {"weights_crc32", file_crc32_hex(path("best_model.pt"))}};
  write_string_atomic(path("best_model.json"), j.dump(2) + "\n");
}

std::string RunFolder::checkpoint_path() const { return path("checkpoint.pt"); }

std::string RunFolder::path(const char* name) const { return (fs::path(dir_) / name).string(); }

Canvas draw_curves(const std::string& metrics_jsonl) {
  struct Point {
    double step, value;
  };
  std::vector<Point> step_loss, epoch_loss, dice;
  std::vector<std::vector<Point>> class_dice;  // per class, when metrics hold more than one
  std::vector<std::string> class_names;
  std::vector<double> epoch_ends;
  std::istringstream in(metrics_jsonl);
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    const auto step = static_cast<double>(j.value("step", int64_t{0}));
    // A NaN loss is written as null: no point for it.
    const bool has_loss = j.contains("loss") && j["loss"].is_number();
    if (j.value("type", "") == "step" && has_loss)
      step_loss.push_back({step, j["loss"].get<double>()});
    if (j.value("type", "") != "epoch") continue;
    epoch_ends.push_back(step);
    if (has_loss) epoch_loss.push_back({step, j["loss"].get<double>()});
    if (j.contains("val_dice") && j["val_dice"].is_number())
      dice.push_back({step, j["val_dice"].get<double>()});
    if (j.contains("val_dice_per_class") && j["val_dice_per_class"].is_array()) {
      const json& list = j["val_dice_per_class"];
      if (class_dice.size() < list.size()) class_dice.resize(list.size());
      for (size_t c = 0; c < list.size(); ++c)
        if (list[c].is_number()) class_dice[c].push_back({step, list[c].get<double>()});
      if (j.contains("val_classes") && j["val_classes"].is_array())
        class_names = j["val_classes"].get<std::vector<std::string>>();
    }
  }
  const int w = 760, h = 420, left = 60, right = 20, top = 44, bottom = 62;
  const Rgb black{0, 0, 0}, grey{225, 225, 225}, step_colour{150, 180, 235},
      loss_colour{0, 80, 200}, dice_colour{0, 150, 0};
  Canvas img(w, h);
  double last = 1;
  for (const auto& p : step_loss) last = std::max(last, p.step);
  for (double e : epoch_ends) last = std::max(last, e);
  auto px = [&](double step) { return left + static_cast<int>(step / last * (w - left - right)); };
  auto py = [&](double v) {
    return h - bottom - static_cast<int>(std::clamp(v, 0.0, 1.0) * (h - top - bottom));
  };
  for (int t = 0; t <= 4; ++t) {  // y axis: 0 .. 1 (Dice loss and Dice both live there)
    const int y = py(t / 4.0);
    img.line(left + 1, y, w - right, y, grey);
    img.line(left - 4, y, left, y, black);
    img.text(left - 8 - Canvas::text_width(number_text(t / 4.0, 2)), y - 3, number_text(t / 4.0, 2),
             black);
  }
  // x axis in steps: round ticks (1, 2 or 5 x 10^k apart), epoch ends as grey lines.
  double tick = 1;
  while (last / tick > 8) tick *= (std::to_string(static_cast<int64_t>(tick))[0] == '2' ? 2.5 : 2);
  for (double e : epoch_ends) img.line(px(e), top, px(e), h - bottom - 1, grey);
  for (double t = 0; t <= last + 1e-9; t += tick) {
    const std::string label = std::to_string(static_cast<int64_t>(t));
    img.line(px(t), h - bottom, px(t), h - bottom + 4, black);
    img.text(px(t) - Canvas::text_width(label) / 2, h - bottom + 8, label, black);
  }
  img.line(left, h - bottom, left, top, black);
  img.line(left, h - bottom, w - right, h - bottom, black);
  auto plot = [&](const std::vector<Point>& v, Rgb colour, int dot, int thickness) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (dot > 0) img.fill_circle(px(v[i].step), py(v[i].value), dot, colour);
      if (i > 0)
        img.line(px(v[i - 1].step), py(v[i - 1].value), px(v[i].step), py(v[i].value), colour,
                 thickness);
    }
  };
  plot(step_loss, step_colour, 0, 1);
  plot(epoch_loss, loss_colour, 3, 2);
  // Classes in lighter, distinct hues under the mean; named in a second title line.
  const Rgb class_colours[] = {{230, 120, 0}, {170, 0, 170}, {0, 170, 170},
                               {200, 40, 40}, {120, 120, 0}, {90, 90, 90}};
  for (size_t c = 0; c < class_dice.size(); ++c) plot(class_dice[c], class_colours[c % 6], 2, 1);
  plot(dice, dice_colour, 3, 2);
  int x = left;
  x += img.text(x, 6, "Dice loss per step", step_colour, 2) + 16;
  x += img.text(x, 6, "per epoch", loss_colour, 2) + 16;
  img.text(x, 6, "validation Dice", dice_colour, 2);
  x = left;
  for (size_t c = 0; c < class_dice.size(); ++c)
    x += img.text(x, 26, c < class_names.size() ? class_names[c] : "class " + std::to_string(c + 1),
                  class_colours[c % 6]) +
         12;
  const std::string axis = "step (grey lines: epoch ends; " + std::to_string(epoch_ends.size()) +
                           " epoch" + (epoch_ends.size() == 1 ? "" : "s") + ")";
  img.text(w / 2 - Canvas::text_width(axis) / 2, h - 22, axis, black);
  return img;
}

void RunFolder::draw_curves() const {
  std::ifstream in(path("metrics.jsonl"));
  std::ostringstream text;
  text << in.rdbuf();
  write_png(path("curves.png"), volshard::draw_curves(text.str()));
}

std::string best_model_mismatch(const std::string& weights) {
  const std::filesystem::path pt(weights);
  if (pt.filename() != "best_model.pt") return "";
  const std::filesystem::path record = pt.parent_path() / "best_model.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(record, ec) || !std::filesystem::is_regular_file(pt, ec))
    return "";
  const json j = json::parse(read_text_file(record.string()), nullptr, false);
  if (!j.is_object() || !j.contains("weights_crc32") || !j["weights_crc32"].is_string()) return "";
  const std::string want = j["weights_crc32"].get<std::string>(), have = file_crc32_hex(weights);
  if (want == have) return "";
  return record.string() + " describes other weights than " + weights + " (CRC-32 " + want +
         " there, " + have +
         " here: a write was stopped between the two): its Dice is not this "
         "model's; the run's next better validation writes both again";
}

}  // namespace volshard
