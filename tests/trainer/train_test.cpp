// The training loop in process: two Gloo ranks as threads train a tiny Model on
// synthetic volumes; runs repeat bit for bit, and a run stopped at max_steps
// and resumed ends where an uninterrupted run does. Sliding-window inference
// (validation's and predict's) against MONAI's.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "batches_ahead.h"
#include "run_folder.h"
#include "run_ranks.h"
#include "volshard/core/file_io.h"
#include "volshard/core/limits.h"
#include "volshard/trainer/data_split.h"
#include "volshard/trainer/device.h"
#include "volshard/trainer/repro.h"
#include "volshard/trainer/serialize.h"
#include "volshard/trainer/train.h"
#include "volshard/trainer/validate.h"
#include "volshard/transforms/inference.h"
#include "volshard/volume_io/synthetic_dataset.h"
#include "volume_io/nifti_test_util.h"

namespace volshard {
namespace {

namespace fs = std::filesystem;

// A temporary folder with 6 synthetic pairs of 24^3 voxels (4 train, 2 validate).
class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("volshard_train_" + std::to_string(::getpid()) + "_" + test->name());
    fs::remove_all(dir_);
    SynthOptions so;
    so.out_dir = (dir_ / "data").string();
    so.count = 6;
    so.volume.height = so.volume.width = so.volume.depth = 24;
    so.volume.rad_max = 8;
    so.volume.rad_min = 3;
    so.volume.num_seg_classes = 1;
    so.threads = 1;
    write_synthetic_dataset(so);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Two epochs of one-volume batches: 2 steps per epoch over 2 ranks.
  TrainOptions options(const std::string& run) const {
    TrainOptions o;
    o.data_dir = (dir_ / "data").string();
    o.out_dir = (dir_ / run).string();
    o.val_fraction = 0.34;
    o.workers = 0;
    o.threads = 1;
    o.epochs = 2;
    o.batch_size = 1;
    o.feed.crop = {16};
    o.feed.num_samples = 2;
    o.model.channels = {4, 8};
    o.model.strides = {2};
    o.model.num_res_units = 1;
    o.val_every = 1;
    o.seed = 7;
    o.device = DeviceKind::kCpu;  // the CPU's semantics, also where a GPU is; CUDA tests ask for it
    return o;
  }

  // Trains on two ranks; returns rank 0's summary.
  static TrainSummary train_two_ranks(const TrainOptions& o) {
    std::vector<TrainSummary> summaries(2);
    run_ranks(2, [&](Communicator& comm) {
      summaries[static_cast<size_t>(comm.rank())] = train(o, comm);
    });
    return summaries[0];
  }

  std::string file(const std::string& run, const std::string& name) const {
    return (dir_ / run / name).string();
  }

  fs::path dir_;
};

std::vector<char> bytes(const std::string& path) { return read_file(path); }

// metrics.jsonl without the fields that measure time.
std::vector<std::string> metrics_without_timing(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key : {"samples_per_s", "data_wait", "seconds", "val_seconds"}) j.erase(key);
    lines.push_back(j.dump());
  }
  return lines;
}

TEST_F(TrainTest, TwoRunsWithTheSameSeedWriteTheSameModelAndMetrics) {
  const TrainSummary a = train_two_ranks(options("a"));
  const TrainSummary b = train_two_ranks(options("b"));
  EXPECT_EQ(a.epochs_done, 2);
  EXPECT_EQ(a.global_step, 4);
  EXPECT_FALSE(a.interrupted);
  EXPECT_GE(a.last_val_dice, 0);
  EXPECT_EQ(a.last_loss, b.last_loss);
  EXPECT_EQ(a.last_val_dice, b.last_val_dice);
  EXPECT_EQ(bytes(file("a", "model.pt")), bytes(file("b", "model.pt")));
  const auto metrics = metrics_without_timing(file("a", "metrics.jsonl"));
  EXPECT_EQ(metrics.size(), 6u);  // 4 steps, 2 epochs
  EXPECT_EQ(metrics, metrics_without_timing(file("b", "metrics.jsonl")));
}

// --amp bf16 on the CPU with the spleen tutorial's network shape (two softmax
// classes, batch norm, four levels): torch's oneDNN bfloat16 convolutions give
// other gradients from run to run at the same inputs, on one thread (also in
// Python: MONAI's UNet, torch 2.11; now and then a NaN), so with --deterministic
// the trainer runs them without oneDNN. Two runs write the same bytes.
TEST_F(TrainTest, AmpBf16OnTheCpuRepeatsBitIdenticalWithTheSpleenNetworksShape) {
  const auto spleen_like = [this](const std::string& run) {
    TrainOptions o = options(run);
    o.amp = Amp::kBf16;
    o.model.out_channels = 2;
    o.activation = Activation::kSoftmax;
    o.model.norm = NormKind::kBatch;
    o.model.channels = {4, 8, 16, 32};
    o.model.strides = {2, 2, 2};
    o.model.num_res_units = 2;
    o.val_every = 0;
    o.epochs = 1;
    return o;
  };
  for (const char* run : {"a", "b", "c"})
    run_ranks(1, [&](Communicator& comm) { train(spleen_like(run), comm); });
  EXPECT_EQ(bytes(file("a", "model.pt")), bytes(file("b", "model.pt")));
  EXPECT_EQ(bytes(file("a", "model.pt")), bytes(file("c", "model.pt")));
}

// --model segresnet with --dropout (the BraTS tutorial's 0.2): the masks come
// from the model's own generator, seeded per rank, step and micro-batch, so
// two runs and a stopped-and-resumed run write the same bytes. With torch's
// global generator (shared by the rank threads here, unseeded) they did not.
TEST_F(TrainTest, SegResNetWithDropoutRepeatsAndResumesBitIdentical) {
  const auto segresnet = [this](const std::string& run, double dropout) {
    TrainOptions o = options(run);
    o.model.kind = ModelKind::kSegResNet;
    o.model.blocks_down = {1, 1};
    o.model.blocks_up = {1};
    o.model.dropout = dropout;
    return o;
  };
  train_two_ranks(segresnet("a", 0.2));
  train_two_ranks(segresnet("b", 0.2));
  EXPECT_EQ(bytes(file("a", "model.pt")), bytes(file("b", "model.pt")));
  TrainOptions stopped = segresnet("stopped", 0.2);
  stopped.max_steps = 1;
  train_two_ranks(stopped);
  TrainOptions resumed = segresnet("stopped", 0.2);
  resumed.resume = (dir_ / "stopped").string();
  train_two_ranks(resumed);
  EXPECT_EQ(bytes(file("stopped", "model.pt")), bytes(file("a", "model.pt")));
  train_two_ranks(segresnet("no_dropout", 0));  // the masks do act
  EXPECT_NE(bytes(file("no_dropout", "model.pt")), bytes(file("a", "model.pt")));
}

// --amp bf16 (autocast to bfloat16 on the CPU): the same bytes twice and
// after a stop and resume, and not the float32 run's bytes (autocast acts).
TEST_F(TrainTest, AmpBf16RepeatsAndResumesBitIdentical) {
  const auto bf16 = [this](const std::string& run) {
    TrainOptions o = options(run);
    o.amp = Amp::kBf16;
    return o;
  };
  train_two_ranks(bf16("a"));
  train_two_ranks(bf16("b"));
  EXPECT_EQ(bytes(file("a", "model.pt")), bytes(file("b", "model.pt")));
  TrainOptions stopped = bf16("stopped");
  stopped.max_steps = 3;
  train_two_ranks(stopped);
  TrainOptions resumed = bf16("stopped");
  resumed.resume = (dir_ / "stopped").string();
  train_two_ranks(resumed);
  EXPECT_EQ(bytes(file("stopped", "model.pt")), bytes(file("a", "model.pt")));
  train_two_ranks(options("fp32"));
  EXPECT_NE(bytes(file("fp32", "model.pt")), bytes(file("a", "model.pt")));
}

TEST_F(TrainTest, ResumingAfterMaxStepsEqualsAnUninterruptedRun) {
  train_two_ranks(options("whole"));
  const auto whole_model = bytes(file("whole", "model.pt"));
  const auto whole_metrics = metrics_without_timing(file("whole", "metrics.jsonl"));
  // Step 1 stops mid-epoch, step 2 on an epoch's last step, step 3 mid-way
  // through the last epoch.
  for (const int64_t k : {1, 2, 3}) {
    const std::string run = "stopped" + std::to_string(k);
    TrainOptions stopped = options(run);
    stopped.max_steps = k;
    const TrainSummary s = train_two_ranks(stopped);
    EXPECT_TRUE(s.interrupted) << "max_steps=" << k;
    EXPECT_EQ(s.global_step, k);
    EXPECT_TRUE(fs::exists(file(run, "checkpoint.pt"))) << "max_steps=" << k;
    TrainOptions resumed = options(run);
    resumed.resume = (dir_ / run).string();
    const TrainSummary r = train_two_ranks(resumed);
    EXPECT_FALSE(r.interrupted) << "max_steps=" << k;
    EXPECT_EQ(r.global_step, 4);
    EXPECT_EQ(bytes(file(run, "model.pt")), whole_model) << "max_steps=" << k;
    EXPECT_EQ(metrics_without_timing(file(run, "metrics.jsonl")), whole_metrics)
        << "max_steps=" << k;
  }
}

// The largest |a - b| over two model.pt files' tensors, relative to max(1, |b|).
double max_relative_difference(const std::string& a, const std::string& b) {
  const NamedTensors ta = load_tensor_dict(a), tb = load_tensor_dict(b);
  EXPECT_EQ(ta.size(), tb.size());
  double most = 0;
  for (size_t i = 0; i < ta.size() && i < tb.size(); ++i) {
    EXPECT_EQ(ta[i].first, tb[i].first);
    const at::Tensor d = (ta[i].second - tb[i].second).abs() / tb[i].second.abs().clamp_min(1.0);
    most = std::max(most, d.max().item<double>());
  }
  return most;
}

// --device: auto is the CPU here; cuda is refused naming the flag before
// anything is written; the backend follows the device and how many local
// ranks share its GPUs: NCCL with one GPU per rank, else Gloo, and an
// explicit NCCL over a shared GPU is refused naming both counts.
TEST_F(TrainTest, DeviceAutoIsTheCpuWithoutCudaAndCudaIsRefusedByName) {
  const int64_t gpus = at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0;
  const c10::Device cuda0(c10::kCUDA, 0);
  EXPECT_EQ(resolve_device(DeviceKind::kCpu, 3), c10::Device(c10::kCPU));
  EXPECT_EQ(backend_for(Backend::kAuto, c10::Device(c10::kCPU), 4), Backend::kGloo);
  EXPECT_EQ(backend_for(Backend::kGloo, cuda0, 1), Backend::kGloo);
  EXPECT_EQ(backend_for(Backend::kAuto, cuda0, gpus + 1), Backend::kGloo);  // ranks share a GPU
  try {
    backend_for(Backend::kNccl, cuda0, gpus + 1);
    FAIL() << "NCCL with two ranks on one GPU";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--backend nccl: " + std::to_string(gpus + 1) +
                                               " ranks on this machine share " +
                                               std::to_string(gpus) + " GPU(s)"));
  }
  if (gpus > 0) {
    EXPECT_EQ(backend_for(Backend::kAuto, cuda0, gpus), Backend::kNccl);
    EXPECT_EQ(backend_for(Backend::kNccl, cuda0, 1), Backend::kNccl);
    EXPECT_EQ(resolve_device(DeviceKind::kAuto, gpus + 1), c10::Device(c10::kCUDA, 1 % gpus));
    return;
  }
  EXPECT_EQ(resolve_device(DeviceKind::kAuto, 1), c10::Device(c10::kCPU));
  TrainOptions o = options("cuda");
  o.device = DeviceKind::kCuda;
  try {
    o.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("train: --device cuda: no CUDA device here"));
  }
  EXPECT_FALSE(fs::exists(file("cuda", "config.json")));
}

// On a GPU (skipped without one): one rank trains on cuda:0, with the
// deterministic algorithms the trainer asks for by default, and ends where
// the CPU run does within float tolerance (cuDNN sums in another order).
// With SGD: Adam divides each step by sqrt(v), so a weight whose gradient is
// near zero moves by up to lr a step in whichever direction rounding picks
// (on the H100, 2026-11-27, Adam's 8 steps ended 3.8e-3 apart at one weight);
// SGD's step is proportional to the gradient, so the runs stay at rounding's
// distance.
TEST_F(TrainTest, CudaTrainsWhereTheCpuDoesWithinTolerance) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  const auto one_rank = [this](const std::string& run, DeviceKind device) {
    TrainOptions o = options(run);
    o.optimizer = Optimizer::kSgd;
    o.lr = 0.01;
    o.device = device;
    run_ranks(1, [&](Communicator& comm) { train(o, comm); });
  };
  one_rank("cpu", DeviceKind::kCpu);
  one_rank("gpu", DeviceKind::kCuda);
  EXPECT_LT(max_relative_difference(file("gpu", "model.pt"), file("cpu", "model.pt")), 1e-3);
}

// The largest difference between two runs' losses, line by line.
double max_loss_difference(const std::string& a, const std::string& b) {
  std::ifstream in_a(a), in_b(b);
  std::string la, lb;
  double most = 0;
  while (std::getline(in_a, la) && std::getline(in_b, lb))
    most = std::max(most, std::abs(nlohmann::json::parse(la)["loss"].get<double>() -
                                   nlohmann::json::parse(lb)["loss"].get<double>()));
  return most;
}

// The step's speed levers (docs/platform.md) on one rank: --log-every reads
// the loss later and writes the same bytes; the CUDA graph's step, run
// uncaptured on the CPU, trains bit for bit as the fused optimizer it needs,
// with and without --amp fp16's scaler (its flag never read to the host);
// the fused optimizer and channels-last weights end within float rounding of
// the plain step.
TEST_F(TrainTest, SpeedLeversTrainAsThePlainStep) {
  const auto one_rank = [this](const std::string& run,
                               const std::function<void(TrainOptions&)>& set) {
    TrainOptions o = options(run);
    o.clip_grad_norm = 0.5;  // clipped on the device too
    set(o);
    TrainSummary s;
    run_ranks(1, [&](Communicator& comm) { s = train(o, comm); });
    return s;
  };
  const TrainSummary plain = one_rank("plain", [](TrainOptions&) {});
  EXPECT_EQ(plain.global_step, 8);
  one_rank("log3", [](TrainOptions& o) { o.log_every = 3; });
  one_rank("fused", [](TrainOptions& o) { o.fused_optimizer = true; });
  one_rank("graph", [](TrainOptions& o) { o.fused_optimizer = o.cuda_graph = true; });
  one_rank("last", [](TrainOptions& o) { o.channels_last = true; });
  one_rank("fp16", [](TrainOptions& o) {
    o.amp = Amp::kFp16;
    o.fused_optimizer = true;
  });
  one_rank("fp16_graph", [](TrainOptions& o) {
    o.amp = Amp::kFp16;
    o.fused_optimizer = o.cuda_graph = true;
    o.log_every = 4;
  });
  const auto metrics = metrics_without_timing(file("plain", "metrics.jsonl"));
  EXPECT_EQ(metrics.size(), 10u);  // 8 steps, 2 epochs
  EXPECT_EQ(metrics, metrics_without_timing(file("log3", "metrics.jsonl")));
  EXPECT_EQ(bytes(file("plain", "model.pt")), bytes(file("log3", "model.pt")));
  EXPECT_EQ(bytes(file("fused", "model.pt")), bytes(file("graph", "model.pt")));
  EXPECT_EQ(metrics_without_timing(file("fused", "metrics.jsonl")),
            metrics_without_timing(file("graph", "metrics.jsonl")));
  EXPECT_EQ(bytes(file("fp16", "model.pt")), bytes(file("fp16_graph", "model.pt")));
  EXPECT_EQ(metrics_without_timing(file("fp16", "metrics.jsonl")),
            metrics_without_timing(file("fp16_graph", "metrics.jsonl")));
  // Adam moves a weight by up to lr (1e-3) a step whatever its gradient's
  // size, so rounding in a tiny gradient can move one by about that much;
  // the losses agree far closer.
  EXPECT_NE(bytes(file("plain", "model.pt")), bytes(file("fused", "model.pt")));
  for (const char* run : {"fused", "last"}) {
    EXPECT_LT(max_relative_difference(file(run, "model.pt"), file("plain", "model.pt")), 2e-3)
        << run;
    EXPECT_LT(max_loss_difference(file(run, "metrics.jsonl"), file("plain", "metrics.jsonl")), 1e-4)
        << run;
  }
}

// What the CUDA graph cannot capture is refused by name before a step runs.
TEST_F(TrainTest, CudaGraphRefusesWhatItCannotCapture) {
  const auto refusal = [this](const std::function<void(TrainOptions&)>& set) -> std::string {
    TrainOptions o = options("refused");
    o.fused_optimizer = o.cuda_graph = true;
    set(o);
    try {
      o.validate();
      o.check_world_size(2);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  using ::testing::HasSubstr;
  EXPECT_THAT(refusal([](TrainOptions& o) { o.fused_optimizer = false; }),
              HasSubstr("--cuda-graph captures one step of one batch: it needs --optimizer adam "
                        "with --fused-optimizer"));
  EXPECT_THAT(refusal([](TrainOptions& o) { o.accumulate = 2; }), HasSubstr("--accumulate=2"));
  EXPECT_THAT(refusal([](TrainOptions& o) { o.model.dropout = 0.2; }), HasSubstr("--dropout=0.2"));
  EXPECT_THAT(refusal([](TrainOptions&) {}),
              HasSubstr("--cuda-graph captures one rank's step, and 2 ranks"));
  EXPECT_THAT(refusal([](TrainOptions& o) {
                o.cuda_graph = false;
                o.optimizer = Optimizer::kSgd;
              }),
              HasSubstr("--fused-optimizer is adam's fused kernel: --optimizer sgd"));
}

// On a GPU (skipped without one): SegResNet (the BraTS tutorial's network)
// trains on CUDA under the deterministic algorithms the trainer asks for by
// default (its trilinear up-sampling's backward through upsample.h, which
// CUDA runs deterministically), and two runs write the same weights.
TEST_F(TrainTest, CudaSegResNetTrainsUnderDeterministicAlgorithmsTwiceAlike) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  const auto one_rank = [this](const std::string& run) {
    TrainOptions o = options(run);
    o.device = DeviceKind::kCuda;
    o.model.kind = ModelKind::kSegResNet;
    o.model.init_filters = 4;
    o.model.num_groups = 2;
    o.model.blocks_down = {1, 1};
    o.model.blocks_up = {1};
    run_ranks(1, [&](Communicator& comm) { train(o, comm); });
  };
  one_rank("a");
  one_rank("b");
  EXPECT_EQ(bytes(file("a", "model.pt")), bytes(file("b", "model.pt")));
}

// The data columns of each step's fingerprints line: which samples, their
// augmentation and their bytes.
std::vector<std::string> data_fingerprints(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("type", "") != "step") continue;
    lines.push_back(j["indices"].get<std::string>() + " " + j["augmentation"].get<std::string>() +
                    " " + j["bytes"].get<std::string>());
  }
  return lines;
}

// --cache-device device on the CPU runs the GPU-cache path's code (the cache's
// tensors on the training device, the augmentation as tensor ops there, the
// batches made there) and trains bit for bit as the host path, on two ranks
// with worker threads; cuda is refused by name where the network is on the CPU.
TEST_F(TrainTest, CacheOnTheTrainingDeviceTrainsBitIdenticalToTheHostCacheOnTheCpu) {
  TrainOptions host = options("host"), device = options("device");
  host.device = device.device = DeviceKind::kCpu;
  device.cache_device = CacheDevice::kDevice;
  device.workers = 2;
  (void)train_two_ranks(host);
  (void)train_two_ranks(device);
  EXPECT_EQ(bytes(file("host", "model.pt")), bytes(file("device", "model.pt")));
  EXPECT_EQ(metrics_without_timing(file("host", "metrics.jsonl")),
            metrics_without_timing(file("device", "metrics.jsonl")));
  const auto data = data_fingerprints(file("host", "fingerprints.jsonl"));
  EXPECT_EQ(data.size(), 4u);
  EXPECT_EQ(data, data_fingerprints(file("device", "fingerprints.jsonl")));
  EXPECT_EQ(resolve_cache_device(CacheDevice::kHost, c10::Device(c10::kCUDA, 1)), std::nullopt);
  EXPECT_EQ(resolve_cache_device(CacheDevice::kCuda, c10::Device(c10::kCUDA, 1)),
            c10::Device(c10::kCUDA, 1));
  TrainOptions refused = options("refused");
  refused.device = DeviceKind::kCpu;
  refused.cache_device = CacheDevice::kCuda;
  try {
    refused.validate();
    FAIL() << "--cache-device cuda was accepted for a network on the CPU";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("train: --cache-device cuda: the network trains on "
                                               "cpu (--device)"));
  }
}

// On a GPU (skipped without one): the cache in GPU memory and the augmentation
// there feed the same samples, crops, turns and batch bytes at every step as
// the host cache copied to the GPU, and train to the same model within float
// tolerance.
TEST_F(TrainTest, CudaCacheFeedsTheHostCachesBatchesOnTheGpu) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  TrainOptions host = options("host"), gpu = options("gpu");
  host.device = gpu.device = DeviceKind::kCuda;
  gpu.cache_device = CacheDevice::kCuda;
  gpu.workers = 2;
  run_ranks(1, [&](Communicator& comm) { train(host, comm); });
  run_ranks(1, [&](Communicator& comm) { train(gpu, comm); });
  const auto data = data_fingerprints(file("host", "fingerprints.jsonl"));
  EXPECT_FALSE(data.empty());
  EXPECT_EQ(data, data_fingerprints(file("gpu", "fingerprints.jsonl")));
  EXPECT_LT(max_relative_difference(file("gpu", "model.pt"), file("host", "model.pt")), 1e-4);
}

// The options' roles live in their table rows: what a resumed run must keep
// (the data, randomness, network: resume refuses a change) and what only
// says where a run writes or how it waits (diff sets it aside); every kept
// key is saved in config.json, where resume reads it back.
TEST(OptionRolesTest, KeptAndRunLocalKeysComeFromTheTable) {
  const auto& kept = TrainOptions::keys_with(Field::Role::kKept);
  const auto& local = TrainOptions::keys_with(Field::Role::kLocal);
  for (const char* key :
       {"seed", "data", "crop", "channels", "pixdim", "prefix_order", "amp", "invariant", "labels",
        "a_min", "crop_foreground", "rot90_prob", "flip_prob", "rand_shift", "rand_scale"})
    EXPECT_EQ(kept.count(key), 1u) << key;
  for (const char* key : {"out", "workers", "cache_rate", "cache_dir", "fingerprints", "timeout"})
    EXPECT_EQ(local.count(key), 1u) << key;
  for (const char* key : {"lr", "epochs", "val_every", "cache_device"})
    EXPECT_EQ(kept.count(key) + local.count(key), 0u) << key << " may change between runs";
  const nlohmann::json saved = nlohmann::json::parse(TrainOptions().to_json());
  for (const std::string& key : kept) EXPECT_TRUE(saved.contains(key)) << key;
}

// --deterministic: torch's refusal of an operation without a deterministic
// implementation (a real one: put_ without accumulate, refused on the CPU
// too) is read for the operation's name, which train's error then gives.
TEST(DeterministicTest, ReadsTheOperationTorchRefusesFromItsMessage) {
  auto& context = at::globalContext();
  const bool was = context.deterministicAlgorithms();
  const bool was_warn_only = context.deterministicAlgorithmsWarnOnly();
  context.setDeterministicAlgorithms(true, false);
  std::string message;
  try {
    at::zeros({5}).put_(at::tensor({1, 1}, at::kLong), at::tensor({1.0f, 2.0f}), false);
  } catch (const c10::Error& e) {
    message = e.msg();
  }
  context.setDeterministicAlgorithms(was, was_warn_only);
  ASSERT_FALSE(message.empty()) << "torch no longer refuses put_ under deterministic algorithms";
  EXPECT_EQ(refused_nondeterministic_kernel(message), "put_");
  EXPECT_EQ(refused_nondeterministic_kernel(
                "upsample_trilinear3d_backward_out_cuda does not have a deterministic "
                "implementation, but you set 'torch.use_deterministic_algorithms(True)'."),
            "upsample_trilinear3d_backward_out_cuda");
  EXPECT_EQ(refused_nondeterministic_kernel("CUDA out of memory. Tried to allocate 2.00 GiB"), "");
}

// `volshard repro` on CUDA without --deterministic expects the weights to
// differ (and says why) instead of a false FAIL; everywhere else it expects
// bits. The table marks such a pass "expected" and gives the reason.
TEST(ReproTest, ExpectsWeightsToDifferOnlyOnCudaWithoutDeterministicAlgorithms) {
  TrainOptions o;
  EXPECT_EQ(expected_nondeterminism(o, c10::Device(c10::kCUDA, 0)), "");
  EXPECT_EQ(expected_nondeterminism(o, c10::Device(c10::kCPU)), "");
  o.deterministic = false;
  EXPECT_EQ(expected_nondeterminism(o, c10::Device(c10::kCPU)), "");
  const std::string why = expected_nondeterminism(o, c10::Device(c10::kCUDA, 0));
  EXPECT_THAT(why, ::testing::HasSubstr("without --deterministic, cuDNN's convolution backward"));
  ReproCheck differed{"same seed twice", true, "model.pt DIFFERS", why};
  ReproCheck failed{"world-size invariance", false, "DIFFERENT", ""};
  const std::string table = format_repro_table({differed, failed});
  EXPECT_THAT(table, ::testing::HasSubstr("| expected | model.pt DIFFERS; weights differ as "
                                          "expected: on CUDA without --deterministic"));
  EXPECT_THAT(table, ::testing::HasSubstr("| FAIL     | DIFFERENT\n"));
}

// Volume i of an edge^3 source: image all i, label zeros; `loaded` counts the calls.
SampleSource constant_volumes(int64_t edge, std::atomic<int64_t>* loaded = nullptr) {
  return [edge, loaded](int64_t i) {
    if (loaded) ++*loaded;
    Sample s;
    s.image = at::full({1, edge, edge, edge}, static_cast<float>(i));
    s.label = at::zeros({1, edge, edge, edge});
    return s;
  };
}

// The loader's batches a step ahead: on the CPU each comes back as the loader
// made it, in order, and the next one has already been taken from the loader
// (its source called) when a batch is handed out; a new epoch drops it.
TEST(BatchesAheadTest, HandsOutTheLoadersBatchesInOrderWithTheNextOneAlreadyTaken) {
  std::atomic<int64_t> loaded{0};
  const SampleSource source = constant_volumes(4, &loaded);
  LoaderOptions o;
  o.batch_size = 1;
  o.workers = 0;  // the source runs when the loader's next() is called
  o.pin_memory = PinMemory::kOff;
  DataLoader loader(source, Compose(std::vector<std::shared_ptr<const Transform>>{}), o);
  BatchesAhead ahead(loader, c10::Device(c10::kCPU));
  EXPECT_FALSE(ahead.side_stream());
  for (const int64_t epoch : {0, 1}) {
    loaded = 0;
    ahead.start_epoch({5, 2, 9}, epoch);
    std::vector<float> seen;
    while (auto b = ahead.next()) {
      seen.push_back(b->image.flatten()[0].item<float>());
      EXPECT_TRUE(b->image.is_same(b->host.image)) << "on the CPU nothing is copied";
      EXPECT_EQ(loaded.load(), std::min<int64_t>(static_cast<int64_t>(seen.size()) + 1, 3));
    }
    EXPECT_EQ(seen, (std::vector<float>{5, 2, 9}));
  }
  ahead.start_epoch({1, 3}, 2);
  ASSERT_TRUE(ahead.next().has_value());
  ahead.start_epoch({4}, 3);  // the batch of index 3, taken ahead, is dropped
  const auto b = ahead.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->image.flatten()[0].item<float>(), 4.0f);
  EXPECT_FALSE(ahead.next().has_value());
}

// The data wait a step reports is the time its own next() spent in the
// loader: the first call of an epoch takes two batches (this one and the one
// ahead) and reports both waits; later calls the one batch they take ahead.
// Summed over the epoch it is every batch's wait once. (It was each batch's
// own wait, spent a step earlier: a step could report more waiting than it
// lasted, 1.87 of its time at an epoch's start on the H100.)
TEST(BatchesAheadTest, EachCallReportsTheWaitItSpentInTheLoader) {
  const SampleSource source = constant_volumes(4);
  LoaderOptions o;
  o.batch_size = 1;
  o.workers = 0;  // each batch made inside the loader's next(): every wait is > 0
  DataLoader loader(source, Compose(std::vector<std::shared_ptr<const Transform>>{}), o);
  BatchesAhead ahead(loader, c10::Device(c10::kCPU));
  ahead.start_epoch({0, 1, 2, 3}, 0);
  std::vector<double> waited, own;
  while (auto b = ahead.next()) {
    waited.push_back(b->waited_seconds);
    own.push_back(b->host.wait_seconds);
  }
  ASSERT_EQ(waited.size(), 4u);
  for (const double w : own) EXPECT_GT(w, 0.0);
  EXPECT_DOUBLE_EQ(waited[0], own[0] + own[1]);
  EXPECT_DOUBLE_EQ(waited[1], own[2]);
  EXPECT_DOUBLE_EQ(waited[2], own[3]);
  EXPECT_DOUBLE_EQ(waited[3], 0.0);  // nothing left to take ahead
}

// On a GPU (skipped without one): copies run on a side stream and each batch
// arrives whole on the device.
TEST(BatchesAheadTest, CopiesOnASideStreamAndDeliversWholeBatchesOnTheGpu) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  const SampleSource source = constant_volumes(64);
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 2;
  DataLoader loader(source, Compose(std::vector<std::shared_ptr<const Transform>>{}), o);
  BatchesAhead ahead(loader, c10::Device(c10::kCUDA, 0));
  EXPECT_TRUE(ahead.side_stream());
  ahead.start_epoch({0, 1, 2, 3, 4, 5, 6, 7}, 0);
  int64_t batches = 0;
  while (auto b = ahead.next()) {
    EXPECT_TRUE(b->image.is_cuda());
    EXPECT_TRUE(at::equal(b->image.cpu(), b->host.image));
    ++batches;
  }
  EXPECT_EQ(batches, 4);
}

// --accumulate 4 over batches of one volume takes the optimizer steps of
// batches of four on one rank: the same volumes per step (4, then the epoch's
// last 2), the loss their mean. Equal up to the order of float sums; and
// one gradient all-reduce per optimizer step, not per batch.
TEST_F(TrainTest, AccumulatingFourBatchesOfOneEqualsBatchesOfFour) {
  TrainOptions base = options("base");
  base.val_every = 0;  // all 6 volumes train
  base.epochs = 1;
  base.optimizer = Optimizer::kSgd;
  base.momentum = 0;
  base.lr = 0.1;
  TrainOptions four = base, accumulated = base, single = base;
  four.out_dir = (dir_ / "four").string();
  four.batch_size = 4;
  accumulated.out_dir = (dir_ / "accumulated").string();
  accumulated.batch_size = 1;
  accumulated.accumulate = 4;
  single.out_dir = (dir_ / "single").string();
  single.batch_size = 1;
  TrainSummary s_four, s_accumulated, s_single;
  run_ranks(1, [&](Communicator& comm) { s_four = train(four, comm); });
  run_ranks(1, [&](Communicator& comm) { s_accumulated = train(accumulated, comm); });
  run_ranks(1, [&](Communicator& comm) { s_single = train(single, comm); });
  EXPECT_EQ(s_four.global_step, 2);
  EXPECT_EQ(s_accumulated.global_step, 2);
  EXPECT_EQ(s_single.global_step, 6);
  const double accumulated_vs_four =
      max_relative_difference(file("accumulated", "model.pt"), file("four", "model.pt"));
  EXPECT_LT(accumulated_vs_four, 1e-5);
  // Not vacuous: six steps of one volume end elsewhere.
  EXPECT_GT(max_relative_difference(file("single", "model.pt"), file("four", "model.pt")), 1e-3);
  EXPECT_NEAR(s_accumulated.last_loss, s_four.last_loss, 1e-5);
  EXPECT_EQ(s_accumulated.gradient_allreduces, s_four.gradient_allreduces);
  EXPECT_EQ(s_single.gradient_allreduces, 3 * s_four.gradient_allreduces);
  EXPECT_GT(s_four.gradient_allreduces, 0);
}

// Two ranks: --accumulate 2 halves the all-reduces, and a run stopped
// mid-epoch resumes bit-identical, the accumulation included.
TEST_F(TrainTest, AccumulationOnTwoRanksHalvesTheAllReducesAndResumesBitIdentical) {
  TrainOptions plain = options("plain");
  plain.val_every = 0;
  plain.epochs = 2;
  TrainOptions accumulated = plain;
  accumulated.out_dir = (dir_ / "accumulated").string();
  accumulated.accumulate = 2;
  // 6 volumes on 2 ranks, batches of 1: 3 batches per rank and epoch.
  const TrainSummary p = train_two_ranks(plain);
  const TrainSummary a = train_two_ranks(accumulated);
  EXPECT_EQ(p.global_step, 6);
  EXPECT_EQ(a.global_step, 4);  // 2 + 1 batches per epoch
  EXPECT_EQ(3 * a.gradient_allreduces, 2 * p.gradient_allreduces);
  TrainOptions stopped = accumulated;
  stopped.out_dir = (dir_ / "stopped").string();
  stopped.max_steps = 1;
  EXPECT_TRUE(train_two_ranks(stopped).interrupted);
  stopped.max_steps = -1;
  stopped.resume = stopped.out_dir;
  EXPECT_EQ(train_two_ranks(stopped).global_step, 4);
  EXPECT_EQ(bytes(file("stopped", "model.pt")), bytes(file("accumulated", "model.pt")));
}

// --invariant: the same model.pt bytes at W = 1, 2 and 4 (W = 1 is gradient
// accumulation over the step's volumes), and a run stopped at W = 2 and
// resumed at W = 4 ends there too. 4 training volumes, a global batch of 3:
// steps of 3 and 1 volumes, so at W = 4 a rank has none in the second.
TEST_F(TrainTest, InvariantTrainingWritesTheSameModelAtWorldSizes124AndAfterAnElasticResume) {
  const auto invariant = [&](const std::string& run) {
    TrainOptions o = options(run);
    o.invariant = true;
    o.batch_size = 3;
    return o;
  };
  std::vector<char> reference;
  std::vector<std::string> reference_metrics;
  for (const int64_t w : {1, 2, 4}) {
    const std::string run = "w" + std::to_string(w);
    std::vector<TrainSummary> s(static_cast<size_t>(w));
    run_ranks(static_cast<int>(w), [&](Communicator& comm) {
      s[static_cast<size_t>(comm.rank())] = train(invariant(run), comm);
    });
    EXPECT_EQ(s[0].global_step, 4) << "W=" << w;
    if (w == 1) {
      reference = bytes(file(run, "model.pt"));
      reference_metrics = metrics_without_timing(file(run, "metrics.jsonl"));
      continue;
    }
    EXPECT_EQ(bytes(file(run, "model.pt")), reference) << "W=" << w;
    EXPECT_EQ(metrics_without_timing(file(run, "metrics.jsonl")), reference_metrics) << "W=" << w;
  }
  TrainOptions stopped = invariant("elastic");
  stopped.max_steps = 1;
  run_ranks(2, [&](Communicator& comm) { train(stopped, comm); });
  TrainOptions resumed = invariant("elastic");
  resumed.resume = (dir_ / "elastic").string();
  run_ranks(4, [&](Communicator& comm) { train(resumed, comm); });
  EXPECT_EQ(bytes(file("elastic", "model.pt")), reference);
  // What it fixes: ordinary data parallelism at W = 1 and 2 over the same
  // volumes per step (1 x 4 and 2 x 2) parts in the last bits of the
  // gradients (fingerprints.jsonl hashes them after the all-reduce; the
  // weights after one small SGD step may or may not keep that difference,
  // depending on the machine's kernels).
  TrainOptions one = options("ordinary1"), two = options("ordinary2");
  one.batch_size = 4;
  one.val_every = two.val_every = 0;
  two.batch_size = 2;
  one.epochs = two.epochs = 1;
  one.optimizer = two.optimizer = Optimizer::kSgd;  // Adam's first step is nearly lr * sign(g)
  one.momentum = two.momentum = 0;
  run_ranks(1, [&](Communicator& comm) { train(one, comm); });
  run_ranks(2, [&](Communicator& comm) { train(two, comm); });
  const auto first_step_grads = [this](const std::string& run) {
    std::ifstream in(file(run, "fingerprints.jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("type", "") == "step") return j["grads"].dump();
    }
    return std::string("none");
  };
  EXPECT_NE(first_step_grads("ordinary1"), first_step_grads("ordinary2"));
  EXPECT_EQ(first_step_grads("w1"), first_step_grads("w2"));  // --invariant: the same sums
}

TEST_F(TrainTest, InvariantTrainingRefusesWhatWouldMixVolumesOrRanks) {
  TrainOptions o = options("refused");
  o.invariant = true;
  o.model.norm = NormKind::kBatch;
  EXPECT_THROW(
      try { o.validate(); } catch (const std::invalid_argument& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("--norm batch"));
        throw;
      },
      std::invalid_argument);
  o.model.norm = NormKind::kInstance;
  o.model.dropout = 0.1;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.model.dropout = 0;
  o.accumulate = 2;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

// Warm-up: step s < N at lr * (s + 1) / N, then the schedule (constant here).
TEST_F(TrainTest, WarmupRaisesTheLearningRateLinearlyThenTheScheduleRuns) {
  TrainOptions o = options("warm");
  o.warmup_steps = 3;
  o.lr = 0.004;
  train_two_ranks(o);
  std::vector<double> lrs;
  std::ifstream in(file("warm", "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("type", "") == "step") lrs.push_back(j.at("lr").get<double>());
  }
  ASSERT_EQ(lrs.size(), 4u);
  EXPECT_DOUBLE_EQ(lrs[0], 0.004 / 3);
  EXPECT_DOUBLE_EQ(lrs[1], 0.004 * 2 / 3);
  EXPECT_DOUBLE_EQ(lrs[2], 0.004);
  EXPECT_DOUBLE_EQ(lrs[3], 0.004);
}

// --clip-grad-norm c: one SGD step from the same weights moves them by at most
// lr * c (L2 over every parameter), and without it by more.
TEST_F(TrainTest, ClippingBoundsTheStepByLrTimesTheNorm) {
  TrainOptions first = options("first");
  first.max_steps = 1;
  first.optimizer = Optimizer::kSgd;
  first.momentum = 0;
  first.lr = 0.5;
  train_two_ranks(first);
  const std::string start = file("first", "model.pt");
  auto step_norm = [&](const std::string& run, double clip) {
    TrainOptions o = first;
    o.out_dir = (dir_ / run).string();
    o.init_weights = start;
    o.clip_grad_norm = clip;
    train_two_ranks(o);
    const NamedTensors a = load_tensor_dict(file(run, "model.pt")), b = load_tensor_dict(start);
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i)
      sum += (a[i].second - b[i].second).pow(2).sum().item<double>();
    return std::sqrt(sum);
  };
  const double clip = 1e-3;
  EXPECT_LE(step_norm("clipped", clip), 0.5 * clip * (1 + 1e-4));
  EXPECT_GT(step_norm("free", 0), 0.5 * clip * 10);
}

TEST_F(TrainTest, AFreshRunIntoAFolderHoldingARunIsRefusedUnlessResumedOrOverwritten) {
  TrainOptions o = options("run");
  EXPECT_NO_THROW(check_training_config(o, 2));  // no folder yet
  fs::create_directories(o.out_dir);
  EXPECT_NO_THROW(check_training_config(o, 2));  // an empty folder
  // What a start that failed before its first checkpoint leaves: nothing to
  // resume, so the retry may reuse the folder.
  std::ofstream(file("run", "config.json")) << "{}\n";
  std::ofstream(file("run", "metrics.jsonl")) << "{}\n";
  EXPECT_NO_THROW(check_training_config(o, 2));
  std::ofstream(file("run", "checkpoint.pt")) << "PK";
  EXPECT_THAT(
      [&] { check_training_config(o, 2); },
      ::testing::ThrowsMessage<std::invalid_argument>(::testing::AllOf(
          ::testing::HasSubstr("already holds a run"),
          ::testing::HasSubstr("--resume " + o.out_dir), ::testing::HasSubstr("--overwrite"))));
  o.overwrite = true;
  EXPECT_NO_THROW(check_training_config(o, 2));
}

TEST_F(TrainTest, ValEveryZeroHoldsNothingOutAndFewerValidationVolumesThanRanksAreAllowed) {
  TrainOptions o = options("run");
  EXPECT_EQ(list_data(o).val.size(), 2u);
  o.val_every = 0;
  const DataSplit all = list_data(o);
  EXPECT_EQ(all.train.size(), 6u);
  EXPECT_TRUE(all.val.empty());
  EXPECT_THAT(validation_text(o, all, 2), ::testing::HasSubstr("validation: none (--val-every 0)"));
  // Padding is said, not silent: 6 volumes over 4 ranks feed 2 twice; over 8, more ranks.
  EXPECT_THAT(validation_text(o, all, 2), ::testing::StartsWith("6 training volume(s); "));
  EXPECT_THAT(validation_text(o, all, 4),
              ::testing::HasSubstr("over 4 ranks, 2 a rank: DistributedSampler's padding feeds 2 "
                                   "of them twice an epoch;"));
  EXPECT_THAT(
      validation_text(o, all, 8),
      ::testing::HasSubstr("feeds 2 of them twice an epoch (more ranks than training volumes)"));
  o = options("run");
  o.val_fraction = 0.1;  // one volume, two ranks
  EXPECT_NO_THROW(check_training_config(o, 2));
  EXPECT_THAT(validation_text(o, list_data(o), 2), ::testing::HasSubstr("on 1 of 2 ranks"));
  const TrainSummary s = train_two_ranks(o);
  EXPECT_GE(s.last_val_dice, 0);
}

// A volume's validation cost is its sliding windows times their voxels, on
// the shape the prefix's Spacing gives.
TEST_F(TrainTest, ValidationCostCountsTheSlidingWindowsOfTheResampledShape) {
  TrainOptions o = options("costs");
  o.roi = {16};  // 24^3: windows at 0 and 8 per axis (interval 12)
  const DataSplit d = list_data(o);
  EXPECT_EQ(validation_costs(o, d.val), std::vector<int64_t>(d.val.size(), 8 * 16 * 16 * 16));
  o.feed.prefix.pixdim = {2.0, 2.0, 2.0};  // 12^3: one window, padded
  EXPECT_EQ(validation_costs(o, d.val), std::vector<int64_t>(d.val.size(), 16 * 16 * 16));
}

// Validation's sliding window, when the network's activations on its windows
// find no memory (past the up-front checks), names the volume, the windows and
// what needs less; it was c10's "DefaultCPUAllocator: not enough memory" with
// a C++ backtrace, naming no volume.
TEST_F(TrainTest, AValidationWindowThatFindsNoMemoryNamesItsVolume) {
  TrainOptions o = options("oom");
  o.roi = {400};            // each 24^3 volume padded to one 400^3 window: 1 GB a feature map
  o.model.in_channels = 1;  // as train resolves it from the images
  const DataSplit d = list_data(o);
  ASSERT_FALSE(d.val.empty());
  const std::string text = testing::out_of_memory_in_child(dir_.string(), [&] {
    at::set_num_threads(1);
    run_ranks(1, [&](Communicator& comm) {  // rethrows the rank's error
      Model net(o.model);
      (void)validation_scores(net, d.val, o, comm);
    });
  });
  EXPECT_THAT(text, ::testing::StartsWith(d.val[0].image +
                                          ": the network on windows of 400^3, 1 at a time (a "
                                          "smaller --roi or --sw-batch-size needs less): could "
                                          "not allocate "));
}

// Each rank keeps its validation volumes from the first validation to the
// next (ValidationCache, as MONAI's tutorials cache their validation set): a
// second validation scores the same though every image file has been
// overwritten since; without the cache, or with --cache-rate 0, it reads the
// files again and names the one it cannot read.
TEST_F(TrainTest, ValidationKeepsEachRanksVolumesBetweenValidations) {
  TrainOptions o = options("kept");
  o.model.in_channels = 1;
  o.roi = {16};
  const DataSplit d = list_data(o);
  ASSERT_GE(d.val.size(), 2u);
  std::vector<ValidationScores> before(2), after(2), unkept(1);
  std::vector<int64_t> kept(2);
  std::vector<at::ScalarType> label_types(2, at::kFloat);
  const auto overwrite_images = [&] {
    for (const auto& pair : d.val)
      std::ofstream(pair.image, std::ios::binary | std::ios::trunc) << "not a volume";
  };
  run_ranks(1, [&](Communicator& comm) {
    Model net(o.model, 3);
    unkept[0] = validation_scores(net, d.val, o, comm);
  });
  run_ranks(2, [&](Communicator& comm) {
    Model net(o.model, 3);
    ValidationCache cache{CacheOptions{}};
    const auto r = static_cast<size_t>(comm.rank());
    before[r] = validation_scores(net, d.val, o, comm, &cache);
    comm.barrier();  // every rank has read its share
    if (comm.rank() == 0) overwrite_images();
    comm.barrier();
    after[r] = validation_scores(net, d.val, o, comm, &cache);
    kept[r] = cache.cached_items();
    // The kept labels are uint8 (integers in [0, 255]): a quarter of float32's memory.
    const std::vector<int64_t>& share = cache.share([] { return std::vector<int64_t>{}; });
    label_types[r] =
        cache.get(share.front(), [](int64_t) -> Sample { throw std::logic_error("not kept"); })
            .label.scalar_type();
  });
  EXPECT_EQ(before[0].mean, unkept[0].mean);  // the cache changes no value
  EXPECT_EQ(before[0].per_class, unkept[0].per_class);
  EXPECT_EQ(after[0].mean, before[0].mean);
  EXPECT_EQ(after[1].mean, before[0].mean);
  EXPECT_EQ(kept[0] + kept[1], static_cast<int64_t>(d.val.size()));
  EXPECT_EQ(label_types, std::vector<at::ScalarType>(2, at::kByte));
  for (const bool with_cache : {false, true}) {
    try {
      run_ranks(1, [&](Communicator& comm) {
        Model net(o.model, 3);
        CacheOptions none;
        none.cache_rate = 0;  // --cache-rate 0: read at every validation
        ValidationCache cache{none};
        (void)validation_scores(net, d.val, o, comm, with_cache ? &cache : nullptr);
      });
      ADD_FAILURE() << "read an overwritten file";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(d.val[0].image)) << with_cache;
    }
  }
}

// Validation with the inference options (Gaussian blending, nnU-Net's
// mirroring, the largest component) scores as one process does on any number
// of ranks, and each option reaches the scores.
TEST_F(TrainTest, ValidationWithTheInferenceOptionsScoresAlikeOnOneAndTwoRanks) {
  TrainOptions o = options("inference");
  o.model.in_channels = 1;
  o.roi = {16};
  o.overlap = 0.5;
  const DataSplit d = list_data(o);
  const auto scores = [&](const TrainOptions& with, int64_t world) {
    std::vector<ValidationScores> out(static_cast<size_t>(world));
    run_ranks(world, [&](Communicator& comm) {
      Model net(with.model, 3);
      out[static_cast<size_t>(comm.rank())] = validation_scores(net, d.val, with, comm);
    });
    return out[0].mean;
  };
  const double plain = scores(o, 1);
  TrainOptions blended = o;
  blended.inference.blend = BlendMode::kGaussian;
  TrainOptions flipped = o;
  flipped.inference.tta_flips = {0, 1, 2};
  TrainOptions all = o;
  all.inference.blend = BlendMode::kGaussian;
  all.inference.tta_flips = {0, 1, 2};
  all.inference.largest_component = true;
  for (const TrainOptions* with : {&blended, &flipped, &all}) {
    const double one = scores(*with, 1);
    EXPECT_EQ(one, scores(*with, 2));
    EXPECT_NE(one, plain);
    EXPECT_GE(one, 0.0);
    EXPECT_LE(one, 1.0);
  }
}

TEST(ValidationBalanceTest, TheCostliestVolumeGoesFirstToTheLeastLoadedRank) {
  const std::vector<int64_t> costs{10, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const auto by_cost = assign_validation(costs, 2, ValBalance::kCost);
  EXPECT_EQ(by_cost[0], std::vector<int64_t>{0});
  EXPECT_EQ(by_cost[1], (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const auto by_count = assign_validation(costs, 2, ValBalance::kCount);
  EXPECT_EQ(by_count[0], (std::vector<int64_t>{0, 2, 4, 6, 8}));  // MONAI's: loads 14 and 5
  EXPECT_EQ(by_count[1], (std::vector<int64_t>{1, 3, 5, 7, 9}));
  // Properties over random sets: every volume once, lists ascending, and the
  // greedy bound (no rank above the mean load plus the costliest volume).
  uint64_t state = 1;
  const auto next = [&state] {
    return state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  };
  for (int trial = 0; trial < 300; ++trial) {
    const auto n = static_cast<int64_t>(next() >> 59) + 1;      // 1..32
    const auto world = static_cast<int64_t>(next() >> 61) + 1;  // 1..8
    std::vector<int64_t> c(static_cast<size_t>(n));
    int64_t total = 0, most = 0;
    for (auto& v : c) {
      v = static_cast<int64_t>(1 + (next() >> 40) % ((next() >> 63) ? 1000 : 10));
      total += v;
      most = std::max(most, v);
    }
    for (const ValBalance b : {ValBalance::kCost, ValBalance::kCount}) {
      const auto ranks = assign_validation(c, world, b);
      ASSERT_EQ(static_cast<int64_t>(ranks.size()), world);
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (const auto& r : ranks) {
        EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
        int64_t load = 0;
        for (const int64_t i : r) {
          ++seen[static_cast<size_t>(i)];
          load += c[static_cast<size_t>(i)];
        }
        if (b == ValBalance::kCost) {
          EXPECT_LE(load, total / world + most) << "trial " << trial;
        }
      }
      EXPECT_EQ(seen, std::vector<int>(static_cast<size_t>(n), 1));
    }
  }
}

// A loss that became NaN is written as null in metrics.jsonl: the curves
// leave those points out instead of stopping the run at its epoch's end (a
// JSON type error did).
TEST(CurvesTest, LeavesOutTheStepsWhoseLossIsNull) {
  const std::string metrics =
      "{\"type\":\"step\",\"epoch\":0,\"step\":1,\"loss\":0.6}\n"
      "{\"type\":\"step\",\"epoch\":0,\"step\":2,\"loss\":null}\n"
      "{\"type\":\"epoch\",\"epoch\":0,\"step\":2,\"loss\":null}\n";
  Canvas img(1, 1);
  EXPECT_NO_THROW(img = draw_curves(metrics));
  EXPECT_GT(img.width(), 1);
}

TEST(CurvesTest, DrawsEveryStepsLossAndTicksOnBothAxes) {
  std::string metrics;
  for (int step = 1; step <= 40; ++step) {
    metrics += "{\"type\":\"step\",\"epoch\":" + std::to_string((step - 1) / 10) +
               ",\"step\":" + std::to_string(step) +
               ",\"loss\":" + std::to_string(0.9 - step * 0.01) + "}\n";
    if (step % 10 == 0)
      metrics += "{\"type\":\"epoch\",\"epoch\":" + std::to_string(step / 10 - 1) +
                 ",\"step\":" + std::to_string(step) + ",\"loss\":0.5,\"val_dice\":0.7}\n";
  }
  const Canvas img = draw_curves(metrics);
  auto count = [&](Rgb c, int x0, int y0, int x1, int y1) {
    int n = 0;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        const Rgb p = img.at(x, y);
        n += p.r == c.r && p.g == c.g && p.b == c.b;
      }
    return n;
  };
  const int plot_top = 60, plot_bottom = img.height() - 70;
  // The per-step curve (light blue) inside the plot, besides the epoch means.
  EXPECT_GT(count({150, 180, 235}, 61, plot_top, img.width(), plot_bottom), 200);
  EXPECT_GT(count({0, 80, 200}, 61, plot_top, img.width(), plot_bottom), 50);
  // Tick labels under the x axis (several separate labels: 0, 5, 10, ...).
  const int axis = img.height() - 62;
  int runs = 0;
  bool inked = false;
  for (int x = 40; x < img.width(); ++x) {
    bool any = false;
    for (int y = axis + 8; y < axis + 16; ++y) any |= img.at(x, y).r == 0 && img.at(x, y).g == 0;
    if (any && !inked) ++runs;
    inked = any;
  }
  EXPECT_GE(runs, 5);
}

TEST(CurvesTest, DrawsEachClassesDiceWhenTheMetricsHaveClasses) {
  auto metrics_with = [](bool classes) {
    std::string m;
    for (int epoch = 0; epoch < 4; ++epoch) {
      m += "{\"type\":\"epoch\",\"epoch\":" + std::to_string(epoch) +
           ",\"step\":" + std::to_string(10 * (epoch + 1)) + ",\"loss\":0.5,\"val_dice\":0.6";
      if (classes)
        m += ",\"val_dice_per_class\":[0.3,0.8,null],\"val_classes\":[\"TC\",\"WT\",\"ET\"]";
      m += "}\n";
    }
    return m;
  };
  auto count = [](const Canvas& img, Rgb c) {
    int n = 0;
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x) {
        const Rgb p = img.at(x, y);
        n += p.r == c.r && p.g == c.g && p.b == c.b;
      }
    return n;
  };
  const Canvas with = draw_curves(metrics_with(true)), without = draw_curves(metrics_with(false));
  const Rgb first{230, 120, 0}, second{170, 0, 170}, third{0, 170, 170};
  EXPECT_GT(count(with, first), 50) << "class TC's line and name";
  EXPECT_GT(count(with, second), 50);
  EXPECT_GT(count(with, third), 0) << "ET's name, though its Dice is null";
  EXPECT_EQ(count(without, first), 0);
  EXPECT_EQ(count(without, second), 0);
}

// sliding_window.json (make_sliding_window.py): MONAI's and nnU-Net's own
// outputs for a predictor whose output depends on the voxel's place in its
// window, so padding, window starts, blending and flips all show.
nlohmann::json inference_fixture() {
  std::ifstream in(std::string(VOLSHARD_TRAINER_FIXTURES) + "/sliding_window.json");
  EXPECT_TRUE(in);
  return nlohmann::json::parse(in);
}

at::Tensor fixture_tensor(const nlohmann::json& values, const std::vector<int64_t>& shape) {
  return at::tensor(values.get<std::vector<float>>()).view(shape);
}

at::Tensor place_predictor(const at::Tensor& x) {
  const int64_t n = x.size(0), a = x.size(2), b = x.size(3), c = x.size(4);
  const at::Tensor i = at::arange(a, x.options()).view({1, 1, a, 1, 1});
  const at::Tensor j = at::arange(b, x.options()).view({1, 1, 1, b, 1});
  const at::Tensor k = at::arange(c, x.options()).view({1, 1, 1, 1, c});
  return at::cat({2 * x + i, (j - k).expand({n, 1, a, b, c})}, 1);
}

// monai.inferers.sliding_window_inference, mode "constant" and "gaussian"
// (sigma_scale one value and per axis), including its symmetric padding.
TEST(InferenceTest, SlidingWindowEqualsMonaisInBothBlendModesIncludingItsSymmetricPadding) {
  const nlohmann::json fixture = inference_fixture();
  int64_t gaussian = 0;
  ASSERT_EQ(fixture.at("cases").size(), 6u);
  for (const nlohmann::json& c : fixture.at("cases")) {
    const auto shape = c.at("shape").get<std::vector<int64_t>>();
    const auto roi = c.at("roi").get<std::vector<int64_t>>();
    SCOPED_TRACE(c.at("shape").dump() + " roi " + c.at("roi").dump() + " " + c.at("mode").dump());
    const at::Tensor image = fixture_tensor(c.at("image"), {1, 1, shape[0], shape[1], shape[2]});
    SlidingWindowOptions o;
    o.roi = {roi[0], roi[1], roi[2]};
    o.overlap = c.at("overlap").get<double>();
    o.sw_batch_size = c.at("sw_batch_size").get<int64_t>();
    o.blend = c.at("mode") == "gaussian" ? BlendMode::kGaussian : BlendMode::kConstant;
    o.sigma_scale = c.at("sigma_scale").get<std::array<double, 3>>();
    gaussian += o.blend == BlendMode::kGaussian;
    const at::Tensor got = sliding_window_inference(image, o, place_predictor);
    const at::Tensor want = fixture_tensor(c.at("output"), {1, 2, shape[0], shape[1], shape[2]});
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LE((got - want).abs().max().item<double>(), 1e-5);
  }
  EXPECT_EQ(gaussian, 3);
}

// compute_importance_map(roi, "gaussian", sigma_scale): the same float32 bits
// (the same ATen ops in the same order), and the 96^3 map's sum and extremes.
TEST(InferenceTest, TheGaussianImportanceMapIsMonaisBitForBit) {
  const nlohmann::json fixture = inference_fixture();
  ASSERT_EQ(fixture.at("importance_maps").size(), 4u);
  for (const nlohmann::json& m : fixture.at("importance_maps")) {
    const auto roi = m.at("roi").get<std::array<int64_t, 3>>();
    SCOPED_TRACE(m.at("roi").dump() + " sigma_scale " + m.at("sigma_scale").dump());
    const at::Tensor got =
        importance_map(roi, BlendMode::kGaussian, m.at("sigma_scale").get<std::array<double, 3>>());
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{roi[0], roi[1], roi[2]}));
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    if (!m.at("map").is_null()) {
      const auto want = m.at("map").get<std::vector<float>>();
      const at::Tensor flat = got.contiguous().view(-1);
      int64_t differ = 0;
      for (int64_t v = 0; v < flat.numel(); ++v)
        differ += flat[v].item<float>() != want[static_cast<size_t>(v)];
      EXPECT_EQ(differ, 0);
    }
    EXPECT_EQ(got.min().item<float>(), m.at("min").get<float>());
    EXPECT_EQ(got.max().item<float>(), m.at("max").get<float>());
    EXPECT_EQ(got[roi[0] / 2][roi[1] / 2][roi[2] / 2].item<float>(), m.at("centre").get<float>());
    EXPECT_NEAR(got.to(at::kDouble).sum().item<double>(), m.at("sum").get<double>(), 1e-6);
  }
  // Constant: ones.
  EXPECT_TRUE(importance_map({3, 4, 5}, BlendMode::kConstant, {0.125, 0.125, 0.125})
                  .equal(at::ones({3, 4, 5})));
}

// nnU-Net v2's _internal_maybe_mirror_and_predict around the same predictor:
// all three axes (8 passes), one, and two.
TEST(InferenceTest, MirroringEqualsNnUNetsTestTimeMirroring) {
  const nlohmann::json fixture = inference_fixture();
  ASSERT_EQ(fixture.at("mirrored").size(), 3u);
  for (const nlohmann::json& c : fixture.at("mirrored")) {
    const auto shape = c.at("shape").get<std::vector<int64_t>>();
    SCOPED_TRACE("axes " + c.at("axes").dump());
    const at::Tensor image = fixture_tensor(c.at("image"), {1, 1, shape[0], shape[1], shape[2]});
    int64_t calls = 0;
    const Predictor counted = [&calls](const at::Tensor& x) {
      ++calls;
      return place_predictor(x);
    };
    const auto axes = c.at("axes").get<std::vector<int64_t>>();
    const at::Tensor got = mirrored(counted, axes)(image);
    const at::Tensor want = fixture_tensor(c.at("output"), {1, 2, shape[0], shape[1], shape[2]});
    EXPECT_LE((got - want).abs().max().item<double>(), 1e-6);
    EXPECT_EQ(calls, int64_t{1} << axes.size());
  }
  // No axes: the predictor itself; a bad or repeated axis is refused by name.
  const at::Tensor x = at::rand({1, 1, 4, 3, 2});
  EXPECT_TRUE(mirrored(place_predictor, {})(x).equal(place_predictor(x)));
  // A predictor that hands back its input (an identity) leaves the caller's tensor as it was.
  const at::Tensor before = x.clone();
  const at::Tensor same = mirrored([](const at::Tensor& t) { return t; }, {0, 2})(x);
  EXPECT_TRUE(x.equal(before));
  EXPECT_TRUE(same.allclose(x));
  EXPECT_THAT([] { (void)mirrored(place_predictor, {3}); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  ::testing::HasSubstr("axis 3 must be 0 (X), 1 (Y) or 2 (Z)")));
  EXPECT_THAT(
      [] {
        (void)mirrored(place_predictor, {1, 1});
      },
      ::testing::ThrowsMessage<std::invalid_argument>(
          ::testing::HasSubstr("axis 1 is named twice")));
}

// monai.transforms.KeepLargestConnectedComponent (independent, connectivity
// None: 26 neighbours) on masks and a three-class label map.
TEST(InferenceTest, LargestComponentsEqualMonaisKeepLargestConnectedComponent) {
  const nlohmann::json fixture = inference_fixture();
  ASSERT_EQ(fixture.at("largest_component").size(), 3u);
  for (const nlohmann::json& c : fixture.at("largest_component")) {
    const auto shape = c.at("shape").get<std::vector<int64_t>>();
    SCOPED_TRACE(c.at("shape").dump() + " classes " + c.at("classes").dump());
    const at::Tensor labels =
        at::tensor(c.at("labels").get<std::vector<int64_t>>()).to(at::kByte).view(shape);
    const at::Tensor want =
        at::tensor(c.at("output").get<std::vector<int64_t>>()).to(at::kByte).view(shape);
    const at::Tensor got = keep_largest_components(labels);
    EXPECT_EQ(got.scalar_type(), at::kByte);
    EXPECT_TRUE(got.equal(want));
    EXPECT_LT(got.count_nonzero().item<int64_t>(), labels.count_nonzero().item<int64_t>());
  }
  // Diagonal neighbours join; of two equal components the first in C order stays.
  at::Tensor mask = at::zeros({4, 4, 4}, at::kBool);
  mask[0][0][0] = true;
  mask[1][1][1] = true;  // a corner's neighbour: one component of 2
  mask[3][3][2] = true;
  mask[3][3][3] = true;  // another of 2, later in C order
  const at::Tensor kept = largest_component(mask);
  EXPECT_EQ(kept.count_nonzero().item<int64_t>(), 2);
  EXPECT_TRUE(kept[1][1][1].item<bool>());
  EXPECT_FALSE(kept[3][3][3].item<bool>());
}

}  // namespace
}  // namespace volshard
