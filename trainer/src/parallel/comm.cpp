// The one file that speaks c10d (torch 2.x). ProcessGroupGloo and
// ProcessGroupNCCL are c10d::Backends; the calls used here (allreduce,
// broadcast, barrier, Work::wait) are Backend's.
#include "volshard/trainer/comm.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef VOLSHARD_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "parallel/first_line.h"

namespace volshard {

std::string to_string(Backend backend) {
  return backend == Backend::kNccl ? "nccl" : backend == Backend::kGloo ? "gloo" : "auto";
}

using detail::first_line;

// A heartbeat per rank in the store lets a rank whose collective failed say
// which peer is gone (a dead or stopped process stops beating) instead of
// Gloo's "connection closed by peer".
struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> group;
  int64_t rank = 0, world = 1;
  std::chrono::milliseconds timeout{0};

  std::thread heartbeat;
  std::mutex mutex;
  std::condition_variable stop_cv;
  bool stopping = false;
  static constexpr std::chrono::milliseconds kBeat{500};

  void beat_loop() {
    int64_t count = 0;
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      lock.unlock();
      try {
        const std::string value = std::to_string(++count);
        store->set("hb/" + std::to_string(rank), std::vector<uint8_t>(value.begin(), value.end()));
      } catch (const std::exception&) {
        // The store lives in rank 0: if it is gone, diagnose() says so.
      }
      lock.lock();
      stop_cv.wait_for(lock, kBeat, [this] { return stopping; });
    }
  }

  std::vector<int64_t> beats() {
    std::vector<int64_t> out(static_cast<size_t>(world), -1);
    for (int64_t r = 0; r < world; ++r) {
      const std::string key = "hb/" + std::to_string(r);
      if (!store->check({key})) continue;
      const auto v = store->get(key);
      out[static_cast<size_t>(r)] = std::stoll(std::string(v.begin(), v.end()));
    }
    return out;
  }

  // Which ranks stopped beating (checked over a few beats).
  std::string diagnose() {
    try {
      const auto before = beats();
      std::this_thread::sleep_for(4 * kBeat);
      const auto after = beats();
      std::string lost;
      for (int64_t r = 0; r < world; ++r) {
        if (r != rank && after[static_cast<size_t>(r)] == before[static_cast<size_t>(r)])
          lost += (lost.empty() ? "" : ", ") + std::to_string(r);
      }
      return lost.empty()
                 ? "all ranks still alive (a peer is slow or its collectives are out of order)"
                 : "lost rank " + lost + " (no heartbeat)";
    } catch (const std::exception&) {
      return "lost rank 0 (its rendezvous store does not answer)";
    }
  }

  [[noreturn]] void fail(const std::string& op, const std::exception& e) {
    throw CommError("rank " + std::to_string(rank) + ": " + op + " failed: " + diagnose() + " [" +
                    first_line(e) + "]");
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& op) {
    try {
      work->wait(timeout);
    } catch (const std::exception& e) {
      fail(op, e);
    }
  }

  // torch 2.11's flight recorder (on by default; one per process and kind of
  // event) files each process group's status in a map, outside its lock, as
  // a collective is enqueued: groups of one process (ranks as threads, as the
  // tests' run_ranks makes them) enqueuing at once can corrupt it (seen: a
  // segfault in _Rb_tree_insert_and_rebalance under ProcessGroupGloo::enqueue,
  // once in about 500 two-rank trainings). Gloo's enqueue never waits for a
  // peer, so Gloo's collectives are enqueued one at a time per process.
  // NCCL's first collective waits for its peers to build the communicator:
  // under the lock, ranks as threads would wait for each other forever.
  bool serialize_launches = false;
  static std::mutex& launch_mutex() {
    static std::mutex m;
    return m;
  }

  // Issues a collective; a failure to enqueue it is diagnosed as a failed wait.
  template <typename Launch>
  c10::intrusive_ptr<c10d::Work> start(const std::string& op, Launch&& launch) {
    try {
      if (!serialize_launches) return launch();
      std::lock_guard<std::mutex> lock(launch_mutex());
      return launch();
    } catch (const std::exception& e) {
      fail(op, e);
    }
  }

  template <typename Launch>
  void run(const std::string& op, Launch&& launch) {
    wait(start(op, std::forward<Launch>(launch)), op);
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    stop_cv.notify_all();
    if (heartbeat.joinable()) heartbeat.join();
  }
};

namespace {

class GlooPending : public PendingReduce {
 public:
  GlooPending(Communicator::Impl* impl, c10::intrusive_ptr<c10d::Work> work)
      : impl_(impl), work_(std::move(work)) {}
  void wait() override { impl_->wait(work_, "all-reduce"); }

 private:
  Communicator::Impl* impl_;
  c10::intrusive_ptr<c10d::Work> work_;
};

class DonePending : public PendingReduce {
 public:
  void wait() override {}
};

std::shared_ptr<::gloo::transport::Device> gloo_device(const Rendezvous& r) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0')
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  // Loopback rendezvous means all ranks are here; otherwise the interface
  // that routes to the master (the host name's own address may sit on a
  // network the peers do not reach), else what torch.distributed binds.
  if (r.kind == Rendezvous::Kind::kFile || r.host == "127.0.0.1" || r.host == "localhost")
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  const std::string local = local_address_towards(r.host, r.port);
  if (!local.empty()) return c10d::ProcessGroupGloo::createDeviceForHostname(local);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// A client of rank 0's TCP store. torch 2.11's client waits forever, past
// its timeout, on a listener that accepts and never answers (another
// service, or another job's ranks, on the port), so the connection is made
// on a thread of its own and given up on a little after the timeout that
// torch's own errors keep to. The thread, then blocked in a read, is left
// behind: it holds nothing but its own copies.
c10::intrusive_ptr<c10d::Store> tcp_store_client(const std::string& host,
                                                 const c10d::TCPStoreOptions& o) {
  using Store = c10::intrusive_ptr<c10d::Store>;
  auto connected = std::make_shared<std::promise<Store>>();
  std::future<Store> store = connected->get_future();
  std::thread([connected, host, o] {
    try {
      connected->set_value(c10::make_intrusive<c10d::TCPStore>(host, o));
    } catch (...) {
      connected->set_exception(std::current_exception());
    }
  }).detach();
  const auto grace = o.timeout + std::chrono::seconds(5);
  if (store.wait_for(grace) == std::future_status::timeout)
    throw std::runtime_error(
        "no rendezvous store answered there within " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(grace).count()) +
        " s; something else listens on the port (another job's store or ranks?)");
  return store.get();
}

}  // namespace

Communicator::Communicator() = default;

Communicator::Communicator(const Rendezvous& r, const CommOptions& options)
    : rank_(r.rank), world_size_(r.world_size), options_(options) {
  r.validate();
  if (world_size_ == 1) return;
  impl_ = std::make_unique<Impl>();
  impl_->rank = rank_;
  impl_->world = world_size_;
  impl_->timeout = options.timeout;
  const std::string where = r.kind == Rendezvous::Kind::kFile
                                ? "file://" + r.path
                                : "tcp://" + r.host + ":" + std::to_string(r.port);
  try {
    if (r.kind == Rendezvous::Kind::kFile) {
      impl_->store = c10::make_intrusive<c10d::FileStore>(r.path, static_cast<int>(world_size_));
    } else {
      c10d::TCPStoreOptions o;
      o.port = static_cast<uint16_t>(r.port);
      o.isServer = rank_ == 0 && !r.launcher_hosts_store;
      o.numWorkers = static_cast<size_t>(world_size_);
      o.waitWorkers = !r.launcher_hosts_store;
      o.timeout = options.timeout;
      if (o.isServer)
        impl_->store = c10::make_intrusive<c10d::TCPStore>(r.host, o);
      else
        impl_->store = tcp_store_client(r.host, o);
      if (!r.store_prefix.empty())
        impl_->store = c10::make_intrusive<c10d::PrefixStore>(r.store_prefix, impl_->store);
    }
    impl_->store->setTimeout(options.timeout);
    auto store = c10::make_intrusive<c10d::PrefixStore>("volshard", impl_->store);
    if (options.backend == Backend::kNccl) {
#ifdef VOLSHARD_WITH_NCCL
      impl_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank_),
                                                                 static_cast<int>(world_size_));
#else
      throw std::invalid_argument("backend nccl: this build has no NCCL (LibTorch without CUDA)");
#endif
    } else {
      impl_->serialize_launches = true;
      auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
      gloo->devices.push_back(gloo_device(r));
      impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(
          store, static_cast<int>(rank_), static_cast<int>(world_size_), gloo);
    }
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(rank_) + " of " +
                             std::to_string(world_size_) + ": cannot join the process group at " +
                             where + " (" + first_line(e) + ")");
  }
  impl_->heartbeat = std::thread([impl = impl_.get()] { impl->beat_loop(); });
}

Communicator::~Communicator() = default;

std::unique_ptr<PendingReduce> Communicator::allreduce_sum_async(const at::Tensor& tensor) {
  if (world_size_ == 1) return std::make_unique<DonePending>();
  std::vector<at::Tensor> tensors{tensor};
  return std::make_unique<GlooPending>(
      impl_.get(), impl_->start("all-reduce", [&] { return impl_->group->allreduce(tensors); }));
}

void Communicator::allreduce_sum(const at::Tensor& tensor) { allreduce_sum_async(tensor)->wait(); }

void Communicator::allreduce_max(const at::Tensor& tensor) {
  if (world_size_ == 1) return;
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  impl_->run("all-reduce (max)", [&] { return impl_->group->allreduce(tensors, opts); });
}

void Communicator::broadcast(const at::Tensor& tensor, int64_t root) {
  if (world_size_ == 1) return;
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  impl_->run("broadcast", [&] { return impl_->group->broadcast(tensors, opts); });
}

void Communicator::barrier() {
  if (world_size_ == 1) return;
  impl_->run("barrier", [&] { return impl_->group->barrier(); });
}

}  // namespace volshard
