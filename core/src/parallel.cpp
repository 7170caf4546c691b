#include "volshard/core/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace volshard {

void parallel_items(int64_t count, int64_t threads, const std::function<bool(int64_t)>& item,
                    const std::function<void(int64_t, int64_t)>& on_done) {
  if (count <= 0) return;
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;  // error and on_done
  std::exception_ptr error;
  int64_t done = 0;
  const auto work = [&] {
    for (int64_t i = next++; i < count && !stop; i = next++) {
      bool more = true;
      try {
        more = item(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        stop = true;
        return;
      }
      if (!more) stop = true;
      if (on_done) {
        const std::lock_guard<std::mutex> lock(mutex);
        on_done(++done, count);
      }
    }
  };
  std::vector<std::thread> pool;
  const int64_t wanted = std::min(std::max<int64_t>(threads, 1), count);
  for (int64_t t = 1; t < wanted; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the threads that started, and this one, take every item
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace volshard
