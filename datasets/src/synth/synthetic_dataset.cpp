#include "volshard/datasets/synthetic_dataset.h"

#include <ATen/ATen.h>

#include <atomic>
#include <exception>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "volshard/datasets/volume.h"

namespace volshard {

void write_synthetic_dataset(const SynthOptions& o) {
  validate(o.volume);
  if (o.count < 0)
    throw std::invalid_argument("synth: count=" + std::to_string(o.count) + " must be >= 0");
  if (o.threads < 1)
    throw std::invalid_argument("synth: threads=" + std::to_string(o.threads) + " must be >= 1");
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) throw std::runtime_error(o.out_dir + ": cannot create the folder: " + ec.message());

  Affine identity{};
  for (size_t r = 0; r < 4; ++r) identity[r][r] = 1.0;
  std::atomic<int64_t> next{0}, done{0};
  std::mutex mutex;
  std::exception_ptr error;
  const auto work = [&] {
    for (int64_t i = next++; i < o.count; i = next++) {
      try {
        NumpyRandomState rs(synthetic_volume_seed(o.seed, i));
        SyntheticVolume v = make_test_image_3d(o.volume, rs);
        const std::vector<int64_t> shape{v.shape[0], v.shape[1], v.shape[2]};
        const auto folder = std::filesystem::path(o.out_dir);
        write_volume((folder / ("img" + std::to_string(i) + ".nii.gz")).string(),
                     at::from_blob(v.image.data(), shape, at::kFloat), identity);
        write_volume((folder / ("seg" + std::to_string(i) + ".nii.gz")).string(),
                     at::from_blob(v.label.data(), shape, at::kInt), identity);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        next = o.count;  // stop the others
        return;
      }
      const int64_t d = ++done;
      if (o.progress) {
        const std::lock_guard<std::mutex> lock(mutex);
        o.progress(d, o.count);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < o.threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace volshard
