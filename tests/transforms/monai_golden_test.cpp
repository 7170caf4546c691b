// The CT/MRI transforms against what MONAI 1.4.0 itself computed on the same
// inputs (tests/transforms/oracle/make_monai_goldens.py): LPS, oblique and
// permuted affines, anisotropic spacing, odd sizes, one and four channels.
// The random intensity augmentations, RandAffine and Rand3DElastic against
// MONAI given the same draws.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "volshard/core/file_io.h"
#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

using json = nlohmann::json;
const std::string kDir = VOLSHARD_TRANSFORMS_ORACLE_DIR "/monai_goldens/";

at::Tensor load(const json& c, const char* file, const char* shape) {
  const std::vector<char> bytes = read_file(kDir + c.at(file).get<std::string>());
  const auto dims = c.at(shape).get<std::vector<int64_t>>();
  at::Tensor t = at::empty(dims, at::kFloat);
  EXPECT_EQ(static_cast<size_t>(t.numel()) * 4, bytes.size()) << c.at(file);
  std::memcpy(t.data_ptr<float>(), bytes.data(), bytes.size());
  return t;
}

Affine affine_of(const json& a) {
  Affine m{};
  for (size_t r = 0; r < 4; ++r)
    for (size_t k = 0; k < 4; ++k) m[r][k] = a.at(r).at(k).get<double>();
  return m;
}

std::vector<json> cases_of(const std::string& transform) {
  const json manifest = json::parse(read_text_file(kDir + "manifest.json"));
  std::vector<json> out;
  for (const json& c : manifest.at("cases"))
    if (c.at("transform") == transform) out.push_back(c);
  return out;
}

void expect_affine_near(const Affine& got, const json& want, const std::string& name) {
  const Affine w = affine_of(want);
  for (size_t r = 0; r < 4; ++r)
    for (size_t k = 0; k < 4; ++k)
      EXPECT_NEAR(got[r][k], w[r][k], 1e-9) << name << " [" << r << "][" << k << "]";
}

TEST(MonaiGoldenTest, OrientationEqualsMonaiExactlyForEveryAffine) {
  const auto cases = cases_of("Orientation");
  ASSERT_GE(cases.size(), 8u);
  for (const json& c : cases) {
    const std::string name = c.at("name");
    const SpatialImage out =
        orient({load(c, "input", "input_shape"), affine_of(c.at("input_affine"))},
               c.at("params").at("axcodes"));
    const at::Tensor want = load(c, "output", "output_shape");
    ASSERT_EQ(out.data.sizes(), want.sizes()) << name;
    EXPECT_TRUE(at::equal(out.data, want)) << name;
    expect_affine_near(out.affine, c.at("output_affine"), name);
    EXPECT_EQ(axcodes(out.affine), c.at("params").at("axcodes").get<std::string>()) << name;
  }
}

TEST(MonaiGoldenTest, ScaleIntensityRangeEqualsMonaiBitForBit) {
  const auto cases = cases_of("ScaleIntensityRange");
  ASSERT_EQ(cases.size(), 2u);
  for (const json& c : cases) {
    const json& p = c.at("params");
    ScaleIntensityRangeOptions o;
    o.a_min = p.at("a_min");
    o.a_max = p.at("a_max");
    o.b_min = p.at("b_min");
    o.b_max = p.at("b_max");
    o.clip = p.at("clip");
    EXPECT_TRUE(at::equal(scale_intensity_range(load(c, "input", "input_shape"), o),
                          load(c, "output", "output_shape")))
        << c.at("name");
  }
}

TEST(MonaiGoldenTest, NormalizeIntensityEqualsMonaiForEveryMode) {
  const auto cases = cases_of("NormalizeIntensity");
  ASSERT_EQ(cases.size(), 5u);
  for (const json& c : cases) {
    const json& p = c.at("params");
    NormalizeIntensityOptions o;
    o.nonzero = p.value("nonzero", false);
    o.channel_wise = p.value("channel_wise", false);
    if (p.contains("subtrahend")) o.subtrahend = {p.at("subtrahend").get<double>()};
    if (p.contains("divisor")) o.divisor = {p.at("divisor").get<double>()};
    const at::Tensor got = normalize_intensity(load(c, "input", "input_shape"), o);
    const at::Tensor want = load(c, "output", "output_shape");
    // Within a few float32 ulps: 3 of the 5 cases differ in the last bits
    // (the mean and std are float32 reductions whose summation order is not
    // fixed across calls and thread counts).
    EXPECT_TRUE(at::allclose(got, want, /*rtol=*/1e-6, /*atol=*/1e-6)) << c.at("name");
  }
}

TEST(MonaiGoldenTest, CropForegroundEqualsMonaiAndKeepsWorldPositions) {
  const auto cases = cases_of("CropForeground");
  ASSERT_EQ(cases.size(), 2u);
  for (const json& c : cases) {
    const SpatialImage in{load(c, "input", "input_shape"), affine_of(c.at("input_affine"))};
    const SpatialImage out = crop_box(in, foreground_box(in.data, c.at("params").at("margin")));
    EXPECT_TRUE(at::equal(out.data, load(c, "output", "output_shape"))) << c.at("name");
    expect_affine_near(out.affine, c.at("output_affine"), c.at("name"));
  }
}

TEST(MonaiGoldenTest, SpatialPadEqualsMonaiAndKeepsWorldPositions) {
  const auto cases = cases_of("SpatialPad");
  ASSERT_EQ(cases.size(), 2u);
  for (const json& c : cases) {
    const SpatialImage in{load(c, "input", "input_shape"), affine_of(c.at("input_affine"))};
    const auto size = c.at("params").at("spatial_size").get<std::vector<int64_t>>();
    const SpatialImage out = spatial_pad(in, {size[0], size[1], size[2]});
    EXPECT_TRUE(at::equal(out.data, load(c, "output", "output_shape"))) << c.at("name");
    expect_affine_near(out.affine, c.at("output_affine"), c.at("name"));
  }
}

// Spacing runs MONAI's own ATen ops (affine_grid's grid, grid_sampler with
// border padding, align_corners=false, float64) on a theta computed with the
// same LAPACK calls on the same layouts. Pinned for torch 2.11 (PyPI) against
// MONAI 1.4.0 with numpy 1.26's bundled OpenBLAS:
// - an affine that maps axes to axes (any orientation, any spacing): both
//   modes bit-identical, as they were with torch 1.13;
// - an oblique affine: MONAI factors its 3 x 3 part with numpy's LAPACK
//   (cholesky, inv, solve) and we with torch 2.11's; with torch 1.13 both were
//   Debian's LAPACK and the bits agreed, now they differ by an ulp (measured:
//   theta within 5e-18). Bilinear then moves by at most one float32 ulp of the
//   values (1.5e-5 measured), and nearest may take the other neighbour, but
//   only where a sample point lies on a half-voxel tie (checked below).
constexpr double kSpacingObliqueBilinearTolerance = 2e-5;

bool maps_axes_to_axes(const Affine& a) {
  for (size_t c = 0; c < 3; ++c) {
    int nonzero = 0;
    for (size_t r = 0; r < 3; ++r) nonzero += a[r][c] != 0.0 ? 1 : 0;
    if (nonzero != 1) return false;
  }
  return true;
}

// For each output voxel: does the input coordinate it samples (inv(in) @ out,
// from the goldens' affines) lie within 1e-6 of a half-voxel along some axis?
std::vector<bool> half_voxel_ties(const Affine& in, const Affine& out,
                                  const std::array<int64_t, 3>& shape) {
  at::Tensor a = at::empty({4, 4}, at::kDouble), b = at::empty({4, 4}, at::kDouble);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t k = 0; k < 4; ++k) {
      a[r][k] = in[static_cast<size_t>(r)][static_cast<size_t>(k)];
      b[r][k] = out[static_cast<size_t>(r)][static_cast<size_t>(k)];
    }
  const at::Tensor x = at::matmul(at::linalg_inv(a), b);
  auto m = x.accessor<double, 2>();
  std::vector<bool> ties;
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < shape[1]; ++j)
      for (int64_t k = 0; k < shape[2]; ++k) {
        bool tie = false;
        for (int64_t r = 0; r < 3; ++r) {
          const double c = m[r][0] * static_cast<double>(i) + m[r][1] * static_cast<double>(j) +
                           m[r][2] * static_cast<double>(k) + m[r][3];
          tie = tie || std::abs(c - std::floor(c) - 0.5) < 1e-6;
        }
        ties.push_back(tie);
      }
  return ties;
}

TEST(MonaiGoldenTest, SpacingEqualsMonaiForEveryAffineAndMode) {
  const auto cases = cases_of("Spacing");
  ASSERT_GE(cases.size(), 13u);
  double bilinear_diff = 0.0, oblique_bilinear_diff = 0.0, affine_diff = 0.0;
  int nearest_cases = 0, axis_aligned_cases = 0, flipped_ties = 0;
  for (const json& c : cases) {
    const std::string name = c.at("name");
    const json& p = c.at("params");
    const bool nearest = p.at("mode") == "nearest";
    nearest_cases += nearest ? 1 : 0;
    const SpatialImage in{load(c, "input", "input_shape"), affine_of(c.at("input_affine"))};
    const bool axis_aligned = maps_axes_to_axes(in.affine);
    axis_aligned_cases += axis_aligned ? 1 : 0;
    const auto pixdim = p.at("pixdim").get<std::array<double, 3>>();
    const SpatialImage out =
        spacing(in, pixdim, nearest ? Interpolation::kNearest : Interpolation::kBilinear);
    const at::Tensor want = load(c, "output", "output_shape");
    ASSERT_EQ(out.data.sizes(), want.sizes()) << name;
    EXPECT_EQ(out.data.scalar_type(), at::kFloat) << name;
    const Grid grid =
        spacing_grid({in.data.size(1), in.data.size(2), in.data.size(3)}, in.affine, pixdim);
    EXPECT_EQ(grid.shape, (std::array<int64_t, 3>{want.size(1), want.size(2), want.size(3)}))
        << name;
    expect_affine_near(out.affine, c.at("output_affine"), name);
    const Affine w = affine_of(c.at("output_affine"));
    for (size_t r = 0; r < 4; ++r)
      for (size_t k = 0; k < 4; ++k)
        affine_diff = std::max(affine_diff, std::abs(out.affine[r][k] - w[r][k]));
    const double diff = (out.data - want).abs().max().item<double>();
    if (axis_aligned) {
      EXPECT_TRUE(at::equal(out.data, want)) << name << ": largest difference " << diff;
      if (!nearest) bilinear_diff = std::max(bilinear_diff, diff);
    } else if (!nearest) {
      EXPECT_LE(diff, kSpacingObliqueBilinearTolerance) << name;
      oblique_bilinear_diff = std::max(oblique_bilinear_diff, diff);
    } else {
      const std::vector<bool> ties = half_voxel_ties(in.affine, w, grid.shape);
      const at::Tensor differs = (out.data != want).reshape({want.size(0), -1}).any(0);
      ASSERT_EQ(static_cast<size_t>(differs.numel()), ties.size()) << name;
      for (size_t v = 0; v < ties.size(); ++v) {
        if (!differs[static_cast<int64_t>(v)].item<bool>()) continue;
        ++flipped_ties;
        EXPECT_TRUE(ties[v]) << name << ": voxel " << v << " differs but samples no half-voxel tie";
      }
    }
  }
  EXPECT_EQ(nearest_cases, 4);
  EXPECT_GE(axis_aligned_cases, 9);
  RecordProperty("largest_oblique_bilinear_difference", std::to_string(oblique_bilinear_diff));
  std::cout << "Spacing vs MONAI: axis-aligned cases " << axis_aligned_cases
            << " bit-identical (bilinear and nearest); oblique: largest bilinear |difference| "
            << oblique_bilinear_diff << ", nearest voxels on a half-voxel tie that took the other "
            << "neighbour " << flipped_ties << ", affine " << affine_diff << "\n";
}

TEST(MonaiGoldenTest, BratsChannelsEqualMonaisConvertToMultiChannelBasedOnBratsClasses) {
  const auto cases = cases_of("ConvertToMultiChannelBasedOnBratsClasses");
  ASSERT_EQ(cases.size(), 1u);
  const at::Tensor label = load(cases[0], "input", "input_shape");
  const at::Tensor want = load(cases[0], "output", "output_shape");
  ASSERT_GT(want.sum().item<double>(), 0.0);
  const at::Tensor got = brats_channels(label, BratsLabels::kBrats);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(got, want));
  const at::Tensor bytes = brats_channels(label.to(at::kByte), BratsLabels::kBrats);
  EXPECT_EQ(bytes.scalar_type(), at::kByte);
  EXPECT_TRUE(at::equal(bytes, want.to(at::kByte)));
}

// The random intensity augmentations, given the values MONAI drew (the
// goldens replay them into MONAI's RandomState calls; volshard draws its own
// from the sample's stream): the largest |difference| over each family's
// cases, printed, and within float32 rounding of the values.
double largest_difference(const at::Tensor& got, const at::Tensor& want, const std::string& name) {
  EXPECT_EQ(got.sizes(), want.sizes()) << name;
  EXPECT_EQ(got.scalar_type(), at::kFloat) << name;
  if (got.sizes() != want.sizes()) return INFINITY;
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
}

TEST(MonaiGoldenTest, GaussianNoiseGivenItsDrawsEqualsMonaiBitForBit) {
  const auto cases = cases_of("RandGaussianNoise");
  ASSERT_EQ(cases.size(), 3u);
  double worst = 0.0;
  for (const json& c : cases) {
    const json& p = c.at("params");
    const at::Tensor x = load(c, "input", "input_shape");
    const at::Tensor z = load(c, "noise", "input_shape");
    const at::Tensor got = add_gaussian_noise(x, p.at("mean"), p.at("drawn_std"), z);
    const at::Tensor want = load(c, "output", "output_shape");
    worst = std::max(worst, largest_difference(got, want, c.at("name")));
    EXPECT_TRUE(at::equal(got, want)) << c.at("name");
  }
  std::cout << "RandGaussianNoise vs MONAI: " << cases.size() << " cases, largest |difference| "
            << worst << "\n";
}

// The same sums as MONAI's separable_filtering (zero padding, X then Y then
// Z), the host's in its own order: within float32 rounding of the values.
TEST(MonaiGoldenTest, GaussianSmoothGivenItsSigmasEqualsMonaiWithinRounding) {
  const auto cases = cases_of("RandGaussianSmooth");
  ASSERT_EQ(cases.size(), 2u);
  double worst = 0.0;
  for (const json& c : cases) {
    const auto sigma = c.at("params").at("drawn_sigma").get<std::array<double, 3>>();
    const at::Tensor got = gaussian_smooth(load(c, "input", "input_shape"), sigma);
    const at::Tensor want = load(c, "output", "output_shape");
    const double scale = std::max(1.0, want.abs().max().item<double>());
    const double diff = largest_difference(got, want, c.at("name"));
    worst = std::max(worst, diff / scale);
    EXPECT_LE(diff, 1e-6 * scale) << c.at("name");
  }
  std::cout << "RandGaussianSmooth vs MONAI: " << cases.size()
            << " cases, largest |difference| relative to the largest value " << worst << "\n";
}

TEST(MonaiGoldenTest, AdjustContrastGivenItsGammaEqualsMonaiForEveryOption) {
  const auto cases = cases_of("RandAdjustContrast");
  ASSERT_EQ(cases.size(), 6u);
  double worst = 0.0;
  for (const json& c : cases) {
    const json& p = c.at("params");
    const at::Tensor got = adjust_contrast(load(c, "input", "input_shape"), p.at("drawn_gamma"),
                                           p.at("invert_image"), p.at("retain_stats"));
    const at::Tensor want = load(c, "output", "output_shape");
    const double diff = largest_difference(got, want, c.at("name"));
    worst = std::max(worst, diff);
    // The same torch.pow as MONAI's, bit for bit where ATen runs the kernel the
    // goldens were made with (an AVX2 machine); an AVX-512 machine's vector
    // kernel rounds some powers one step apart, which the range multiplies
    // (measured: 0.00012, 1.2e-7 of the largest value, MONAI's own output
    // there as ours, on an AMD EPYC with AVX-512). retain_stats's mean
    // and std are float32 reductions whose order may follow the thread count.
    EXPECT_LE(diff, 1e-6 * std::max(1.0, want.abs().max().item<double>())) << c.at("name");
  }
  std::cout << "RandAdjustContrast vs MONAI: " << cases.size() << " cases, largest |difference| "
            << worst << "\n";
}

// numpy's leggrid3d replayed operation for operation in float64, then MONAI's
// float32(image * exp(field)), on the host and with tensor ops (the GPU's
// code): the same bits but where ATen's exp and numpy's round a float64
// value one step apart, which moves a float32 result by at most one step.
TEST(MonaiGoldenTest, BiasFieldGivenItsCoefficientsEqualsMonaiForEveryDegree) {
  const auto cases = cases_of("RandBiasField");
  ASSERT_EQ(cases.size(), 4u);
  for (const Gather how : {Gather::kAuto, Gather::kTensorOps}) {
    const char* path = how == Gather::kAuto ? "host" : "tensor ops, the GPU's code";
    double worst = 0.0;
    int64_t moved = 0;
    for (const json& c : cases) {
      const json& p = c.at("params");
      const at::Tensor x = load(c, "input", "input_shape");
      const at::Tensor got = apply_bias_field(x, p.at("degree").get<int64_t>(),
                                              p.at("drawn_coeff").get<std::vector<double>>(), how);
      const at::Tensor want = load(c, "output", "output_shape");
      const double scale = std::max(1.0, want.abs().max().item<double>());
      const double diff = largest_difference(got, want, c.at("name"));
      worst = std::max(worst, diff / scale);
      moved += got.ne(want).sum().item<int64_t>();
      EXPECT_TRUE(at::allclose(got, want, /*rtol=*/1.2e-7, /*atol=*/0.0))
          << c.at("name") << " (" << path << "): " << diff;
    }
    std::cout << "RandBiasField vs MONAI (" << path << "): " << cases.size()
              << " cases, largest |difference| relative to the largest value " << worst << ", "
              << moved << " values not bit for bit\n";
  }
}

// A warp case's padding mode, as MONAI names it.
PaddingMode padding_of(const json& params) {
  const std::string name = params.at("padding_mode");
  return name == "zeros"    ? PaddingMode::kZeros
         : name == "border" ? PaddingMode::kBorder
                            : PaddingMode::kReflection;
}

// A warp case's affine draws (rotate, shear, translate, scale), applied.
AffineParams affine_of_draws(const json& params) {
  AffineParams a;
  a.apply = true;
  a.rotate = params.at("rotate").get<std::array<double, 3>>();
  a.shear = params.at("shear").get<std::array<double, 6>>();
  a.translate = params.at("translate").get<std::array<double, 3>>();
  a.scale = params.at("scale").get<std::array<double, 3>>();
  return a;
}

// A warp case's input as volshard holds it: an image, or a uint8 label (as
// the cache keeps labels) beside a zero image; a view of its crop, if any.
Sample warp_input(const json& c, const at::Tensor& x, bool label) {
  const json& p = c.at("params");
  Sample sample;
  sample.image = label ? at::zeros_like(x) : x;
  if (label) sample.label = x.to(at::kByte);
  if (!p.at("crop_start").is_null()) {
    const auto shape = std::array<int64_t, 3>{x.size(1), x.size(2), x.size(3)};
    sample.view =
        SpatialMap::identity(shape).cropped(p.at("crop_start").get<std::array<int64_t, 3>>(),
                                            p.at("crop_size").get<std::array<int64_t, 3>>());
  }
  return sample;
}

// RandAffine given MONAI's draws: on the whole volume (the crop is the volume),
// and about a crop, where volshard's grid reads the whole volume around the
// crop as MONAI's Affine does with the matrix moved to the crop's centre;
// RandZoom as volshard makes it (a scale 1 / zoom in front of the matrix).
TEST(MonaiGoldenTest, RandAffineGivenItsDrawsEqualsMonaiOnTheVolumeAndAboutACrop) {
  const auto cases = cases_of("RandAffine");
  ASSERT_EQ(cases.size(), 13u);
  for (const Gather how : {Gather::kAuto, Gather::kTensorOps}) {  // host kernel; the GPU's code
    double worst = 0.0;
    int64_t label_voxels = 0, label_differ = 0;
    for (const json& c : cases) {
      const std::string name = c.at("name");
      const json& p = c.at("params");
      AffineParams a = p.contains("rotate") ? affine_of_draws(p) : AffineParams{};
      if (p.contains("zoom") && !p.at("zoom").is_null()) {
        a.zoom_apply = true;
        a.zoom = p.at("zoom").get<double>();
      }
      const PaddingMode padding = padding_of(p);
      const at::Tensor x = load(c, "input", "input_shape");
      const bool label = p.at("mode") == "nearest";
      const Sample sample = warp_input(c, x, label);
      const Sample out = warp_view(sample, affine_matrix(a), padding, how);
      EXPECT_FALSE(out.view.has_value()) << name;
      const at::Tensor want = load(c, "output", "output_shape");
      if (label) {
        ASSERT_EQ(out.label.scalar_type(), at::kByte) << name;
        ASSERT_EQ(out.label.sizes(), want.sizes()) << name;
        label_voxels += want.numel();
        label_differ += out.label.to(at::kFloat).ne(want).sum().item<int64_t>();
      } else {
        const double diff = largest_difference(out.image, want, name);
        worst = std::max(worst, diff / std::max(1.0, want.abs().max().item<double>()));
        // float32 grids both, normalised over the box here and the volume there.
        EXPECT_LE(diff, 2e-5 * std::max(1.0, want.abs().max().item<double>())) << name;
      }
    }
    std::cout << "RandAffine vs MONAI ("
              << (how == Gather::kAuto ? "host kernel" : "tensor ops, the GPU's code")
              << "): " << cases.size()
              << " cases, largest |difference| relative to the image's range " << worst << "; "
              << label_differ << " of " << label_voxels << " label voxels differ\n";
    EXPECT_EQ(label_differ, 0);
  }
}

// Rand3DElastic given MONAI's draws (the offset field, magnitude, sigma and
// the affine's 15): MONAI's own Rand3DElastic on the whole volume, and its
// steps with the matrix moved to the crop's centre about a crop. The smoothed,
// scaled offsets equal MONAI's within float32 rounding (the same filter, its
// sums in the host's order); the resampled values within float32 rounding of
// the positions (MONAI's grid is float32).
TEST(MonaiGoldenTest, Rand3DElasticGivenItsDrawsEqualsMonaiOnTheVolumeAndAboutACrop) {
  const auto cases = cases_of("Rand3DElastic");
  ASSERT_EQ(cases.size(), 10u);
  for (const Gather how : {Gather::kAuto, Gather::kTensorOps}) {  // host kernel; the GPU's code
    double worst = 0.0, worst_offset = 0.0;
    int64_t label_voxels = 0, label_differ = 0;
    for (const json& c : cases) {
      const std::string name = c.at("name");
      const json& p = c.at("params");
      const AffineParams a = affine_of_draws(p);
      const PaddingMode padding = padding_of(p);
      const at::Tensor offsets =
          elastic_offsets(load(c, "field", "field_shape"), p.at("sigma").get<double>(),
                          p.at("magnitude").get<double>());
      const at::Tensor monai_offsets = load(c, "offsets", "offsets_shape");
      const double offset_scale = std::max(1.0, monai_offsets.abs().max().item<double>());
      const double offset_diff = largest_difference(offsets, monai_offsets, name);
      worst_offset = std::max(worst_offset, offset_diff / offset_scale);
      EXPECT_LE(offset_diff, 1e-6 * offset_scale) << name;
      const at::Tensor x = load(c, "input", "input_shape");
      const bool label = p.at("mode") == "nearest";
      const Sample sample = warp_input(c, x, label);
      const Sample out = warp_view(sample, affine_matrix(a), padding, how, offsets);
      const at::Tensor want = load(c, "output", "output_shape");
      if (label) {
        ASSERT_EQ(out.label.scalar_type(), at::kByte) << name;
        ASSERT_EQ(out.label.sizes(), want.sizes()) << name;
        label_voxels += want.numel();
        label_differ += out.label.to(at::kFloat).ne(want).sum().item<int64_t>();
      } else {
        const double diff = largest_difference(out.image, want, name);
        worst = std::max(worst, diff / std::max(1.0, want.abs().max().item<double>()));
        EXPECT_LE(diff, 2e-5 * std::max(1.0, want.abs().max().item<double>())) << name;
      }
    }
    std::cout << "Rand3DElastic vs MONAI ("
              << (how == Gather::kAuto ? "host kernel" : "tensor ops, the GPU's code")
              << "): " << cases.size()
              << " cases, largest |difference| relative to the image's range " << worst
              << " (offsets: " << worst_offset << " of the largest); " << label_differ << " of "
              << label_voxels << " label voxels differ\n";
    EXPECT_EQ(label_differ, 0);
  }
}

TEST(CropForegroundTest, AnImageWithoutForegroundGivesMonaisEmptyBox) {
  const VoxelBox box = foreground_box(at::zeros({1, 4, 5, 6}), 2);
  EXPECT_EQ(box.start, (std::array<int64_t, 3>{0, 0, 0}));
  EXPECT_EQ(box.end, (std::array<int64_t, 3>{0, 0, 0}));
  EXPECT_THROW(foreground_box(at::zeros({1, 4, 5, 6}), -1), std::invalid_argument);
}

TEST(OrientationTest, BadAxcodesAreNamed) {
  const SpatialImage img{at::zeros({1, 2, 3, 4}), identity_affine()};
  EXPECT_THAT([&] { orient(img, "RAR"); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                               ::testing::HasSubstr("axcodes='RAR'")));
  EXPECT_THAT([&] { orient(img, "RAX"); },
              ::testing::ThrowsMessage<std::invalid_argument>(::testing::HasSubstr("'X'")));
  // nibabel's axcodes2ornt has no lower case, and neither has the prefix's check.
  EXPECT_THAT([&] { orient(img, "ras"); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                               ::testing::HasSubstr("axcodes='ras' has 'r'")));
  EXPECT_EQ(axcodes(identity_affine()), "RAS");
}

}  // namespace
}  // namespace volshard
