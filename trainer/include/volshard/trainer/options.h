#pragma once
// What `volshard train` and `volshard predict` take, each field written once:
// the table in for_each_field drives validate(), the JSON of RUN/config.json
// and the command-line flags (tools/volshard), so a new option is one line.

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "volshard/core/limits.h"
#include "volshard/datasets/feed.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/device.h"
#include "volshard/trainer/loss.h"
#include "volshard/trainer/model.h"
#include "volshard/transforms/inference.h"

namespace volshard {

enum class Optimizer { kAdam, kSgd };
/// Mixed precision of the training step's forward pass (torch.autocast).
enum class Amp {
  kOff,   ///< float32
  kFp16,  ///< autocast to float16, the loss scaled by a GradScaler (torch's recipe)
  kBf16,  ///< autocast to bfloat16 (float32's range: no scaler), on the CPU too
};
enum class LrSchedule { kConstant, kCosine, kPoly };  ///< per step; poly has power 0.9
enum class PredictOutput { kLogits, kProb, kLabel };
/// How validation volumes go to ranks.
enum class ValBalance {
  kCost,   ///< by sliding-window cost, longest first to the least loaded rank (MLPerf's loader)
  kCount,  ///< MONAI's uneven split: rank r takes volumes r, r + W, ...
};
/// How logits become predictions, and which Dice the loss and metric take.
enum class Activation {
  kSigmoid,  ///< each output channel on its own (binary, BraTS regions): DiceLoss(sigmoid)
  kSoftmax,  ///< one class per voxel: DiceLoss(to_onehot_y, softmax), Dice without background
};

/// The names of an enum's values, as the JSON and the flags spell them.
const std::vector<std::pair<std::string, Optimizer>>& enum_names(Optimizer);
const std::vector<std::pair<std::string, Amp>>& enum_names(Amp);
const std::vector<std::pair<std::string, LrSchedule>>& enum_names(LrSchedule);
const std::vector<std::pair<std::string, PredictOutput>>& enum_names(PredictOutput);
const std::vector<std::pair<std::string, ValBalance>>& enum_names(ValBalance);
const std::vector<std::pair<std::string, Backend>>& enum_names(Backend);
const std::vector<std::pair<std::string, Activation>>& enum_names(Activation);
const std::vector<std::pair<std::string, LossKind>>& enum_names(LossKind);
const std::vector<std::pair<std::string, BlendMode>>& enum_names(BlendMode);

/// What inference does around the network's windows, shared by validation
/// (train) and predict: how windows overlap and batch, how they blend,
/// test-time mirroring, and keeping each class's largest component.
struct InferenceOptions {
  double overlap = 0.25;                   ///< MONAI's sliding_window_inference `overlap`
  int64_t sw_batch_size = 1;               ///< windows per forward pass
  BlendMode blend = BlendMode::kConstant;  ///< MONAI's sliding_window_inference `mode`
  std::vector<double> sigma_scale{0.125};  ///< gaussian: one value or x,y,z (MONAI's)
  std::vector<int64_t> tta_flips;          ///< axes mirrored (nnU-Net: 0,1,2); empty: none
  bool largest_component = false;          ///< MONAI's KeepLargestConnectedComponent per class
  /// Throws FieldError naming the field.
  void validate() const;
  /// The sliding window over `roi` with these options; `predict` wrapped in
  /// the mirroring (transforms/inference.h).
  SlidingWindowOptions window(const std::array<int64_t, 3>& roi) const;
  Predictor mirrored(Predictor predict) const;
  /// "gaussian blend (sigma 0.125), mirrored over 0,1,2 (8 passes), largest
  /// component" or "" when none is set.
  std::string text() const;
};

template <class Self, class Visit>
void for_each_inference_field(Self& o, Visit&& visit) {
  visit(Field("overlap", "sliding-window overlap fraction").at_least(0).below(1), o.overlap);
  visit(Field("sw_batch_size", "sliding windows per forward pass").at_least(1).at_most(4096),
        o.sw_batch_size);
  visit(Field("blend",
              "how overlapping sliding windows combine: constant (averaged, MONAI's default) or "
              "gaussian (each window weighted towards its centre: MONAI's mode=\"gaussian\", "
              "nnU-Net's)"),
        o.blend);
  visit(Field("sigma_scale",
              "gaussian blend: sigma as a fraction of the window's edge, one value or x,y,z "
              "(MONAI's sigma_scale)"),
        o.sigma_scale);
  visit(Field("tta_flips",
              "test-time mirroring: the network also on each window flipped over every non-empty "
              "subset of these axes (0 X, 1 Y, 2 Z), averaged; 0,1,2 is nnU-Net's default (8 "
              "passes a window)"),
        o.tta_flips);
  visit(Field("largest_component",
              "keep only the largest connected component (26 neighbours) of each predicted class "
              "(MONAI's KeepLargestConnectedComponent); labels only"),
        o.largest_component);
}

struct TrainOptions {
  // Data
  std::string data_dir;  ///< image/label pairs (see image_glob, label_glob)
  std::string datalist;  ///< or a MONAI/Decathlon JSON datalist ("training", "validation")
  std::string image_glob = "img*";
  std::string label_glob = "seg*";
  double val_fraction = 0.2;  ///< --data only: the last fraction of pairs validates
  double cache_rate = 1.0;    ///< fraction of training (and validation) volumes kept in memory
  std::string cache_dir;      ///< also persist the prepared prefix here (warm restarts)
  CacheDevice cache_device = CacheDevice::kHost;  ///< where the cache and augmentation live
  int64_t workers = 2;                            ///< loader threads per rank
  std::string out_dir;                            ///< RUN folder
  // Schedule
  int64_t epochs = 5;
  int64_t batch_size = 2;  ///< volumes per rank and step
  FeedOptions feed;        ///< crop, crops per volume, rotation: what the network is fed
  Optimizer optimizer = Optimizer::kAdam;
  double lr = 1e-3;
  double momentum = 0.9;  ///< sgd
  double weight_decay = 0.0;
  LrSchedule lr_schedule = LrSchedule::kConstant;
  int64_t warmup_steps = 0;   ///< linear warm-up over these optimizer steps, then the schedule
  double clip_grad_norm = 0;  ///< > 0: the gradients' global L2 norm clipped to it
  int64_t accumulate = 1;     ///< micro-batches of batch_size per optimizer step (no_sync)
  Amp amp = Amp::kOff;        ///< the forward pass's precision (validation stays float32)
  /// The same model at any world size: batch_size is the global batch, each
  /// volume's gradient is taken on its own and the sum is exact.
  bool invariant = false;
  uint64_t seed = 0;
  /// in_channels 0: the images' channels
  ModelOptions model = [] {
    ModelOptions m;
    m.in_channels = 0;
    return m;
  }();
  Activation activation = Activation::kSigmoid;
  LossOptions loss;  ///< what the step minimises (activation picks sigmoid or softmax)
  // Validation
  int64_t val_every = 1;  ///< epochs; 0: never
  /// Validation's sliding window, voxels: one edge (a cube) or x,y,z; 0: the crop.
  std::vector<int64_t> roi{0};
  InferenceOptions inference;  ///< overlap, windows a pass, blend, mirroring, largest component
  ValBalance val_balance = ValBalance::kCost;
  // Checkpoints and faults
  int64_t checkpoint_every = 0;  ///< also every k steps (mid-epoch); 0: at epoch ends only
  std::string resume;            ///< RUN folder (or checkpoint file) to continue from
  bool resume_anyway = false;    ///< resume though data, seed, crop or network differ
  bool overwrite = false;        ///< a fresh run may replace the run already in out_dir
  std::string init_weights;      ///< state_dict .pt saved by Python/MONAI
  std::string trace_samples;     ///< JSON lines of every sample fed
  bool fingerprints = true;      ///< RUN/fingerprints.jsonl, for `volshard diff`
  int64_t max_steps = -1;        ///< stop (with a checkpoint) after this many steps; -1: no limit
  double timeout_s = 120;        ///< a collective waiting longer for a peer fails
  // Machine
  int64_t threads = 0;               ///< intra-op threads per rank; 0: cores / local world size
  Backend backend = Backend::kAuto;  ///< auto: NCCL with a GPU per local rank, else Gloo
  DeviceKind device = DeviceKind::kAuto;
  int64_t local_rank = 0;        ///< rank on this machine (from the launcher; not saved)
  bool deterministic = true;     ///< at::globalContext().setDeterministicAlgorithms
  int64_t local_world_size = 1;  ///< ranks on this machine (from the launcher; not saved)
  // The step's speed levers (docs/platform.md: what each costs and gives)
  bool channels_last = false;    ///< weights and batches in channels-last 3D layout (NDHWC)
  bool fused_optimizer = false;  ///< adam through torch's fused kernel (FusedAdam)
  bool cudnn_benchmark = true;   ///< without `deterministic`: cuDNN picks its fastest algorithms
  bool cuda_graph = false;       ///< the step captured once and replayed (one rank)
  int64_t log_every = 1;         ///< steps between reads of the loss (host syncs)

  /// Throws std::invalid_argument naming the field (values only; no files).
  void validate() const;
  /// Throws std::invalid_argument where an option cannot run on `world_size` ranks.
  void check_world_size(int64_t world_size) const;
  /// Every field of the table that is saved (RUN/config.json).
  std::string to_json() const;
  /// The feed with what the network implies: labels checked against its
  /// classes (softmax: out_channels; one sigmoid channel: 0/1; BraTS: the
  /// scheme's labels).
  FeedOptions resolved_feed() const;
  /// Validation's sliding window: roi, or the crop where roi is 0.
  std::array<int64_t, 3> val_window() const;

  /// The keys of the table's fields that have `role` (Field::kept_on_resume,
  /// Field::run_local).
  static const std::set<std::string>& keys_with(Field::Role role);

  /// The table: visit(Field, member) for every option, in help order.
  template <class Self, class Visit>
  static void for_each_field(Self& o, Visit&& visit);
};

template <class Self, class Visit>
void TrainOptions::for_each_field(Self& o, Visit&& visit) {
  using F = Field;
  visit(F("data", "folder of image/label pairs (--image-glob, --label-glob); this or --datalist")
            .kept_on_resume(),
        o.data_dir);
  visit(F("datalist", "MONAI/Decathlon JSON datalist (training, validation); this or --data")
            .kept_on_resume(),
        o.datalist);
  visit(F("image_glob", "--data: image file pattern").kept_on_resume(), o.image_glob);
  visit(F("label_glob", "--data: label file pattern").kept_on_resume(), o.label_glob);
  visit(F("val_fraction", "--data: fraction of pairs held out for validation")
            .kept_on_resume()
            .at_least(0)
            .below(1),
        o.val_fraction);
  visit(F("cache_rate",
          "fraction of training volumes kept in memory, and of each rank's validation volumes "
          "(after the whole-volume prefix, from the first validation on; where --cache-device "
          "puts the training cache)")
            .run_local()
            .at_least(0)
            .at_most(1),
        o.cache_rate);
  visit(F("cache_dir", "persist the cached prefix here: a second run starts warm").run_local(),
        o.cache_dir);
  visit(F("cache_device",
          "where the cached prefix lives and the augmentation runs: host (host memory and "
          "kernels, batches pinned and copied to the device); device (the --device's memory, "
          "crops, turns, flips and intensity as tensor ops there: MONAI's GPU-cache recipe; on "
          "the CPU the same code gives host's batches bit for bit); cuda (device, on a GPU only)"),
        o.cache_device);
  visit(F("workers", "loader threads per rank").run_local().at_least(0).at_most(kMaxThreads),
        o.workers);
  visit(F("out", "run folder (model.pt, checkpoint.pt, metrics.jsonl, config.json, curves.png)")
            .run_local(),
        o.out_dir);
  visit(F("epochs", "passes over the training set").at_least(1).at_most(1000000), o.epochs);
  visit(F("batch_size", "volumes per rank and step").at_least(1), o.batch_size);
  // The pipeline's rows (datasets/feed.h) but num_classes, which the network sets.
  for_each_feed_field(o.feed, [&visit](const Field& f, auto& value) {
    if (!f.set_by_network) visit(f, value);
  });
  visit(F("optimizer", "optimizer"), o.optimizer);
  visit(F("lr", "learning rate").above(0).at_most(10), o.lr);
  visit(F("momentum", "sgd momentum").at_least(0).below(1), o.momentum);
  visit(F("weight_decay", "L2 weight decay").at_least(0).finite(), o.weight_decay);
  visit(F("lr_schedule", "learning-rate schedule, per step (poly: power 0.9)"), o.lr_schedule);
  visit(F("warmup_steps",
          "linear warm-up: optimizer step s < N takes lr * (s + 1) / N, then the schedule runs "
          "over the steps left (0: none)")
            .at_least(0),
        o.warmup_steps);
  visit(F("clip_grad_norm",
          "clip the gradients' global L2 norm to this after the all-reduce, as "
          "torch.nn.utils.clip_grad_norm_ (0: none)")
            .at_least(0)
            .finite(),
        o.clip_grad_norm);
  visit(F("accumulate",
          "micro-batches of --batch-size per optimizer step: gradients summed over them and "
          "all-reduced once, on the last (DDP's no_sync); the loss is their mean")
            .at_least(1)
            .at_most(65536),
        o.accumulate);
  visit(F("amp",
          "mixed precision of the training forward pass (torch.autocast): off; fp16 (float16, "
          "the loss scaled by a GradScaler as torch's: a step with an inf or nan gradient is "
          "skipped and the scale backs off; kept in checkpoints); bf16 (bfloat16, no scaler; the "
          "CPU too). Validation and predict stay float32")
            .kept_on_resume(),
        o.amp);
  visit(F("invariant",
          "the same model.pt at any world size: --batch-size is the global batch (volumes per "
          "optimizer step, whatever the ranks), each volume's gradient is taken on its own and "
          "their sum is exact (64-bit fixed point); instance norm, no dropout, --threads fixed "
          "(default 1)")
            .kept_on_resume(),
        o.invariant);
  visit(F("seed", "base seed of the sampler, augmentation and weights").kept_on_resume(), o.seed);
  for_each_model_field(o.model, visit);
  visit(F("activation",
          "sigmoid: labels as channels (binary, BraTS); softmax: class indices, "
          "one-hot Dice without background")
            .kept_on_resume(),
        o.activation);
  visit(F("loss", "dice: DiceLoss; dicece: DiceCELoss (Dice plus cross-entropy, BCE with sigmoid)"),
        o.loss.kind);
  visit(F("lambda_dice", "dicece: weight of the Dice term").at_least(0).finite(),
        o.loss.lambda_dice);
  visit(F("lambda_ce", "dicece: weight of the cross-entropy term").at_least(0).finite(),
        o.loss.lambda_ce);
  visit(F("include_background", "Dice loss over channel 0 too (MONAI's default)"),
        o.loss.include_background);
  visit(F("squared_pred", "Dice loss: squares of predictions and labels in the denominator"),
        o.loss.squared_pred);
  visit(F("smooth_nr", "Dice loss: added to the numerator").at_least(0).finite(), o.loss.smooth_nr);
  visit(F("smooth_dr", "Dice loss: added to the denominator").at_least(0).finite(),
        o.loss.smooth_dr);
  visit(F("val_every", "epochs between validations (0: none)").at_least(0), o.val_every);
  visit(F("roi",
          "validation sliding window, voxels: one edge (a cube) or x,y,z (0: --crop); a volume's "
          "windows per axis are ceil((edge - roi) / (roi x (1 - overlap))) + 1: 125 a 128^3 "
          "volume at --roi 32, 8 at 96"),
        o.roi);
  for_each_inference_field(o.inference, visit);
  visit(F("val_balance",
          "validation volumes to ranks (cost: by sliding-window cost, longest first to the least "
          "loaded rank; count: MONAI's split, r, r + W, ...); the metric is the same either way"),
        o.val_balance);
  visit(F("checkpoint_every", "also checkpoint every this many steps (0: epoch ends only)")
            .run_local()
            .at_least(0),
        o.checkpoint_every);
  visit(F("max_steps",
          "stop with a checkpoint after this many steps (-1: no limit); this run only, not "
          "saved in config.json (a resumed run goes on)")
            .at_least(-1)
            .flag_only(),
        o.max_steps);
  visit(F("resume", "RUN folder or checkpoint.pt to continue from").flag_only(), o.resume);
  visit(F("resume_anyway",
          "resume though the data, seed, crop or network differ from the checkpoint's run")
            .flag_only(),
        o.resume_anyway);
  visit(F("overwrite", "a fresh run replaces the run already in --out").flag_only(), o.overwrite);
  visit(F("init_weights", "state_dict .pt saved by Python/MONAI to start from"), o.init_weights);
  visit(F("trace_samples", "JSON lines of every crop fed (epoch, step, rank, index, crop, k)")
            .run_local(),
        o.trace_samples);
  visit(F("fingerprints",
          "RUN/fingerprints.jsonl: per step, 64-bit hashes of the samples, their augmentation and "
          "bytes, the loss, each gradient bucket after the all-reduce and the weights after the "
          "step, for `volshard diff`")
            .run_local(),
        o.fingerprints);
  visit(F("timeout", "seconds a collective waits for a lost peer (at most a week)")
            .run_local()
            .above(0)
            .at_most(604800),
        o.timeout_s);
  visit(F("threads", "intra-op threads per rank (0: cores / local ranks)")
            .at_least(0)
            .at_most(kMaxThreads),
        o.threads);
  visit(F("device",
          "where the network trains, validates and predicts: auto (cuda:LOCAL_RANK when CUDA has "
          "a device, else the CPU), cpu, cuda"),
        o.device);
  visit(F("backend",
          "collective backend (auto: nccl where each local rank has a GPU of its own, else "
          "gloo; nccl needs CUDA and a GPU per local rank)"),
        o.backend);
  visit(F("deterministic",
          "deterministic algorithms only (torch.use_deterministic_algorithms; on CUDA with "
          "CUBLAS_WORKSPACE_CONFIG=:4096:8 unless set; with --amp bf16 on the CPU, convolutions "
          "without oneDNN, whose bfloat16 kernels are not): an operation without one stops the "
          "run, named; false on CUDA: `volshard repro` expects weights to differ between runs. "
          "Cost (docs/platform.md; one H100, 2026-11-27, the 96^3 fp16 tutorial step): 30.7 ms "
          "deterministic, 21.4 ms without (cuDNN autotuned); PyTorch's loop with MONAI's UNet "
          "28.8 and 28.0 ms"),
        o.deterministic);
  visit(F("channels_last",
          "the network's weights and its batches in channels-last 3D layout (NDHWC, "
          "torch.channels_last_3d: cuDNN's NDHWC kernels on a GPU); the same values within float "
          "rounding. Alone no faster on one H100 (96^3 fp16: 28.1 against 28.8 ms), a part of "
          "the all-levers step"),
        o.channels_last);
  visit(F("fused_optimizer",
          "adam: every parameter's update in one call of torch's fused kernel "
          "(torch.optim.Adam(fused=True)), an --amp fp16 step skipped inside it without a read "
          "back to the host; the same values within float rounding, the same checkpoint format. "
          "One H100, 96^3 fp16: 26.2 against 28.8 ms a step"),
        o.fused_optimizer);
  visit(F("cudnn_benchmark",
          "with --deterministic false on CUDA: cuDNN times its algorithms for each new shape and "
          "keeps the fastest (torch.backends.cudnn.benchmark); no effect under --deterministic. "
          "One H100, 96^3 fp16: 21.4 against 28.8 ms a step"),
        o.cudnn_benchmark);
  visit(F("cuda_graph",
          "the whole training step (forward, loss, backward, --amp's scaler, --clip-grad-norm, "
          "the optimizer) captured once as a CUDA graph and replayed with each batch copied into "
          "static buffers: one launch a step. Needs one rank, adam with --fused-optimizer, "
          "--accumulate 1, no dropout, no --invariant; a batch of another shape (an epoch's last) "
          "runs the same step uncaptured. On the CPU the same step runs without capture. One "
          "H100, 96^3 fp16: 24.2 ms with --fused-optimizer against its 26.2"),
        o.cuda_graph);
  visit(F("log_every",
          "steps between reads of the loss to the host (each read waits for the device): "
          "metrics.jsonl keeps a line per step, written when read; a stop (signal) is agreed at "
          "these reads; --fingerprints and --invariant read every step")
            .run_local()
            .at_least(1)
            .at_most(1000000),
        o.log_every);
}

struct PredictOptions {
  std::string model_path;  ///< state_dict .pt (ours or MONAI's)
  std::string image_path;
  std::string out_path;
  PredictOutput output = PredictOutput::kLabel;
  /// Sliding window, voxels: one edge (a cube) or x,y,z; 0: `crop` (a run's
  /// config.json: the window its validation used, as `volshard train`'s roi
  /// 0), or the whole volume when that is 0 too or whole_volume is set.
  std::vector<int64_t> roi{0};
  std::vector<int64_t> crop{0};  ///< the training crop (a run's config.json), for roi 0
  bool whole_volume = false;     ///< the whole volume in one pass, whatever roi and crop say
  InferenceOptions inference;    ///< blend, mirroring, largest component (a run's, or flags)
  /// The sliding window these options give (roi, else crop), or {0, 0, 0}
  /// for the whole volume in one pass.
  std::array<int64_t, 3> window() const;
  /// What the inference is, in words: "sliding window 32x32x32, overlap 0.5, 4
  /// windows a pass" or "whole volume".
  std::string inference_text() const;
  ModelOptions model;
  Activation activation = Activation::kSigmoid;
  DeviceKind device = DeviceKind::kAuto;  ///< where the network runs (the CPU holds the volume)
  /// The training run's prefix: the image is prepared as validation prepares
  /// it, and the prediction mapped back onto the image's own grid.
  PrefixOptions prefix;
  /// Throws std::invalid_argument naming the field.
  void validate() const;

  /// The table: visit(Field, member) for every option, in help order. The
  /// rows a run's config.json also holds (the network, the window, the
  /// inference, the prefix) are train's rows, so a run's values read back;
  /// the command's own (the files, what to write) are flags only.
  template <class Self, class Visit>
  static void for_each_field(Self& o, Visit&& visit);
};

template <class Self, class Visit>
void PredictOptions::for_each_field(Self& o, Visit&& visit) {
  using F = Field;
  // --model is the weights file here: the network's kind (key "model") is --network.
  F weights("model_path", "state_dict .pt (model.pt, or MONAI's); required");
  weights.flag_name = "--model";
  visit(weights.flag_only(), o.model_path);
  visit(F("image", "NIfTI image to segment; required").flag_only(), o.image_path);
  visit(F("out", "NIfTI to write; required").flag_only(), o.out_path);
  visit(F("output", "what to write: logits, probabilities or labels").flag_only(), o.output);
  visit(F("roi",
          "sliding window, voxels: one edge (a cube) or x,y,z (0: the config's --crop, as "
          "validation, or the whole volume without one)"),
        o.roi);
  visit(F("crop", "the training crop (a run's config.json): the window when --roi is 0"), o.crop);
  visit(F("whole_volume",
          "the whole volume in one pass (no sliding window), whatever the config says")
            .flag_only(),
        o.whole_volume);
  for_each_model_field(o.model, visit);
  visit(F("activation", "sigmoid: channels on their own; softmax: argmax over classes"),
        o.activation);
  for_each_inference_field(o.inference, visit);
  visit(F("device", "where the network runs: auto (CUDA when there is a device), cpu, cuda"),
        o.device);
  for_each_prefix_field(o.prefix, visit);
}

}  // namespace volshard
