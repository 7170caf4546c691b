// The training loop in process: two Gloo ranks as threads train a tiny Model on
// synthetic volumes; runs repeat bit for bit, and a run stopped at max_steps
// and resumed ends where an uninterrupted run does; validation's share and
// cache. (Sliding-window inference is transforms/inference_test.cpp's.)
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

#include "engine/validate.h"
#include "refusal_text.h"
#include "run_ranks.h"
#include "validation_plan.h"
#include "volshard/core/file_io.h"
#include "volshard/core/limits.h"
#include "volshard/trainer/data_split.h"
#include "volshard/trainer/device.h"
#include "volshard/trainer/serialize.h"
#include "volshard/trainer/train.h"
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
    EXPECT_THAT(e.what(), ::testing::HasSubstr("backend=nccl: " + std::to_string(gpus + 1) +
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
    EXPECT_THAT(e.what(), ::testing::HasSubstr("train: device=cuda: no CUDA device here"));
    EXPECT_THAT(flag_text(e),
                ::testing::HasSubstr("train: --device=cuda: no CUDA device here (LibTorch "
                                     "without CUDA, or no GPU visible); use --device=cpu"));
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
  // The library names the fields by key (as a config spells them); a command line by flag.
  EXPECT_THAT(refusal([](TrainOptions& o) { o.fused_optimizer = false; }),
              HasSubstr("cuda_graph captures one step of one batch: it needs optimizer=adam "
                        "with fused_optimizer"));
  EXPECT_THAT(refusal([](TrainOptions& o) { o.accumulate = 2; }), HasSubstr("accumulate=2"));
  EXPECT_THAT(refusal([](TrainOptions& o) { o.model.dropout = 0.2; }), HasSubstr("dropout=0.2"));
  EXPECT_THAT(refusal([](TrainOptions&) {}),
              HasSubstr("cuda_graph captures one rank's step, and 2 ranks"));
  EXPECT_THAT(refusal([](TrainOptions& o) {
                o.cuda_graph = false;
                o.optimizer = Optimizer::kSgd;
              }),
              HasSubstr("fused_optimizer is adam's fused kernel: optimizer=sgd"));
  TrainOptions o = options("refused");
  o.fused_optimizer = true;
  o.optimizer = Optimizer::kSgd;
  try {
    o.validate();
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(flag_text(e), HasSubstr("train: --fused-optimizer is adam's fused kernel: "
                                        "--optimizer=sgd has none here (use adam, or "
                                        "--fused-optimizer=false)"));
  }
}

// The checks across fields name each field: by key as the library says it, by flag on a
// command line.
TEST_F(TrainTest, CrossFieldChecksNameEachFieldByKeyAndOnACommandLineByFlag) {
  const auto refusal = [this](const std::function<void(TrainOptions&)>& set) {
    TrainOptions o = options("refused");
    set(o);
    return testing::refusal_text(o);
  };
  using ::testing::HasSubstr;
  const auto [dropout, dropout_flags] = refusal([](TrainOptions& o) {
    o.invariant = true;
    o.model.dropout = 0.25;
  });
  EXPECT_THAT(dropout, HasSubstr("train: invariant: dropout=0.25 draws from each rank's own "
                                 "generator; use dropout=0"));
  EXPECT_THAT(dropout_flags, HasSubstr("train: --invariant: --dropout=0.25 draws from each "
                                       "rank's own generator; use --dropout=0"));
  const auto [softmax, softmax_flags] = refusal([](TrainOptions& o) {
    o.activation = Activation::kSoftmax;
    o.model.out_channels = 1;
  });
  EXPECT_THAT(softmax, HasSubstr("train: activation=softmax needs out_channels >= 2"));
  EXPECT_THAT(softmax_flags, HasSubstr("train: --activation=softmax needs --out-channels >= 2"));
  const auto [data, data_flags] = refusal([](TrainOptions& o) { o.datalist = "x.json"; });
  EXPECT_THAT(data, HasSubstr("give exactly one of data (a folder) and datalist (a file)"));
  EXPECT_THAT(data_flags, HasSubstr("give exactly one of --data (a folder) and --datalist"));
  for (const auto& said : {dropout, softmax, data}) {
    EXPECT_EQ(said.find('\x1f'), std::string::npos) << said;
    EXPECT_EQ(said.find("--"), std::string::npos) << said;
  }
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
    EXPECT_THAT(e.what(), ::testing::HasSubstr("train: cache_device=cuda: the network trains on "
                                               "cpu (device)"));
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

// Deep supervision's heads train with the rest, and --invariant keeps the
// same model.pt at another world size; the heads' loss moves the shared
// weights away from a run without them (the same initial ones); the run's
// weights load into the network its config builds, as predict builds it.
TEST_F(TrainTest, DeepSupervisionTrainsItsHeadsAtAnyWorldSizeAndMovesTheNetwork) {
  const auto supervised = [&](const std::string& run, int64_t levels) {
    TrainOptions o = options(run);
    o.model.channels = {4, 8, 16};
    o.model.strides = {2, 2};
    o.model.deep_supervision = levels;
    o.invariant = true;
    o.batch_size = 2;
    o.val_every = 0;
    return o;
  };
  run_ranks(1, [&](Communicator& comm) { train(supervised("w1", 1), comm); });
  run_ranks(2, [&](Communicator& comm) { train(supervised("w2", 1), comm); });
  EXPECT_EQ(bytes(file("w1", "model.pt")), bytes(file("w2", "model.pt")));
  run_ranks(1, [&](Communicator& comm) { train(supervised("plain", 0), comm); });
  const NamedTensors ds = load_tensor_dict(file("w1", "model.pt"));
  const NamedTensors plain = load_tensor_dict(file("plain", "model.pt"));
  ASSERT_EQ(ds.size(), plain.size() + 2);
  EXPECT_EQ(ds[plain.size()].first, "deep_supervision.0.weight");
  EXPECT_EQ(ds[plain.size() + 1].first, "deep_supervision.0.bias");
  bool moved = false;
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(ds[i].first, plain[i].first);
    moved = moved || !at::equal(ds[i].second, plain[i].second);
  }
  EXPECT_TRUE(moved);
  ModelOptions built = supervised("w1", 1).model;
  built.in_channels = 1;  // 0: the images', which the run resolved to 1
  Model net(built);
  EXPECT_NO_THROW(net.load_state_dict(ds, /*strict=*/true));
}

TEST_F(TrainTest, InvariantTrainingRefusesWhatWouldMixVolumesOrRanks) {
  TrainOptions o = options("refused");
  o.invariant = true;
  o.model.norm = NormKind::kBatch;
  EXPECT_THROW(
      try { o.validate(); } catch (const std::invalid_argument& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("norm=batch mixes the volumes"));
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
          ::testing::HasSubstr("out=" + o.out_dir + " already holds a run"),
          ::testing::HasSubstr("with resume=" + o.out_dir + " or start afresh with overwrite"))));
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
  EXPECT_EQ(validation_costs(o, {16, 16, 16}, d.val),
            std::vector<int64_t>(d.val.size(), 8 * 16 * 16 * 16));
  o.feed.prefix.pixdim = {2.0, 2.0, 2.0};  // 12^3: one window, padded
  EXPECT_EQ(validation_costs(o, {16, 16, 16}, d.val),
            std::vector<int64_t>(d.val.size(), 16 * 16 * 16));
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
      (void)validation_scores(net, d.val, o, testing::validation_plan(o, comm), comm);
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
    unkept[0] = validation_scores(net, d.val, o, testing::validation_plan(o, comm), comm);
  });
  run_ranks(2, [&](Communicator& comm) {
    Model net(o.model, 3);
    ValidationCache cache{CacheOptions{}};
    const auto r = static_cast<size_t>(comm.rank());
    before[r] = validation_scores(net, d.val, o, testing::validation_plan(o, comm), comm, &cache);
    comm.barrier();  // every rank has read its share
    if (comm.rank() == 0) overwrite_images();
    comm.barrier();
    after[r] = validation_scores(net, d.val, o, testing::validation_plan(o, comm), comm, &cache);
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
        (void)validation_scores(net, d.val, o, testing::validation_plan(o, comm), comm,
                                with_cache ? &cache : nullptr);
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
  o.inference.overlap = 0.5;
  const DataSplit d = list_data(o);
  const auto scores = [&](const TrainOptions& with, int64_t world) {
    std::vector<ValidationScores> out(static_cast<size_t>(world));
    run_ranks(world, [&](Communicator& comm) {
      Model net(with.model, 3);
      out[static_cast<size_t>(comm.rank())] =
          validation_scores(net, d.val, with, testing::validation_plan(with, comm), comm);
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

}  // namespace
}  // namespace volshard
