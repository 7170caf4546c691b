#include "volshard/volume_io/synthetic.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "volshard/core/limits.h"
#include "volshard/core/parallel.h"
#include "volshard/core/seed_streams.h"

namespace volshard {
namespace {

// Draws are produced in blocks so that Mt19937::fill's vectorised tempering
// does the work; 2048 doubles = 4096 raw draws = 16 KiB on the stack.
constexpr size_t kBlock = 2048;

// numpy's gen_mask: the smallest 2^k - 1 >= max.
uint64_t gen_mask(uint64_t max) {
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  return mask;
}

double to_double(uint32_t a, uint32_t b) {
  return ((a >> 5) * 67108864.0 + (b >> 6)) / 9007199254740992.0;
}

// floor(sqrt(v)) for v >= 0, exactly.
int64_t isqrt(int64_t v) {
  auto s = static_cast<int64_t>(std::sqrt(static_cast<double>(v)));
  while (s * s > v) --s;
  while ((s + 1) * (s + 1) <= v) ++s;
  return s;
}

std::string prefix() { return "make_test_image_3d: "; }

}  // namespace

int64_t NumpyRandomState::randint(int64_t lo, int64_t hi) {
  if (lo >= hi) {
    throw std::invalid_argument("NumpyRandomState::randint: lo=" + std::to_string(lo) +
                                " must be < hi=" + std::to_string(hi));
  }
  // numpy's random_bounded_uint64_fill (legacy, masked): offsets are taken
  // mod 2^64, and ranges below 2^32 use single 32-bit draws.
  const uint64_t rng = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) - 1;
  const uint64_t off = static_cast<uint64_t>(lo);
  if (rng == 0) return lo;  // numpy returns off without drawing
  uint64_t v = 0;
  if (rng <= 0xFFFFFFFFULL) {
    const auto mask = static_cast<uint32_t>(gen_mask(rng));
    uint32_t w = 0;
    while ((w = mt_() & mask) > rng) {
    }
    v = w;
  } else {
    const uint64_t mask = gen_mask(rng);
    do {
      v = mt_.next_u64() & mask;  // legacy next_uint64: first draw high
    } while (v > rng);
  }
  return static_cast<int64_t>(off + v);
}

double NumpyRandomState::uniform(double lo, double hi) {
  const double range = hi - lo;
  if (!std::isfinite(range)) {
    throw std::invalid_argument("NumpyRandomState::uniform: hi - lo = " + std::to_string(range) +
                                " must be finite (lo=" + std::to_string(lo) +
                                ", hi=" + std::to_string(hi) + ")");
  }
  return lo + range * random();
}

void NumpyRandomState::uniform_fill(double lo, double hi, double* out, size_t count) {
  const double range = hi - lo;
  if (!std::isfinite(range)) {
    throw std::invalid_argument(
        "NumpyRandomState::uniform_fill: hi - lo = " + std::to_string(range) +
        " must be finite (lo=" + std::to_string(lo) + ", hi=" + std::to_string(hi) + ")");
  }
  uint32_t raw[2 * kBlock];
  while (count > 0) {
    const size_t n = std::min(count, kBlock);
    mt_.fill(raw, 2 * n);
    for (size_t i = 0; i < n; ++i) out[i] = lo + range * to_double(raw[2 * i], raw[2 * i + 1]);
    out += n;
    count -= n;
  }
}

void NumpyRandomState::skip_doubles(uint64_t count) {
  // MT19937 has no cheap jump-ahead; a block fill (twist + vectorised
  // tempering) is still several times faster than discard()'s one-by-one loop.
  uint32_t raw[2 * kBlock];
  while (count > 0) {
    const auto n = static_cast<size_t>(std::min<uint64_t>(count, kBlock));
    mt_.fill(raw, 2 * n);
    count -= n;
  }
}

void fit_radii(SyntheticOptions& o, int64_t min_size) {
  const SyntheticOptions monai;
  if (min_size > 2 * static_cast<int64_t>(monai.rad_max)) {
    o.rad_max = monai.rad_max;
    o.rad_min = monai.rad_min;
    return;
  }
  // The same proportions as MONAI's 30 / 5, inside the volume.
  o.rad_max = static_cast<int>(std::max<int64_t>(1, (min_size - 1) / 2));
  o.rad_min = std::max(1, (o.rad_max + 3) / 6);
  if (o.rad_max <= o.rad_min) o.rad_max = o.rad_min + 1;  // validate() names the size
}

void validate(const SyntheticOptions& o) {
  // MONAI's three checks first, in MONAI's order.
  if (o.rad_max <= o.rad_min) {
    throw std::invalid_argument(prefix() + "rad_max=" + std::to_string(o.rad_max) +
                                " must be > rad_min=" + std::to_string(o.rad_min));
  }
  if (o.rad_min < 1) {
    throw std::invalid_argument(prefix() + "rad_min=" + std::to_string(o.rad_min) +
                                " must be >= 1");
  }
  const std::pair<const char*, int64_t> sizes[] = {
      {"height", o.height}, {"width", o.width}, {"depth", o.depth}};
  for (const auto& [name, size] : sizes) {
    if (size < 0)
      throw std::invalid_argument(prefix() + name + "=" + std::to_string(size) + " must be >= 0");
  }
  const int64_t min_size = std::min({o.height, o.width, o.depth});
  if (min_size <= 2 * static_cast<int64_t>(o.rad_max)) {
    throw std::invalid_argument(
        prefix() + "min(height, width, depth)=" + std::to_string(min_size) +
        " must be > 2 * rad_max=" + std::to_string(2 * static_cast<int64_t>(o.rad_max)));
  }
  int64_t plane = 0, voxels = 0;
  if (__builtin_mul_overflow(o.height, o.width, &plane) ||
      __builtin_mul_overflow(plane, o.depth, &voxels) ||
      static_cast<uint64_t>(voxels) > SIZE_MAX / sizeof(double)) {
    throw std::invalid_argument(prefix() + "height=" + std::to_string(o.height) +
                                " x width=" + std::to_string(o.width) +
                                " x depth=" + std::to_string(o.depth) + " voxels overflow");
  }
  // make_test_image_3d's float64 working volume, its image and its label.
  check_fits_in_memory(16.0 * static_cast<double>(voxels),
                       prefix() + "a " + std::to_string(o.height) + " x " + std::to_string(o.width) +
                           " x " + std::to_string(o.depth) + " volume");
  if (o.num_seg_classes < 1) {
    throw std::invalid_argument(prefix() + "num_seg_classes=" + std::to_string(o.num_seg_classes) +
                                " must be >= 1");
  }
  if (!std::isfinite(o.num_seg_classes * o.noise_max)) {
    throw std::invalid_argument(prefix() + "noise_max=" + std::to_string(o.noise_max) +
                                " must make num_seg_classes * noise_max finite");
  }
}

SyntheticVolume make_test_image_3d(const SyntheticOptions& o, NumpyRandomState& rs) {
  validate(o);
  const int64_t h = o.height, w = o.width, d = o.depth;
  const auto n = static_cast<size_t>(h * w * d);
  SyntheticVolume vol;
  vol.shape = {h, w, d};
  // MONAI keeps a float64 image and casts after max(image, noise). Rounding to
  // float32 is monotonic, so float(max(a, b)) == max(float(a), float(b)) and a
  // float32 image gives the same bytes at half the memory. Labels are
  // ceil(image) of the float64 sphere value, written alongside.
  vol.image.assign(n, 0.0f);
  vol.label.assign(n, 0);

  const int64_t rad_max = o.rad_max;
  for (int obj = 0; obj < o.num_objs; ++obj) {
    SyntheticSphere s;
    s.x = rs.randint(rad_max, h - rad_max);
    s.y = rs.randint(rad_max, w - rad_max);
    s.z = rs.randint(rad_max, d - rad_max);
    s.radius = rs.randint(o.rad_min, rad_max);
    s.value = o.num_seg_classes > 1 ? std::ceil(rs.random() * o.num_seg_classes)
                                    : rs.random() * 0.5 + 0.5;
    vol.spheres.push_back(s);

    const auto fvalue = static_cast<float>(s.value);
    const auto lvalue = static_cast<int32_t>(std::ceil(s.value));
    const int64_t r2 = s.radius * s.radius;
    // MONAI tests every voxel of the volume; only the bounding box can hold
    // (i-x)^2 + (j-y)^2 + (k-z)^2 <= r^2. Clipping is for safety: with
    // x in [rad_max, h - rad_max) and r < rad_max the box is always inside.
    for (int64_t i = std::max<int64_t>(0, s.x - s.radius); i <= std::min(h - 1, s.x + s.radius);
         ++i) {
      const int64_t di2 = (i - s.x) * (i - s.x);
      for (int64_t j = std::max<int64_t>(0, s.y - s.radius); j <= std::min(w - 1, s.y + s.radius);
           ++j) {
        const int64_t rest = r2 - di2 - (j - s.y) * (j - s.y);
        if (rest < 0) continue;
        const int64_t half = isqrt(rest);
        const int64_t k0 = std::max<int64_t>(0, s.z - half), k1 = std::min(d - 1, s.z + half);
        const auto row = static_cast<size_t>((i * w + j) * d);
        std::fill(vol.image.begin() + static_cast<std::ptrdiff_t>(row + k0),
                  vol.image.begin() + static_cast<std::ptrdiff_t>(row + k1 + 1), fvalue);
        std::fill(vol.label.begin() + static_cast<std::ptrdiff_t>(row + k0),
                  vol.label.begin() + static_cast<std::ptrdiff_t>(row + k1 + 1), lvalue);
      }
    }
  }

  // norm = rs.uniform(0, classes * noise_max, size=(h, w, d)): one double per
  // voxel in C order, always drawn, since the next volume's draws follow.
  const double range = o.num_seg_classes * o.noise_max;
  if (range == 0.0) {
    // Every noise value is 0.0 and the image is >= 0: max() changes nothing.
    rs.skip_doubles(n);
  } else {
    double noise[kBlock];
    for (size_t base = 0; base < n; base += kBlock) {
      const size_t m = std::min(kBlock, n - base);
      rs.uniform_fill(0.0, range, noise, m);
      float* img = vol.image.data() + base;
      for (size_t t = 0; t < m; ++t) img[t] = std::max(img[t], static_cast<float>(noise[t]));
    }
  }

  // rescale_array(x, 0.0, 1.0, float32): (x - min) / (max - min) in float32;
  // the trailing * (1.0 - 0.0) + 0.0 is exact. A constant image becomes x * 0.
  if (n == 0) return vol;
  // Plain compares (no NaN can occur) so the reduction vectorises.
  float lo = vol.image[0], hi = vol.image[0];
  for (const float x : vol.image) {
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
  }
  if (lo == hi) {
    for (float& x : vol.image) x = x * 0.0f;
  } else {
    const float span = hi - lo;
    for (float& x : vol.image) x = (x - lo) / span;
  }
  return vol;
}

uint32_t synthetic_volume_seed(uint64_t seed, int64_t index) {
  return static_cast<uint32_t>(
      derive_seed(seed, Stream::kShared, 0, kSyntheticSeedPurpose + static_cast<uint64_t>(index)));
}

std::vector<SyntheticVolume> make_volumes(const SyntheticOptions& options, uint64_t seed,
                                          int64_t first, int64_t count, int threads) {
  validate(options);
  if (first < 0)
    throw std::invalid_argument("make_volumes: first=" + std::to_string(first) + " must be >= 0");
  if (count < 0)
    throw std::invalid_argument("make_volumes: count=" + std::to_string(count) + " must be >= 0");
  if (threads < 1) {
    throw std::invalid_argument("make_volumes: threads=" + std::to_string(threads) +
                                " must be >= 1");
  }
  std::vector<SyntheticVolume> volumes(static_cast<size_t>(count));
  // Each volume depends only on its own seed, so any split over threads gives
  // the same bytes.
  parallel_items(count, threads, [&](int64_t v) {
    NumpyRandomState rs(synthetic_volume_seed(seed, first + v));
    volumes[static_cast<size_t>(v)] = make_test_image_3d(options, rs);
    return true;
  });
  return volumes;
}

}  // namespace volshard
