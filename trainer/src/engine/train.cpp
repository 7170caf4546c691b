#include "volshard/trainer/train.h"

#include <unistd.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "engine/fingerprint.h"
#include "engine/grad_scaler.h"
#include "engine/graph_step.h"
#include "engine/machine.h"
#include "engine/optim.h"
#include "engine/progress.h"
#include "engine/resume.h"
#include "engine/run_folder.h"
#include "engine/validate.h"
#include "io/checkpoint.h"
#include "parallel/ddp.h"
#include "volshard/core/seed_streams.h"
#include "volshard/datasets/batches_ahead.h"
#include "volshard/datasets/cache.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/loader.h"
#include "volshard/datasets/rank_pipeline.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/trainer/data_split.h"
#include "volshard/trainer/loss.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/rank_plan.h"
#include "volshard/trainer/serialize.h"

namespace volshard {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The classes validation scores, as metrics.jsonl and curves.png name them.
std::vector<std::string> class_names(const TrainOptions& o) {
  if (o.feed.prefix.labels != LabelMap::kClasses) return {"TC", "WT", "ET"};
  std::vector<std::string> names;
  const bool softmax = o.activation == Activation::kSoftmax;
  for (int64_t c = softmax ? 1 : 0; c < o.model.out_channels; ++c)
    names.push_back((softmax ? "class " : "channel ") + std::to_string(c));
  return names;
}

Model make_model(const TrainOptions& o, Communicator& comm, const RankPlan& plan) {
  Model net(o.model, plan.seeds.shared_seed(purpose::kModelInit));
  // A state_dict or a checkpoint's model (docs/training.md); a resumed run's
  // weights are its checkpoint's, so the file it started from may be gone.
  if (!o.init_weights.empty() && o.resume.empty())
    net.load_state_dict(load_model_weights(o.init_weights));
  net.to(plan.device);  // before the optimizer takes the parameters
  if (o.channels_last) net.to_channels_last();
  net.set_sync_batchnorm(&comm);
  net.train(true);
  return net;
}

// What a rank keeps in memory, and where (--cache-rate, --cache-device): the
// training cache's and the validation volumes' options.
CacheOptions cache_options(const TrainOptions& o, const RankPlan& plan) {
  CacheOptions c;
  c.device = plan.cache_device;
  c.cache_rate = o.cache_rate;
  c.threads = std::max<int64_t>(1, std::min<int64_t>(plan.threads, 4));
  return c;
}

// One rank's cache and loader: the training pairs, the feed the network
// implies, and where the cache and augmentation run.
std::unique_ptr<RankPipeline> make_pipeline(const TrainOptions& o, const RankPlan& plan,
                                            const std::vector<ImageLabelPair>& pairs) {
  CacheOptions c = cache_options(o, plan);
  c.progress = plan.rank == 0;
  c.cache_dir = o.cache_dir;
  LoaderOptions lo;
  lo.device = c.device;
  lo.batch_size = plan.loader_batch;
  lo.workers = o.workers;
  lo.seed = o.seed;
  return std::make_unique<RankPipeline>(pairs, o.resolved_feed(), lo, std::move(c));
}

// One step, agreed over the ranks by one all-reduce (a log interval's steps by one).
struct StepStats {
  int64_t step = 0;         // the optimizer steps done after it
  double loss = 0;          // mean over ranks
  double loss_scale = 0;    // --amp fp16: the scale the step used
  bool skipped = false;     // --amp fp16: an inf or nan gradient, no optimizer step
  double lr = 0;            // the step's learning rate
  double wait_seconds = 0;  // for data, summed over ranks
  double seconds = 0;       // summed over ranks
  double crops = 0;         // summed over ranks
  int64_t positions = 0;    // of the epoch's order, all ranks together, this step took
  bool stop = false;        // some rank asked to stop after this step
};

// --invariant: each volume's loss x 2^40 as an integer, so that the ranks' sum is exact.
constexpr double kLossScale = 1099511627776.0;

// A step run but not yet read: its values on the device, what the host knows of it.
struct PendingStep {
  StepValues values;
  int64_t step = 0, micro = 0, positions = 0;
  double lr = 0, wait_seconds = 0, crops = 0;
  int64_t loss_fixed = 0;  // --invariant: the volumes' losses x kLossScale, summed exactly
  Clock::time_point start;
  SampleHashes hashes;  // --fingerprints
};

// An epoch's steps, summed for its metrics line.
struct EpochTotals {
  Clock::time_point start = Clock::now();
  double wait_seconds = 0, seconds = 0;  // means over ranks
  int64_t samples = 0;

  void add(const StepStats& s, int64_t world) {
    wait_seconds += s.wait_seconds / static_cast<double>(world);
    seconds += s.seconds / static_cast<double>(world);
    samples += static_cast<int64_t>(s.crops);
  }
};

// What a rank trains with, built in the order of its collectives (the
// broadcast in start_state, the trace barrier in RunFolder) and files.
// torch.autocast for the scope of one forward pass: the thread's autocast
// state on `device` set to `amp`'s type, and restored (with autocast's cast
// cache cleared at the outermost exit) when the scope ends. `cache` false:
// no cast cache (torch.autocast(cache_enabled=False), as a CUDA graph's
// capture needs).
class AutocastScope {
 public:
  AutocastScope(Amp amp, c10::DeviceType device, bool cache = true)
      : device_(device), on_(amp != Amp::kOff) {
    if (!on_) return;
    was_enabled_ = at::autocast::is_autocast_enabled(device_);
    was_type_ = at::autocast::get_autocast_dtype(device_);
    was_caching_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, amp == Amp::kBf16 ? at::kBFloat16 : at::kHalf);
    at::autocast::set_autocast_cache_enabled(cache && was_caching_);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, was_type_);
    at::autocast::set_autocast_cache_enabled(was_caching_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool on_;
  bool was_enabled_ = false;
  bool was_caching_ = true;
  at::ScalarType was_type_ = at::kFloat;
};

std::optional<GradScaler> make_grad_scaler(const TrainOptions& o, const ResumeState& resumed,
                                           const at::Device& device) {
  if (o.amp != Amp::kFp16) return std::nullopt;
  GradScaler scaler;
  if (resumed.grad_scaler) scaler.load_state(*resumed.grad_scaler);
  scaler.to(device);  // its scale and inf flag beside the gradients: no copy a step
  return scaler;
}

struct Engine {
  Engine(const TrainOptions& options, const RankPlan& plan, DataSplit split, Communicator& comm);

  // Samples the epoch (continuing the checkpoint's mid-way); returns the
  // positions all ranks had consumed before it started here.
  int64_t start_epoch(int64_t epoch);
  // This rank's indices of `epoch` (the rest of it where the checkpoint
  // stopped mid-way) and its optimizer steps.
  DealtEpoch plan_epoch(int64_t epoch) const;
  // Steps done plus the steps left at this world size.
  int64_t planned_total_steps() const;
  // Starts the loader on `epoch`'s order, so that its first batches are made
  // while the epoch before ends (validation, checkpoint); start_epoch(epoch)
  // then takes them. The batches depend on (seed, epoch, index) alone.
  void start_loading(int64_t epoch);
  // Runs the epoch's next optimizer step, leaving its values on the device;
  // nothing when the epoch has no batch left.
  std::optional<PendingStep> step(int64_t epoch);
  // Whether the steps run and not read must be read now (the log interval,
  // or a step that checkpoints, stops, fingerprints or ends the epoch).
  bool read_due(size_t pending) const;
  // Reads the pending steps' values (one wait for the device) and agrees
  // them over the ranks (one all-reduce); clears `pending`.
  std::vector<StepStats> read(int64_t epoch, std::vector<PendingStep>& pending,
                              const std::function<bool()>& stop_requested);
  void log_step(int64_t epoch, const StepStats& s);
  // Rank 0 writes the step's line of fingerprints.jsonl; every rank calls it.
  void write_fingerprint(int64_t epoch, const StepStats& s, const SampleHashes& mine);
  // Validation (every rank), then rank 0's epoch line, checkpoint, model.pt, curves.png.
  void end_epoch(int64_t epoch, const EpochTotals& totals, TrainSummary& summary);
  // Rank 0: checkpoint.pt, `consumed` positions into `epoch` or at its end.
  void save(int64_t epoch, int64_t consumed, bool end_of_epoch);
  // One micro-batch of `count`: forward, loss, backward (the reducer's
  // all-reduce on the last); the loss, detached, on the device.
  at::Tensor forward_backward(const at::Tensor& image, const at::Tensor& label, int64_t count,
                              bool last, bool graphed);
  // Micro-batch `m` of step `p` as the plan's mode takes it, its loss (detached,
  // on the device) into p.values.
  void micro_batch(const DeviceBatch& batch, int64_t m, PendingStep& p);
  // --invariant: one volume's forward and backward, its gradient kept apart
  // in `volume_gradients` and its loss summed exactly into `p`.
  at::Tensor volume_gradient(const DeviceBatch& batch, PendingStep& p);
  // After the backward passes: the scaler's unscale and check, clipping, the
  // optimizer (skipped on an inf), the scaler's update; the scale and flag
  // into `v`. Nothing read to the host with a fused optimizer.
  void update(StepValues& v, bool graphed);

  const TrainOptions& o;
  const RankPlan& plan;
  Communicator& comm;
  const int64_t rank, world;
  const bool lead, tty;
  const DataSplit data;
  const std::string data_files;  // rank 0's stamp of them, for its checkpoints
  const int64_t n_train;
  Model net;
  const std::unique_ptr<torch::optim::Optimizer> opt;
  ResumeState position;  // its sampler stays the checkpoint's (where this run resumed)
  const int64_t resumed_steps;
  std::optional<GradScaler> scaler;  // --amp fp16
  GradientReducer reducer;
  std::unique_ptr<GraphedStep> graph;  // --cuda-graph
  const std::unique_ptr<RankPipeline> pipeline;
  DataLoader& loader;
  BatchesAhead batches;  // the loader's, on the device a step ahead
  RunFolder run;
  const DistributedSamplerOptions sampler;
  const int64_t steps_per_epoch, total_steps;  // optimizer steps
  const Clock::time_point t_start;
  std::deque<StepShare> steps_left;  // the epoch's steps not run yet
  int64_t loading_epoch = -1;  // the epoch the loader was started on ahead, and its steps
  std::deque<StepShare> loading_steps;
  std::vector<at::Tensor> volume_gradients;  // --invariant: the step's, one per volume
  ValidationCache val_cache;  // this rank's validation volumes, kept between validations
};

Engine::Engine(const TrainOptions& options, const RankPlan& rank_plan, DataSplit split,
               Communicator& c)
    : o(options),
      plan(rank_plan),
      comm(c),
      rank(c.rank()),
      world(c.world_size()),
      lead(rank == 0),
      tty(lead && ::isatty(STDERR_FILENO)),
      data(std::move(split)),
      data_files(lead ? data_files_stamp(data) : std::string()),
      n_train(static_cast<int64_t>(data.train.size())),
      net(make_model(o, c, plan)),
      opt(make_optimizer(o, net.parameters())),
      position(start_state(o, net, *opt, n_train, c)),
      resumed_steps(position.global_step),
      scaler(make_grad_scaler(o, position, plan.device)),
      reducer(net.parameters(), c),
      graph(plan.mode == StepMode::kGraphed ? std::make_unique<GraphedStep>(plan.device.is_cuda())
                                            : nullptr),
      pipeline(make_pipeline(o, plan, data.train)),
      loader(pipeline->loader()),
      batches(loader, plan.device, o.channels_last),
      run(o, position, c),
      sampler(plan.sampler(n_train)),
      steps_per_epoch(plan.steps_per_epoch(n_train)),
      total_steps(planned_total_steps()),
      t_start(Clock::now()),
      val_cache(cache_options(o, plan)) {
  if (graph)
    static_cast<FusedAdam&>(*opt).use_lr_tensor();  // a replay reads the rate set before it
  if (lead && o.fingerprints &&
      !position.sampler) {  // a fresh run: which parameters each bucket holds
    std::vector<std::string> names;
    for (const auto& named : net.named_parameters()) names.push_back(named.first);
    nlohmann::json buckets = nlohmann::json::array();
    for (const auto& bucket : reducer.buckets()) {
      nlohmann::json list = nlohmann::json::array();
      for (const int64_t p : bucket) list.push_back(names[static_cast<size_t>(p)]);
      buckets.push_back(list);
    }
    run.write_fingerprint(nlohmann::json{{"type", "layout"}, {"buckets", buckets}}.dump());
  }
}

DealtEpoch Engine::plan_epoch(int64_t epoch) const {
  DistributedSampler s =
      position.continues(epoch)
          ? DistributedSampler::restore(*position.sampler, plan.order_rank(), plan.order_world())
          : DistributedSampler(sampler);
  s.set_epoch(epoch);
  return plan.deal(s.indices().to_vector());
}

int64_t Engine::planned_total_steps() const {
  // The steps done, the rest of the epoch it starts in (dealt over this world
  // size: an elastic resume takes other steps than the run it continues), the
  // later epochs.
  const int64_t first = position.first_epoch();
  if (first >= o.epochs) return position.global_step;
  return position.global_step + static_cast<int64_t>(plan_epoch(first).steps.size()) +
         (o.epochs - first - 1) * steps_per_epoch;
}

void Engine::start_loading(int64_t epoch) {
  DealtEpoch next = plan_epoch(epoch);
  batches.start_epoch(std::move(next.indices), epoch);
  loading_epoch = epoch;
  loading_steps.assign(next.steps.begin(), next.steps.end());
}

int64_t Engine::start_epoch(int64_t epoch) {
  if (loading_epoch != epoch) start_loading(epoch);
  steps_left = std::move(loading_steps);
  loading_steps.clear();
  loading_epoch = -1;
  if (position.continues(epoch)) return position.sampler->consumed;
  position.epoch_loss_sum = 0;
  position.epoch_loss_steps = 0;
  return 0;
}

at::Tensor Engine::forward_backward(const at::Tensor& image, const at::Tensor& label, int64_t count,
                                    bool last, bool graphed) {
  std::vector<at::Tensor> outputs;
  {
    const AutocastScope autocast(o.amp, plan.device.type(), /*cache=*/!graphed);
    outputs = net.training_outputs(image);
  }
  // The loss in float32 (autocast's float16/bfloat16 logits widened).
  for (at::Tensor& out : outputs) out = out.to(at::kFloat);
  const at::Tensor loss =
      training_loss(outputs, label, o.loss, o.activation == Activation::kSoftmax);
  const at::Tensor scaled = count > 1 ? loss / static_cast<double>(count) : loss;
  if (last) reducer.prepare();
  (scaler ? scaler->scale(scaled) : scaled).backward();
  if (last) reducer.finish();
  return loss.detach();
}

void Engine::update(StepValues& v, bool graphed) {
  const std::vector<at::Tensor> params = net.parameters();
  // The test hooks read and write single values from the host: not in a graph.
  if (!graphed) inject_gradient_inf(params, position.global_step + 1);
  if (scaler) {
    v.scale = scaler->scale_tensor().clone();  // the scale this step used
    scaler->unscale(params);                   // before clipping, as torch's recipe
  }
  if (o.clip_grad_norm > 0) clip_grad_norm(params, o.clip_grad_norm);
  if (!graphed) inject_gradient_noise(params, position.global_step + 1);
  optimizer_step(*opt, scaler ? scaler->found_inf() : at::Tensor());
  if (scaler) {
    v.found_inf = scaler->found_inf().clone();
    scaler->update();
  }
}

at::Tensor Engine::volume_gradient(const DeviceBatch& batch, PendingStep& p) {
  opt->zero_grad();
  const at::Tensor loss = training_loss(net.training_outputs(batch.image), batch.label, o.loss,
                                        o.activation == Activation::kSoftmax);
  loss.backward();
  volume_gradients.push_back(flat_gradients(net.parameters()));
  p.loss_fixed += std::llround(loss.item<double>() * kLossScale);
  return loss.detach();
}

void Engine::micro_batch(const DeviceBatch& batch, int64_t m, PendingStep& p) {
  switch (plan.mode) {
    case StepMode::kInvariant:
      p.values.losses.push_back(volume_gradient(batch, p));
      return;
    case StepMode::kGraphed:  // the replay's values are the step's
      p.values = graph->run(batch.image, batch.label,
                            [this](const at::Tensor& image, const at::Tensor& label) {
                              opt->zero_grad(/*set_to_none=*/false);  // gradients stay put
                              StepValues v;
                              v.losses.push_back(forward_backward(image, label, 1, true, true));
                              update(v, true);
                              return v;
                            });
      return;
    case StepMode::kBatched:
      p.values.losses.push_back(
          forward_backward(batch.image, batch.label, p.micro, m + 1 == p.micro, false));
      return;
  }
}

std::optional<PendingStep> Engine::step(int64_t epoch) {
  if (steps_left.empty()) return std::nullopt;
  const StepShare share = steps_left.front();
  steps_left.pop_front();
  PendingStep p;
  p.start = Clock::now();
  p.micro = share.batches;
  p.positions = share.positions;
  p.lr = scheduled_lr(o, position.global_step, total_steps);
  set_lr(*opt, p.lr, o.optimizer);
  // The plan's mode takes each micro-batch (micro_batch): --accumulate N sums
  // N batches' gradients, each loss over their count, the last backward
  // all-reducing; --invariant takes each volume's gradient on its own and
  // their mean exactly; --cuda-graph replays the whole step from static
  // buffers, its update included.
  if (plan.mode != StepMode::kGraphed) opt->zero_grad();
  volume_gradients.clear();
  for (int64_t m = 0; m < p.micro; ++m) {
    const std::optional<DeviceBatch> batch = batches.next();
    if (!batch) throw std::logic_error("train: the loader ended before the epoch's planned steps");
    if (o.model.dropout > 0) net.seed_dropout(plan.dropout_seed(position.global_step, m));
    micro_batch(*batch, m, p);
    p.wait_seconds += batch->waited_seconds;  // spent in this step (the batch ahead included)
    p.crops += static_cast<double>(batch->image.size(0));
    run.trace(epoch, position.global_step + 1, rank, batch->host.meta);
    if (o.fingerprints) p.hashes.add(batch->host);
  }
  if (plan.mode == StepMode::kInvariant)
    exact_gradient_mean(volume_gradients, share.positions, net.parameters(), comm);
  if (plan.mode != StepMode::kGraphed) update(p.values, false);
  p.step = ++position.global_step;
  return p;
}

bool Engine::read_due(size_t pending) const {
  const int64_t step = position.global_step;
  return static_cast<int64_t>(pending) >= o.log_every || plan.read_every_step ||
         steps_left.empty() || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) ||
         (o.max_steps >= 0 && step >= o.max_steps);
}

std::vector<StepStats> Engine::read(int64_t epoch, std::vector<PendingStep>& pending,
                                    const std::function<bool()>& stop_requested) {
  // Every value the steps left on the device, in one copy to the host: per
  // step its micro-batches' losses, then (--amp fp16) the scale and the flag.
  std::vector<at::Tensor> parts;
  for (const PendingStep& p : pending) {
    for (const at::Tensor& l : p.values.losses) parts.push_back(l.reshape({1}).to(at::kFloat));
    if (p.values.scale.defined()) parts.push_back(p.values.scale.reshape({1}).to(at::kFloat));
    if (p.values.found_inf.defined())
      parts.push_back(p.values.found_inf.reshape({1}).to(at::kFloat));
  }
  // (--invariant: a rank may hold no volume of a step, and nothing to read.)
  const at::Tensor host =
      parts.empty() ? at::empty({0}, at::kDouble) : at::cat(parts).to(at::kCPU, at::kDouble);
  const double* value = host.data_ptr<double>();
  const Clock::time_point now = Clock::now();
  const auto n = static_cast<int64_t>(pending.size());
  // The interval's time, shared evenly: without a read per step the host
  // runs ahead of the device, and only the interval's end is a true time.
  const double seconds =
      std::chrono::duration<double>(now - pending.front().start).count() / static_cast<double>(n);
  std::vector<StepStats> out(pending.size());
  // One small all-reduce: per step the mean loss, data wait, seconds and
  // crops, and whether any rank wants to stop (all ranks then stop after the
  // interval's last step).
  at::Tensor sums = at::zeros({4 * n + 1}, at::kDouble);
  double* sum = sums.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    const PendingStep& p = pending[static_cast<size_t>(i)];
    StepStats& s = out[static_cast<size_t>(i)];
    double loss_sum = 0;
    for (size_t m = 0; m < p.values.losses.size(); ++m) loss_sum += *value++;
    if (p.values.scale.defined()) s.loss_scale = *value++;
    if (p.values.found_inf.defined()) s.skipped = *value++ != 0;
    s.step = p.step;
    s.lr = p.lr;
    s.positions = p.positions;
    sum[4 * i] = p.micro > 0 ? loss_sum / static_cast<double>(p.micro) : 0.0;
    sum[4 * i + 1] = p.wait_seconds;
    sum[4 * i + 2] = seconds;
    sum[4 * i + 3] = p.crops;
  }
  const bool want_stop = (stop_requested && stop_requested()) ||
                         (o.max_steps >= 0 && position.global_step >= o.max_steps);
  sum[4 * n] = want_stop ? 1.0 : 0.0;
  comm.allreduce_sum(sums);
  for (int64_t i = 0; i < n; ++i) {
    const PendingStep& p = pending[static_cast<size_t>(i)];
    StepStats& s = out[static_cast<size_t>(i)];
    s.loss = sum[4 * i] / static_cast<double>(world);
    if (plan.mode == StepMode::kInvariant) {  // the mean over the step's volumes, any W
      at::Tensor fixed = at::tensor({p.loss_fixed}, at::kLong);
      comm.allreduce_sum(fixed);
      s.loss = static_cast<double>(fixed.item<int64_t>()) / kLossScale /
               static_cast<double>(p.positions);
    }
    s.wait_seconds = sum[4 * i + 1];
    s.seconds = sum[4 * i + 2];
    s.crops = sum[4 * i + 3];
    position.epoch_loss_sum += s.loss;
    ++position.epoch_loss_steps;
    if (o.fingerprints) write_fingerprint(epoch, s, p.hashes);  // read every step: its gradients
  }
  out.back().stop = sum[4 * n] > 0;
  pending.clear();
  return out;
}

void Engine::write_fingerprint(int64_t epoch, const StepStats& s, const SampleHashes& mine) {
  const Clock::time_point t0 = Clock::now();
  const SampleHashes all = mine.over_ranks(comm);
  if (!lead) return;
  const std::vector<at::Tensor> params = net.parameters();
  auto hexes = [](const std::vector<uint64_t>& v) {
    nlohmann::json list = nlohmann::json::array();
    for (const uint64_t h : v) list.push_back(hex64(h));
    return list;
  };
  nlohmann::json j = {{"type", "step"},
                      {"step", s.step},
                      {"epoch", epoch},
                      {"world", world},
                      {"indices", hex64(all.indices)},
                      {"augmentation", hex64(all.augmentation)},
                      {"bytes", hex64(all.bytes)},
                      {"loss", s.loss},
                      {"grads", hexes(group_hashes(params, reducer.buckets(), true))},
                      {"weights", hexes(group_hashes(params, reducer.buckets(), false))}};
  j["seconds"] = seconds_since(t0);
  run.write_fingerprint(j.dump());
}

void Engine::log_step(int64_t epoch, const StepStats& s) {
  if (!lead) return;
  const double wait_fraction = s.wait_seconds / std::max(s.seconds, 1e-12);
  const double samples_per_s = s.crops / std::max(s.seconds / static_cast<double>(world), 1e-12);
  const int64_t step = s.step;
  run.write_step(
      {epoch, step, s.loss, s.lr, samples_per_s, wait_fraction, s.loss_scale, s.skipped});
  const int64_t left = total_steps - step;
  const double per_step = seconds_since(t_start) / static_cast<double>(step - resumed_steps);
  StepProgress line;
  line.epoch = epoch;
  line.epochs = o.epochs;
  line.step = step;
  line.total_steps = total_steps;
  line.loss = s.loss;
  line.samples_per_s = samples_per_s;
  line.wait_fraction = wait_fraction;
  line.wait_seconds = s.wait_seconds;
  line.eta_seconds = per_step * static_cast<double>(left);
  print_step_progress(line, tty);
}

void Engine::end_epoch(int64_t epoch, const EpochTotals& totals, TrainSummary& summary) {
  double val_dice = NAN;
  ValidationScores scores;
  if (o.val_every > 0 && (epoch + 1) % o.val_every == 0 && !data.val.empty()) {
    scores = validation_scores(net, data.val, o, plan, comm, &val_cache);
    val_dice = scores.mean;
    summary.last_val_dice = std::isnan(val_dice) ? -1 : val_dice;
  }
  summary.epochs_done = epoch + 1;
  summary.global_step = position.global_step;
  // Every rank holds the same mean Dice (reduced), so all agree on the best.
  const bool best =
      !std::isnan(val_dice) && (position.best_epoch < 0 || val_dice > position.best_metric);
  if (best) {
    position.best_metric = val_dice;
    position.best_epoch = epoch;
    position.best_step = position.global_step;
  }
  summary.best_epoch = position.best_epoch;
  summary.best_val_dice = position.best_epoch >= 0 ? position.best_metric : -1;
  if (!lead) return;
  MetricsLine line;
  line.epoch = epoch;
  line.step = position.global_step;
  line.loss = position.epoch_loss_steps > 0
                  ? position.epoch_loss_sum / static_cast<double>(position.epoch_loss_steps)
                  : NAN;
  line.lr = scheduled_lr(o, position.global_step - 1, total_steps);
  line.samples_per_s = static_cast<double>(totals.samples) / std::max(totals.seconds, 1e-12);
  line.data_wait = totals.wait_seconds / std::max(totals.seconds, 1e-12);
  run.write_epoch(line, val_dice, scores.per_class, class_names(o), seconds_since(totals.start),
                  scores.rank_seconds);
  print_epoch_line(epoch, o.epochs, line.loss, val_dice, scores.per_class, class_names(o));
  // best_model.pt before the checkpoint that records it: a kill between the
  // two leaves the older record, never one naming weights not written.
  if (best) run.save_best(net.state_dict(), val_dice, epoch, position.global_step);
  save(epoch, 0, true);
  run.save_model(net.state_dict());
  run.draw_curves();
}

void Engine::save(int64_t epoch, int64_t consumed, bool end_of_epoch) {
  if (!lead) return;
  ResumeState s;
  s.global_step = position.global_step;
  s.best_metric = position.best_metric;
  s.best_epoch = position.best_epoch;
  s.best_step = position.best_step;
  if (!end_of_epoch) {  // an epoch's end starts the next one's loss afresh
    s.epoch_loss_sum = position.epoch_loss_sum;
    s.epoch_loss_steps = position.epoch_loss_steps;
  }
  s.sampler =
      SamplerState::at(sampler, end_of_epoch ? epoch + 1 : epoch, end_of_epoch ? 0 : consumed);
  if (scaler) s.grad_scaler = scaler->state();
  write_checkpoint(run.checkpoint_path(), s, o, world, run.config_json(), data_files, net, *opt);
}

// How the step runs, for the start line: the levers of docs/platform.md.
std::string step_text(const TrainOptions& o, const c10::Device& device) {
  std::string text = o.deterministic ? "deterministic" : "not deterministic";
  if (!o.deterministic && device.is_cuda())
    text += o.cudnn_benchmark ? " (cuDNN autotuned)" : " (cuDNN not autotuned)";
  if (o.amp != Amp::kOff) text += ", autocast " + enum_name(o.amp);
  if (o.amp == Amp::kBf16 && device.is_cpu() && o.deterministic)
    text +=
        " (on the CPU under --deterministic, convolutions without oneDNN, whose bfloat16 "
        "kernels are not reproducible: about ten times slower than --amp off; "
        "--no-deterministic keeps oneDNN)";
  if (o.channels_last) text += ", channels-last";
  if (o.fused_optimizer) text += ", fused adam";
  if (o.cuda_graph)
    text += device.is_cuda()
                ? ", captured as a CUDA graph"
                : ", CUDA graph's step uncaptured (no CUDA graphs on " + device.str() + ")";
  text += o.log_every > 1 ? ", the loss read every " + std::to_string(o.log_every) + " steps"
                          : ", the loss read every step";
  return text;
}

// train() before torch's refusal of a nondeterministic operation is put in our words.
TrainSummary train_run(const TrainOptions& o, const RankPlan& plan, DataSplit data,
                       Communicator& comm, const std::function<bool()>& stop_requested) {
  set_up_machine(o, plan);
  if (comm.rank() == 0) {
    create_run_folder(o.out_dir);
    open_run_log((std::filesystem::path(o.out_dir) / "train.log").string(), !o.resume.empty());
    print_run_line(std::cerr, "volshard train: " + std::to_string(comm.world_size()) +
                                  " rank(s) over " + to_string(comm.options().backend) + " on " +
                                  plan.device.str() + ", cache and augmentation " +
                                  (plan.cache_device
                                       ? "on " + plan.cache_device->str() + " (tensor ops)"
                                       : std::string("in host memory")) +
                                  ", " + std::to_string(plan.threads) +
                                  " intra-op thread(s) per rank, BLAS: " + loaded_blas());
    print_run_line(std::cerr, "volshard train: step " + step_text(o, plan.device));
  }
  comm.barrier();
  Engine e(o, plan, std::move(data), comm);
  if (comm.rank() == 0)
    print_run_line(std::cerr, "volshard train: " + validation_text(o, e.data, comm.world_size()));
  TrainSummary summary;
  summary.global_step = e.position.global_step;
  summary.best_epoch = e.position.best_epoch;
  summary.best_val_dice = e.position.best_epoch >= 0 ? e.position.best_metric : -1;
  for (int64_t epoch = e.position.first_epoch(); epoch < o.epochs; ++epoch) {
    const int64_t consumed0 = e.start_epoch(epoch);
    EpochTotals totals;
    int64_t positions = 0;
    bool stop = false;
    std::vector<PendingStep> pending;  // run, not yet read (--log-every)
    for (;;) {
      std::optional<PendingStep> ran = e.step(epoch);
      const bool more = ran.has_value();
      if (ran) pending.push_back(std::move(*ran));
      if (pending.empty()) break;
      if (more && !e.read_due(pending.size())) continue;
      for (const StepStats& s : e.read(epoch, pending, stop_requested)) {
        stop = s.stop;
        totals.add(s, e.world);
        summary.last_loss = s.loss;
        e.log_step(epoch, s);
        positions += s.positions;
      }
      const int64_t consumed = consumed0 + positions;
      const bool periodic =
          o.checkpoint_every > 0 && e.position.global_step % o.checkpoint_every == 0;
      const bool epoch_done = consumed >= e.n_train;  // then the epoch's end saves
      if ((periodic || stop) && !epoch_done) e.save(epoch, consumed, false);
      if (stop && !epoch_done) {
        summary.interrupted = true;
        break;
      }
      if (!more) break;
    }
    if (summary.interrupted) break;
    if (e.tty) std::cerr << "\n";
    // The next epoch's first batches are made while this one validates and saves.
    if (!stop && epoch + 1 < o.epochs) e.start_loading(epoch + 1);
    e.end_epoch(epoch, totals, summary);
    if (stop) {  // on the epoch's last step: its end-of-epoch checkpoint is the resume point
      summary.interrupted = epoch + 1 < o.epochs;
      break;
    }
  }
  summary.global_step = e.position.global_step;
  summary.gradient_allreduces = e.reducer.allreduces();
  if (e.lead && summary.interrupted) e.run.save_model(e.net.state_dict());
  comm.barrier();
  return summary;
}

}  // namespace

namespace {

// train() once the options are checked.
TrainSummary train_checked(const TrainOptions& options, const RankPlan& plan, Communicator& comm,
                           const std::function<bool()>& stop_requested) {
  if (plan.rank != comm.rank() || plan.world != comm.world_size())
    throw std::invalid_argument("train: the plan is rank " + std::to_string(plan.rank) + " of " +
                                std::to_string(plan.world) + ", the process group's rank " +
                                std::to_string(comm.rank()) + " of " +
                                std::to_string(comm.world_size()));
  options.check_world_size(comm.world_size());
  DataSplit data = list_data(options);
  TrainOptions o = options;  // the network's input channels from the data, saved so
  if (o.model.in_channels == 0) o.model.in_channels = image_channels(data);
  try {
    return train_run(o, plan, std::move(data), comm, stop_requested);
  } catch (const c10::Error& e) {
    const std::string kernel = refused_nondeterministic_kernel(e.msg());
    if (kernel.empty()) throw;
    throw std::runtime_error(
        "train: --deterministic: " + kernel + " has no deterministic implementation on " +
        plan.device.str() +
        " (torch refuses it under deterministic algorithms); train with --deterministic false, "
        "where `volshard repro` expects the weights of two runs to differ and still checks their "
        "data");
  }
}

}  // namespace

TrainSummary train(const TrainOptions& options, const RankPlan& plan, Communicator& comm,
                   const std::function<bool()>& stop_requested) {
  options.validate();
  return train_checked(options, plan, comm, stop_requested);
}

TrainSummary train(const TrainOptions& options, Communicator& comm,
                   const std::function<bool()>& stop_requested) {
  return train_checked(options, RankPlan::make(options, comm.rank(), comm.world_size()), comm,
                       stop_requested);
}

}  // namespace volshard
