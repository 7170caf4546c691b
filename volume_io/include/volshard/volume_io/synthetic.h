#pragma once
// MONAI's create_test_image_3d (MONAI 1.4, monai/data/synthetic.py), bit-exact,
// on a re-implementation of numpy's legacy np.random.RandomState. Standard
// library only (also compiled into the fuzz target, which has no LibTorch).
//
// Bit-exact means: for the same RandomState seed and options, image and label
// hold the same bytes as MONAI's float32 image and int32 label, and the
// generator ends in the same state, so a sequence of volumes drawn from one
// running RandomState (the MONAI tutorial: np.random.seed(0) once, then 40
// volumes) is reproduced too. tests/datasets/oracle/make_synthetic_golden.py
// pins this against numpy.

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "volshard/core/mt19937.h"

namespace volshard {

/// numpy's legacy np.random.RandomState(seed), for the draws MONAI's
/// synthetic data uses. Not thread-safe; copyable (a copy continues the same
/// stream independently).
class NumpyRandomState {
 public:
  /// RandomState(seed): MT19937 init_genrand(seed), that is std::mt19937(seed).
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  /// rs.randint(lo, hi): uniform in [lo, hi) by numpy's masked rejection
  /// (rng = hi-lo-1; mask = smallest 2^k-1 >= rng; draw mt() & mask until
  /// <= rng; 64-bit draws (hi word first) when rng >= 2^32). rng == 0 returns
  /// lo without drawing, as numpy does. Throws std::invalid_argument if lo >= hi.
  int64_t randint(int64_t lo, int64_t hi);

  /// rs.random(): ((a >> 5) * 2^26 + (b >> 6)) / 2^53 from two draws, in [0, 1).
  double random() {
    const uint32_t a = mt_() >> 5;
    const uint32_t b = mt_() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }

  /// rs.uniform(lo, hi) = lo + (hi - lo) * random(); hi < lo is allowed, as in
  /// numpy. Throws std::invalid_argument if hi - lo is not finite (numpy raises
  /// OverflowError). Bit-exact with numpy wherever the compiler does not fuse
  /// the multiply-add (ISO C++ mode on x86-64, our build; always when lo == 0).
  double uniform(double lo, double hi);

  /// out[0, count) = count successive uniform(lo, hi) draws, as
  /// rs.uniform(lo, hi, size=count) fills them (C order); faster than a loop.
  void uniform_fill(double lo, double hi, double* out, size_t count);

  /// Advances the generator past count random() draws (2 * count raw draws)
  /// without computing them.
  void skip_doubles(uint64_t count);

  /// The next raw 32-bit MT19937 output (rs.randint(2**32, dtype=np.uint32)).
  uint32_t next_uint32() { return mt_(); }

 private:
  Mt19937 mt_;
};

/// create_test_image_3d's arguments, with MONAI's defaults (the DDP tutorial
/// uses 128^3 and num_seg_classes = 1).
struct SyntheticOptions {
  int64_t height = 128;     ///< voxels along axis 0, > 2 * rad_max
  int64_t width = 128;      ///< voxels along axis 1, > 2 * rad_max
  int64_t depth = 128;      ///< voxels along axis 2 (fastest), > 2 * rad_max
  int num_objs = 12;        ///< spheres; <= 0 draws none (as MONAI's range())
  int rad_max = 30;         ///< voxels, > rad_min; radii are drawn in [rad_min, rad_max)
  int rad_min = 5;          ///< voxels, >= 1
  double noise_max = 0.0;   ///< noise is uniform in [0, num_seg_classes * noise_max)
  int num_seg_classes = 5;  ///< >= 1 (volshard's check; MONAI treats < 1 like 1)
};

/// Radii for a volume whose smallest edge is `min_size` voxels: MONAI's
/// defaults (rad_max 30, rad_min 5) where they fit (min_size > 60), so the
/// volumes stay bit-exact with create_test_image_3d's there; below, both
/// scaled with the size: rad_max = (min_size - 1) / 2, rad_min =
/// max(1, round(rad_max / 6)). Sets options.rad_max and rad_min; sizes below 5
/// leave no valid radii (validate() says so).
void fit_radii(SyntheticOptions& options, int64_t min_size);

/// One sphere as drawn: centre (x, y, z) along (height, width, depth), radius
/// in voxels, and the value written into the image before rescaling.
struct SyntheticSphere {
  int64_t x = 0, y = 0, z = 0, radius = 0;
  double value = 0.0;
};

/// One volume, in numpy C order over (height, width, depth): voxel (i, j, k)
/// is at (i * width + j) * depth + k, the last axis fastest.
struct SyntheticVolume {
  std::array<int64_t, 3> shape{};        ///< {height, width, depth}
  std::vector<float> image;              ///< MONAI's img: rescaled to [0, 1]
  std::vector<int32_t> label;            ///< MONAI's seg: ceil(image before noise), 0 = background
  std::vector<SyntheticSphere> spheres;  ///< in draw order (later ones overwrite earlier ones)
};

/// Throws std::invalid_argument naming the value where MONAI raises
/// (rad_max <= rad_min, rad_min < 1, min(h, w, d) <= 2 * rad_max) and for
/// num_seg_classes < 1, negative sizes, an element count that overflows, and a
/// non-finite num_seg_classes * noise_max.
void validate(const SyntheticOptions& options);

/// create_test_image_3d(h, w, d, ..., random_state=rs): draws from rs exactly
/// as MONAI does (4 randint and one random() per sphere, then one uniform()
/// per voxel even when noise_max == 0), leaving rs where MONAI leaves it.
SyntheticVolume make_test_image_3d(const SyntheticOptions& options, NumpyRandomState& rs);

/// "SYNTH" in ASCII: the purpose of the per-volume seeds in the shared stream.
constexpr uint64_t kSyntheticSeedPurpose = 0x53594E5448ULL;

/// The numpy seed of volume `index` for base seed `seed` (what `volshard synth`
/// and make_volumes use): the low 32 bits of
///   derive_seed(seed, Stream::kShared, 0, kSyntheticSeedPurpose + index)
/// (index taken as uint64, the sum mod 2^64). Every volume has its own
/// RandomState, so volumes are independent of each other, of the order and
/// of the thread that makes them, and the same on every rank. This is not the
/// MONAI tutorial's stream (one running RandomState(0) for all volumes): for
/// that, call make_test_image_3d repeatedly with one NumpyRandomState(0).
uint32_t synthetic_volume_seed(uint64_t seed, int64_t index);

/// Volumes first .. first + count - 1, volume i made by make_test_image_3d
/// with NumpyRandomState(synthetic_volume_seed(seed, i)), on `threads`
/// std::threads. Byte-identical for any thread count. Throws
/// std::invalid_argument for invalid options, first < 0, count < 0 or
/// threads < 1.
std::vector<SyntheticVolume> make_volumes(const SyntheticOptions& options, uint64_t seed,
                                          int64_t first, int64_t count, int threads);

}  // namespace volshard
