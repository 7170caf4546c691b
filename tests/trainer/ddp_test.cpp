// Data parallelism over Gloo with ranks as threads on 127.0.0.1: collectives,
// the bucketed gradient reducer (the DDP tutorials' claim), SyncBatchNorm,
// and validation that equals a single process for any world size.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/GradMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/validate.h"
#include "parallel/ddp.h"
#include "run_ranks.h"
#include "validation_plan.h"
#include "volshard/datasets/volume.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/launch.h"
#include "volshard/trainer/loss.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/train.h"

namespace volshard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(CommunicatorTest, AllReduceBroadcastAndMaxAgreeOnEveryRank) {
  run_ranks(3, [](Communicator& comm) {
    const double r = static_cast<double>(comm.rank());
    at::Tensor x = at::full({4}, r + 1, at::kDouble);
    comm.allreduce_sum(x);
    EXPECT_TRUE(at::equal(x, at::full({4}, 6.0, at::kDouble)));
    at::Tensor m = at::full({2}, r, at::kFloat);
    comm.allreduce_max(m);
    EXPECT_EQ(m[0].item<float>(), 2.0f);
    at::Tensor b = at::full({3}, r * 10, at::kLong);
    comm.broadcast(b, 1);
    EXPECT_EQ(b[2].item<int64_t>(), 10);
    comm.barrier();
  });
}

TEST(CommunicatorTest, GroupOfOneNeedsNoNetwork) {
  Communicator comm;
  at::Tensor x = at::ones({2});
  comm.allreduce_sum(x);
  comm.broadcast(x);
  comm.barrier();
  EXPECT_EQ(x[0].item<float>(), 1.0f);
  EXPECT_EQ(comm.world_size(), 1);
}

// The IPv4 address `host` (INADDR_LOOPBACK, INADDR_ANY), port `port`.
sockaddr_in ipv4(uint32_t host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(host);
  return addr;
}

bool accepts_connections(int port) {
  const Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in addr = ipv4(INADDR_LOOPBACK, port);
  return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
}

// NCCL reduces between GPUs, one per rank: two ranks as threads, each on its
// own device, sum exactly what Gloo sums (small integers: exact in float32).
TEST(CommunicatorTest, NcclAllReduceSumsAcrossGpusAsGlooDoes) {
  if (!at::hasCUDA() || at::getNumGPUs() < 2)
    GTEST_SKIP() << "needs 2 CUDA devices, one per NCCL rank (this machine has " << at::getNumGPUs()
                 << ")";
  // Ranks as threads: NCCL's flight recorder would file both groups in one
  // map at once (comm.cpp serializes Gloo's launches, and cannot NCCL's).
  ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/1);
  const PortReservation reserved;
  const int port = reserved.port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  std::vector<at::Tensor> sums(2);
  for (int64_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        Rendezvous rv;
        rv.port = port;
        rv.rank = r;
        rv.world_size = 2;
        rv.local_rank = r;
        rv.local_world_size = 2;
        CommOptions co;
        co.backend = Backend::kNccl;
        co.timeout = std::chrono::milliseconds(60000);
        Communicator comm(rv, co);
        at::Tensor t = at::arange(6, at::kFloat).add(static_cast<double>(r * 10))
                           .to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(r)));
        comm.allreduce_sum(t);
        sums[static_cast<size_t>(r)] = t.cpu();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  const at::Tensor want = at::arange(6, at::kFloat).mul(2).add(10);
  for (const auto& s : sums) EXPECT_TRUE(at::equal(s, want));
}

// Whether a socket without SO_REUSEADDR (another program's) can bind `port`.
bool binds_without_reuse(int port) {
  const Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in addr = ipv4(INADDR_ANY, port);
  return ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
}

// A reserved port (run_ranks's and the launcher's) is taken to anyone else,
// yet free to the launcher's check and to rank 0's store, which listens on
// it; once the store listens, the check names the port.
TEST(CommunicatorTest, AReservedPortTakesTheStoreAndBusyPortsAreRejectedNamingThem) {
  int released = 0;
  {
    const PortReservation held;
    released = held.port();
    EXPECT_FALSE(binds_without_reuse(released));
  }
  EXPECT_TRUE(binds_without_reuse(released));  // the reservation held it, nothing else
  const PortReservation reserved;
  const int port = reserved.port();
  EXPECT_NO_THROW(check_port_free(port));
  // The check is asked until the store is listening (no sleep that a loaded
  // machine could outlast), then rank 1 joins and lets rank 0 return.
  // Probing with connect(), not bind(), never takes the port from the store.
  Rendezvous rv;
  rv.port = port;
  rv.world_size = 2;
  CommOptions co;
  co.timeout = std::chrono::milliseconds(120000);
  std::atomic<bool> holder_failed{false};
  std::thread holder([&] {
    try {
      Communicator c(rv, co);
    } catch (const std::exception&) {
      holder_failed = true;  // ends the wait below instead of hanging
    }
  });
  while (!holder_failed && !accepts_connections(port)) std::this_thread::yield();
  if (holder_failed) {
    holder.join();
    FAIL() << "rank 0 could not listen on reserved port " << port;
  }
  try {
    check_port_free(port);
    ADD_FAILURE() << "port " << port << " should be busy";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr(std::to_string(port)));
  }
  Rendezvous rank1 = rv;
  rank1.rank = 1;
  Communicator c(rank1, co);
  holder.join();
}

// A rank that reaches a listener that is not rank 0's store (it accepts and
// never answers) fails a little after the timeout, naming the address,
// where torch's store client alone waits forever.
TEST(CommunicatorTest, AListenerThatIsNotAStoreFailsTheRankNamingTheAddress) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = ipv4(INADDR_LOOPBACK, 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener.get(), 16), 0);  // the kernel accepts; nobody answers
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  Rendezvous rv;
  rv.port = port;
  rv.rank = 1;
  rv.world_size = 2;
  CommOptions co;
  co.timeout = std::chrono::milliseconds(500);
  // On a thread, so that a regression fails here instead of hanging ctest.
  auto error = std::make_shared<std::promise<std::string>>();
  std::future<std::string> message = error->get_future();
  std::thread([error, rv, co] {
    try {
      Communicator c(rv, co);
      error->set_value("joined");
    } catch (const std::exception& e) {
      error->set_value(e.what());
    }
  }).detach();
  ASSERT_EQ(message.wait_for(std::chrono::minutes(5)), std::future_status::ready)
      << "rank 1 still waits on a listener that never answers";
  EXPECT_THAT(message.get(),
              AllOf(HasSubstr("rank 1 of 2"), HasSubstr("tcp://127.0.0.1:" + std::to_string(port)),
                    HasSubstr("no rendezvous store answered")));
  // Left open: the client thread comm.cpp gave up on stays blocked on it until
  // the process ends, instead of waking to log while the process exits.
  (void)listener.release();
}

ModelOptions small_net() {
  ModelOptions o;
  o.channels = {4, 8};
  o.strides = {2};
  o.num_res_units = 1;
  return o;
}

// One step of SGD with momentum on data (x, y) for `net`; with a reducer the
// gradients are averaged over ranks first. (SGD, not Adam: Adam divides by
// sqrt(v), which blows float noise in the near-zero gradients of conv biases
// before InstanceNorm up to full-size steps; the DDP claim is about gradients.)
void sgd_step(Model& net, at::optional<std::reference_wrapper<GradientReducer>> reducer,
              const at::Tensor& x, const at::Tensor& y, std::vector<at::Tensor>& momentum) {
  for (auto& p : net.parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
  DiceLossOptions d;
  d.sigmoid = true;
  const at::Tensor loss = dice_loss(net.forward(x), y, d);
  if (reducer) reducer->get().prepare();
  loss.backward();
  if (reducer) reducer->get().finish();
  c10::NoGradGuard no_grad;
  const auto params = net.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor g = params[i].grad();
    if (!momentum[i].defined()) momentum[i] = at::zeros_like(g);
    momentum[i].mul_(0.9).add_(g);
    params[i].sub_(momentum[i], 0.5);
  }
}

TEST(GradientReducerTest, TwoRanksWithBatchBEqualOneProcessWithBatch2B) {
  constexpr int64_t kSteps = 3, b = 2;
  at::manual_seed(3);
  std::vector<at::Tensor> xs, ys;
  for (int64_t s = 0; s < kSteps; ++s) {
    xs.push_back(at::rand({2 * b, 1, 16, 16, 16}));
    ys.push_back((xs.back() > 0.6).to(at::kFloat));
  }
  // One process, batch 2b.
  Model single(small_net(), 11);
  {
    std::vector<at::Tensor> momentum(single.parameters().size());
    for (int64_t s = 0; s < kSteps; ++s) sgd_step(single, at::nullopt, xs[s], ys[s], momentum);
  }
  // Two ranks, batch b each; rank 1 starts from other weights to prove the broadcast.
  std::map<int64_t, NamedTensors> finals;
  std::mutex mutex;
  run_ranks(2, [&](Communicator& comm) {
    Model net(small_net(), comm.rank() == 0 ? 11 : 99);
    std::vector<at::Tensor> state;
    for (auto& kv : net.state_dict()) state.push_back(kv.second);
    broadcast_tensors(state, comm, 0);
    GradientReducerOptions ro;
    ro.first_bucket_bytes = 1024;  // several buckets, so some launch during backward
    ro.bucket_bytes = 4096;
    GradientReducer reducer(net.parameters(), comm, ro);
    EXPECT_GT(reducer.buckets().size(), 2u);
    std::vector<at::Tensor> momentum(net.parameters().size());
    for (int64_t s = 0; s < kSteps; ++s) {
      sgd_step(net, std::ref(reducer), xs[s].narrow(0, comm.rank() * b, b),
               ys[s].narrow(0, comm.rank() * b, b), momentum);
      EXPECT_GT(reducer.launched_during_backward(), 0)
          << "no all-reduce overlapped the backward pass";
      // Identical weights on every rank after every step: compare with rank 0's.
      for (auto& p : net.parameters()) {
        at::Tensor copy = p.detach().clone();
        comm.broadcast(copy, 0);
        EXPECT_TRUE(at::equal(copy, p.detach()));
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    finals[comm.rank()] = net.state_dict();
  });
  const auto expected = single.state_dict();
  for (const auto& [rank, state] : finals) {
    for (size_t i = 0; i < state.size(); ++i) {
      EXPECT_TRUE(at::allclose(state[i].second, expected[i].second, 1e-4, 1e-5))
          << "rank " << rank << " " << state[i].first << " max diff "
          << (state[i].second - expected[i].second).abs().max().item<double>();
    }
  }
}

TEST(GradientReducerTest, NamesAParameterThatGotNoGradient) {
  Communicator comm;
  at::Tensor used = at::ones({3}).requires_grad_();
  at::Tensor unused = at::ones({2}).requires_grad_();
  GradientReducer reducer({used, unused}, comm);
  reducer.prepare();
  (used * 2).sum().backward();
  try {
    reducer.finish();
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter 1"));
  }
}

TEST(SyncBatchNormTest, TwoRanksGiveTheForwardOfOneRankOnTheConcatenatedBatch) {
  ModelOptions o = small_net();
  o.norm = NormKind::kBatch;
  at::manual_seed(5);
  const at::Tensor x = at::rand({4, 1, 16, 16, 16});
  Model single(o, 21);
  single.train(true);
  const at::Tensor expected = single.forward(x).detach();
  const NamedTensors expected_state = single.state_dict();
  std::map<int64_t, at::Tensor> outputs;
  std::map<int64_t, NamedTensors> states;
  std::mutex mutex;
  run_ranks(2, [&](Communicator& comm) {
    Model net(o, 21);
    net.set_sync_batchnorm(&comm);
    net.train(true);
    const at::Tensor y = net.forward(x.narrow(0, comm.rank() * 2, 2));
    y.sum().backward();  // the backward all-reduces pair up across ranks
    std::lock_guard<std::mutex> lock(mutex);
    outputs[comm.rank()] = y.detach();
    states[comm.rank()] = net.state_dict();
  });
  const at::Tensor joined = at::cat({outputs[0], outputs[1]}, 0);
  EXPECT_TRUE(at::allclose(joined, expected, 1e-4, 1e-5))
      << (joined - expected).abs().max().item<double>();
  // Running statistics follow the global batch, identically on both ranks.
  for (size_t i = 0; i < expected_state.size(); ++i) {
    if (expected_state[i].first.find("running") == std::string::npos) continue;
    EXPECT_TRUE(at::allclose(states[0][i].second, expected_state[i].second, 1e-4, 1e-6))
        << expected_state[i].first;
    EXPECT_TRUE(at::equal(states[0][i].second, states[1][i].second)) << expected_state[i].first;
  }
}

TEST(ValidationTest, DiceOverUnevenShardsEqualsASingleProcessExactly) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("volshard_val_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<ImageLabelPair> val;
  at::manual_seed(9);
  Affine identity{};
  for (int i = 0; i < 4; ++i) identity[static_cast<size_t>(i)][static_cast<size_t>(i)] = 1;
  for (int i = 0; i < 4; ++i) {  // 4 volumes over 3 ranks: shards of 2, 1, 1
    const at::Tensor img = at::rand({24, 20, 16});
    const std::string ip = (dir / ("img" + std::to_string(i) + ".nii.gz")).string();
    const std::string lp = (dir / ("seg" + std::to_string(i) + ".nii.gz")).string();
    write_volume(ip, img, identity);
    write_volume(lp, (img > 0.5).to(at::kInt), identity);
    val.push_back({ip, lp});
  }
  TrainOptions o;
  o.model = small_net();
  o.feed.crop = {16};
  o.inference.overlap = 0.25;
  Model reference(o.model, 4);
  Communicator one;
  const double expected = validation_dice(reference, val, o, testing::validation_plan(o, one), one);
  EXPECT_FALSE(std::isnan(expected));
  std::map<int64_t, double> got;
  std::mutex mutex;
  run_ranks(3, [&](Communicator& comm) {
    Model net(o.model, 4);
    const double d = validation_dice(net, val, o, testing::validation_plan(o, comm), comm);
    std::lock_guard<std::mutex> lock(mutex);
    got[comm.rank()] = d;
  });
  for (const auto& [rank, d] : got) EXPECT_EQ(d, expected) << "rank " << rank;
  std::filesystem::remove_all(dir);
}

TEST(ValidationTest, PerClassSoftmaxDiceOverShardsEqualsASingleProcessExactly) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("volshard_val3_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<ImageLabelPair> val;
  at::manual_seed(10);
  for (int i = 0; i < 5; ++i) {  // 5 volumes over 2 ranks; class 2 absent from volume 0
    const at::Tensor img = at::rand({24, 20, 16});
    at::Tensor seg = (img > 0.4).to(at::kInt) + (img > 0.8).to(at::kInt);
    if (i == 0) seg.clamp_max_(1);
    const std::string ip = (dir / ("img" + std::to_string(i) + ".nii.gz")).string();
    const std::string lp = (dir / ("seg" + std::to_string(i) + ".nii.gz")).string();
    write_volume(ip, img, identity_affine());
    write_volume(lp, seg, identity_affine());
    val.push_back({ip, lp});
  }
  TrainOptions o;
  o.model = small_net();
  o.model.out_channels = 3;
  o.activation = Activation::kSoftmax;
  o.feed.crop = {16};
  o.inference.sw_batch_size = 2;
  Model reference(o.model, 4);
  Communicator one;
  const ValidationScores expected =
      validation_scores(reference, val, o, testing::validation_plan(o, one), one);
  ASSERT_EQ(expected.per_class.size(), 2u);  // classes 1 and 2, background left out
  EXPECT_FALSE(std::isnan(expected.per_class[0]));
  EXPECT_FALSE(std::isnan(expected.per_class[1]));
  std::map<int64_t, ValidationScores> got;
  std::mutex mutex;
  run_ranks(2, [&](Communicator& comm) {
    Model net(o.model, 4);
    const ValidationScores s =
        validation_scores(net, val, o, testing::validation_plan(o, comm), comm);
    std::lock_guard<std::mutex> lock(mutex);
    got[comm.rank()] = s;
  });
  for (const auto& [rank, s] : got) {
    EXPECT_EQ(s.mean, expected.mean) << "rank " << rank;
    EXPECT_EQ(s.per_class, expected.per_class) << "rank " << rank;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace volshard
