#pragma once
// Small Medical-Segmentation-Decathlon-style datasets (what `volshard synth
// --kind ct|mri` writes): a folder laid out as downloaded from
// medicaldecathlon.com (dataset.json, imagesTr/, labelsTr/, imagesTs/) whose
// cases are synthetic and shaped like Task09 (spleen CT) and Task01 (BraTS
// MRI), so that spacing, orientation, intensity scaling and multi-channel
// code meets what real data has. Standard library only.
//
// Case `index` is a function of (seed, index, size) alone: it draws from its
// own StreamRng seeded with derive_seed(seed, Stream::kShared, 0, purpose +
// index), and its noise is integer arithmetic on those draws (no libm, no
// std::*_distribution), so the files are the same for any thread count.

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "volshard/core/affine.h"

namespace volshard {

/// What `volshard synth --kind` writes.
enum class SynthKind {
  kSpheres,  ///< MONAI's tutorial spheres, imgN/segN (write_synthetic_dataset)
  kCt,       ///< Task09-like spleen CT
  kMri,      ///< Task01-like BraTS MRI
};

/// "spheres" | "ct" | "mri".
std::string to_string(SynthKind kind);
/// The reverse; throws std::invalid_argument naming the value and listing the kinds.
SynthKind parse_synth_kind(const std::string& name);

/// "SYNCT" / "SYNMR" in ASCII: the purposes of the per-case seeds.
constexpr uint64_t kCtSeedPurpose = 0x53594E4354ULL;
constexpr uint64_t kMriSeedPurpose = 0x53594E4D52ULL;

/// The in-plane edge (`--size`) used when none is given: 96 (ct), 64 (mri).
int64_t default_decathlon_size(SynthKind kind);
/// Valid sizes, inclusive: ct [16, 512], mri [24, 256] (smaller grids leave
/// no room for the organ or the three nested tumour regions).
std::pair<int64_t, int64_t> decathlon_size_range(SynthKind kind);
/// The grid {X, Y, Z} for an in-plane edge: ct size x size x size / 4 (thick
/// slices, as abdominal CT), mri size x size x size * 5 / 8 (BraTS' 240 x 240
/// x 155 proportions). Throws std::invalid_argument for a size outside
/// decathlon_size_range or kind kSpheres.
std::array<int64_t, 3> decathlon_shape(SynthKind kind, int64_t size);

/// One CT case, voxels in NIfTI file order (x fastest, then y, z).
struct CtCase {
  std::array<int64_t, 3> shape{};  ///< X, Y, Z
  std::vector<int16_t> stored;     ///< HU + 1024 (scl_slope 1, scl_inter -1024), in [0, 4095]
  std::vector<uint8_t> label;      ///< 0 background, 1 spleen
  Affine affine{};  ///< R * diag(-sx, -sy, sz) + t; R rotates about z (oblique cases)
  std::array<double, 3> spacing_mm{};
  bool oblique = false;  ///< every third case, index % 3 == 1
};

/// CT case `index`: air (-1000 HU) around an elliptic body (subcutaneous fat
/// -100 HU, soft tissue ~40 HU, a vertebra ~450 HU) holding a spleen-like
/// ellipsoid at ~120 HU on the patient's left-posterior side, labelled 1;
/// integer noise of a few HU (10-15 in tissue). Spacing sx = sy in [0.70,
/// 0.90] mm, sz in [4.5, 5.5] mm; oblique cases turn 3.4-6.9 degrees about z.
/// Throws std::invalid_argument for a size outside decathlon_size_range or index < 0.
CtCase make_ct_case(int64_t size, uint64_t seed, int64_t index);

/// The Decathlon Task01 channel order of MriCase::image.
constexpr std::array<const char*, 4> kMriModalities = {"FLAIR", "T1w", "t1gd", "T2w"};

/// One MRI case, voxels in NIfTI file order (x fastest, then y, z, channel).
struct MriCase {
  std::array<int64_t, 3> shape{};  ///< X, Y, Z; the image has 4 channels more
  std::vector<float> image;        ///< X * Y * Z * 4, channels as kMriModalities
  std::vector<uint8_t> label;      ///< 0, 1 edema, 2 non-enhancing tumour, 3 enhancing tumour
  Affine affine{};                 ///< R * I (1 mm) + t, RAS; R rotates about x (oblique cases)
  bool oblique = false;            ///< every third case, index % 3 == 1
};

/// MRI case `index`: a skull-stripped brain ellipsoid (grey-matter rim,
/// white matter, two CSF ventricles), exactly 0 in every channel outside it
/// and >= 1 inside; a tumour of nested ellipsoids, non-enhancing core (2)
/// inside an enhancing rim (3) inside edema (1), each label at least one
/// voxel; per channel its own contrast (edema bright in FLAIR and T2w,
/// the rim bright in t1gd), gain in [0.8, 1.25], a linear bias field of up
/// to +-10% and +-4% multiplicative noise. 1 mm isotropic.
/// Throws std::invalid_argument for a size outside decathlon_size_range or index < 0.
MriCase make_mri_case(int64_t size, uint64_t seed, int64_t index);

struct DecathlonSynthOptions {
  std::string out_dir;
  SynthKind kind = SynthKind::kCt;  ///< kCt | kMri
  int64_t count = 40;               ///< training cases, >= 1
  int64_t size = 0;                 ///< in-plane voxels; 0: default_decathlon_size(kind)
  uint64_t seed = 0;
  int64_t threads = 2;  ///< >= 1; output does not depend on it
  /// Called after each case is written with (done, total cases); may be empty.
  std::function<void(int64_t, int64_t)> progress;
};

/// Test images written besides `count` training cases: max(1, count / 4).
int64_t decathlon_test_count(int64_t count);

/// Writes out_dir/imagesTr/<name>_NNN.nii.gz and labelsTr/<name>_NNN.nii.gz
/// for cases 0 .. count-1, imagesTs/<name>_NNN.nii.gz for the next
/// decathlon_test_count(count) cases (name "spleen" or "BRATS", NNN the case
/// index, at least 3 digits), then dataset.json (name, description,
/// tensorImageSize, modality, labels, numTraining, numTest, training, test,
/// paths "./imagesTr/..."), last, so a folder with a dataset.json is
/// complete. CT images are int16 with scl_slope 1, scl_inter -1024; MRI
/// images float32 X x Y x Z x 4 (dim[0] = 4); labels uint8 on the image's
/// grid and affine. Each file is written atomically; throws
/// std::invalid_argument for invalid options and std::runtime_error naming
/// the file.
void write_decathlon_dataset(const DecathlonSynthOptions& options);

}  // namespace volshard
