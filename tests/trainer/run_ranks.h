#pragma once
// Ranks as threads: each joins a Gloo group over TCP on 127.0.0.1.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "volshard/trainer/comm.h"
#include "volshard/trainer/launch.h"
#include "volshard/trainer/rendezvous.h"

namespace volshard {

// Runs body(comm) on `world` threads, one rank each, and rethrows the first
// rank's error after all have joined. The port stays reserved until then:
// ctest runs other tests' ranks beside these.
inline void run_ranks(int64_t world, const std::function<void(Communicator&)>& body) {
  const PortReservation reserved;
  const int port = reserved.port();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        Rendezvous rv;
        rv.port = port;
        rv.rank = r;
        rv.world_size = world;
        rv.local_rank = r;
        rv.local_world_size = world;
        CommOptions co;
        co.timeout = std::chrono::milliseconds(30000);
        Communicator comm(rv, co);
        body(comm);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace volshard
