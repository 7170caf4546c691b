#include "volshard/datasets/volume.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>

#include "volshard/datasets/load_pair.h"
#include "volshard/transforms/transforms.h"
#include "volume_io/nifti_test_util.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;
using namespace volshard::testing;

Affine identity_affine() {
  return Affine{{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}};
}

// Writes a NIfTI whose voxels hold their own file-order index.
template <class T>
std::string own_index_file(const std::string& path, const std::vector<int64_t>& shape,
                           NiftiDatatype type) {
  auto bytes = make_nifti(shape, type, own_index_voxels<T>(shape));
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  write_bytes(path, gz ? gzip(bytes) : bytes);
  return path;
}

TEST(ReadVolumeTest, IndexesAsNibabelChannelFirst) {
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{5, 4, 3, 2};
  const std::string path = own_index_file<int16_t>(dir + "/v.nii.gz", shape, NiftiDatatype::kInt16);
  const Volume v = read_volume(path);
  ASSERT_EQ(v.data.sizes().vec(), (std::vector<int64_t>{2, 5, 4, 3}));
  EXPECT_EQ(v.data.scalar_type(), at::kShort);
  EXPECT_TRUE(v.data.is_contiguous());
  const auto a = v.data.accessor<int16_t, 4>();
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t k = 0; k < 3; ++k) ASSERT_EQ(a[c][i][j][k], file_index(shape, i, j, k, c));
  EXPECT_EQ(v.spacing_mm, (std::array<double, 3>{2, 3, 4}));
  EXPECT_EQ(v.affine[0][3], -10);
  EXPECT_EQ(v.disk_dtype, NiftiDatatype::kInt16);
  EXPECT_EQ(v.path, path);
  EXPECT_EQ(v.nonfinite_voxels, 0);
}

TEST(ReadVolumeTest, ThreeDimensionalFilesHaveOneChannel) {
  const std::string dir = test_dir();
  const Volume v =
      read_volume(own_index_file<float>(dir + "/v.nii", {17, 5, 33}, NiftiDatatype::kFloat32));
  ASSERT_EQ(v.data.sizes().vec(), (std::vector<int64_t>{1, 17, 5, 33}));
  EXPECT_EQ(v.data[0][16][4][32].item<float>(), static_cast<float>(17 * 5 * 33 - 1));
  EXPECT_EQ(v.data[0][1][2][3].item<float>(), static_cast<float>(1 + 17 * (2 + 5 * 3)));
}

TEST(ReadVolumeTest, WidensUnsignedTypesThatAtenLacks) {
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{2, 2, 2};
  std::vector<uint8_t> u16(16);
  for (int v = 0; v < 8; ++v)
    put_le<uint16_t>(u16, static_cast<size_t>(2 * v), static_cast<uint16_t>(65535 - v));
  write_bytes(dir + "/u16.nii", make_nifti(shape, NiftiDatatype::kUint16, u16));
  const Volume a = read_volume(dir + "/u16.nii");
  EXPECT_EQ(a.data.scalar_type(), at::kInt);
  EXPECT_EQ(a.data[0][0][0][0].item<int32_t>(), 65535);
  EXPECT_EQ(a.data[0][1][1][1].item<int32_t>(), 65528);
  std::vector<uint8_t> u32(32);
  for (int v = 0; v < 8; ++v)
    put_le<uint32_t>(u32, static_cast<size_t>(4 * v), 4294967295u - static_cast<uint32_t>(v));
  write_bytes(dir + "/u32.nii.gz", gzip(make_nifti(shape, NiftiDatatype::kUint32, u32)));
  const Volume b = read_volume(dir + "/u32.nii.gz");
  EXPECT_EQ(b.data.scalar_type(), at::kLong);
  EXPECT_EQ(b.data[0][0][0][0].item<int64_t>(), 4294967295LL);
}

TEST(ReadVolumeTest, ScalesToFloat64AsNibabelUnlessSlopeIsIdentity) {
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{3, 2, 2};
  auto bytes = make_nifti(shape, NiftiDatatype::kInt16, own_index_voxels<int16_t>(shape));
  put_le<float>(bytes, 112, 2.5f);
  put_le<float>(bytes, 116, -3.0f);
  write_bytes(dir + "/scaled.nii", bytes);
  const Volume v = read_volume(dir + "/scaled.nii");
  EXPECT_EQ(v.data.scalar_type(), at::kDouble);
  EXPECT_EQ(v.data[0][2][1][1].item<double>(), 11 * 2.5 - 3.0);
  ReadOptions unscaled;
  unscaled.apply_scaling = false;
  const Volume raw = read_volume(dir + "/scaled.nii", unscaled);
  EXPECT_EQ(raw.data.scalar_type(), at::kShort);
  EXPECT_EQ(raw.data[0][2][1][1].item<int16_t>(), 11);
  const Volume f = read_volume_as_float(dir + "/scaled.nii");
  EXPECT_EQ(f.data.scalar_type(), at::kFloat);
  EXPECT_EQ(f.data[0][2][1][1].item<float>(), 24.5f);
  put_le<float>(bytes, 112, 1.0f);
  put_le<float>(bytes, 116, 0.0f);
  write_bytes(dir + "/identity.nii", bytes);
  EXPECT_EQ(read_volume(dir + "/identity.nii").data.scalar_type(), at::kShort);
}

// int32 labels read as float32 (MONAI's dtype) take a vectorised transpose:
// its values, tails (odd sizes) and rounding above 2^24 equal a plain cast.
TEST(ReadVolumeTest, Int32AsFloatEqualsACastOfTheInt32Read) {
  const std::string dir = test_dir();
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{37, 33, 29}, {16, 8, 12, 2}}) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<int32_t> values(static_cast<size_t>(n));
    for (int64_t v = 0; v < n; ++v)
      values[static_cast<size_t>(v)] = static_cast<int32_t>((v * 2654435761u) ^ (v << 7));
    std::vector<uint8_t> voxels(values.size() * 4);
    std::memcpy(voxels.data(), values.data(), voxels.size());
    write_bytes(dir + "/labels.nii", make_nifti(shape, NiftiDatatype::kInt32, voxels));
    const Volume ints = read_volume(dir + "/labels.nii");
    ASSERT_EQ(ints.data.scalar_type(), at::kInt);
    const Volume floats = read_volume_as_float(dir + "/labels.nii");
    EXPECT_TRUE(at::equal(floats.data, ints.data.to(at::kFloat))) << shape.size() << "D";
  }
}

// A compact label read: uint8 when every value fits, through the SSE
// transpose (int32, C order, sizes not multiples of 4), the tile kernel
// (int16) and file order; one value out of [0, 255] anywhere gives the usual
// output instead, with nothing wrapped.
TEST(ReadVolumeTest, Uint8IfItFitsReadsCompactLabelsAndFallsBackWhenAValueDoesNot) {
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{37, 33, 29};
  const int64_t n = 37 * 33 * 29;
  // {outlier value (0: none), where}: mid-volume goes through the 4 x 4
  // blocks, n - 5 (the last k-slice of 29) through the scalar edge.
  for (const auto& [outlier, at_voxel] : std::vector<std::pair<int32_t, int64_t>>{
           {0, 0}, {-1, n / 2}, {300, n / 2}, {256, n - 5}, {-7, n - 5}}) {
    std::vector<int32_t> values(static_cast<size_t>(n));
    for (int64_t v = 0; v < n; ++v)
      values[static_cast<size_t>(v)] = static_cast<int32_t>((v * 2654435761u) % 256);
    if (outlier != 0) values[static_cast<size_t>(at_voxel)] = outlier;
    std::vector<uint8_t> int32_bytes(values.size() * 4), int16_bytes(values.size() * 2);
    std::memcpy(int32_bytes.data(), values.data(), int32_bytes.size());
    for (size_t v = 0; v < values.size(); ++v) {
      const auto x = static_cast<int16_t>(values[v]);
      std::memcpy(int16_bytes.data() + 2 * v, &x, 2);
    }
    write_bytes(dir + "/l32.nii", make_nifti(shape, NiftiDatatype::kInt32, int32_bytes));
    write_bytes(dir + "/l16.nii", make_nifti(shape, NiftiDatatype::kInt16, int16_bytes));
    for (const std::string name : {"/l32.nii", "/l16.nii"}) {
      for (const VolumeLayout layout : {VolumeLayout::kContiguous, VolumeLayout::kFileOrderView}) {
        ReadOptions compact;
        compact.as_float = true;
        compact.uint8_if_it_fits = true;
        compact.layout = layout;
        const Volume got = read_volume(dir + name, compact);
        const Volume floats = read_volume_as_float(dir + name);
        const std::string what =
            name + (layout == VolumeLayout::kContiguous ? " C order" : " file order") +
            " outlier " + std::to_string(outlier);
        EXPECT_EQ(got.data.scalar_type(), outlier == 0 ? at::kByte : at::kFloat) << what;
        EXPECT_TRUE(at::equal(got.data.to(at::kFloat), floats.data)) << what;
        EXPECT_EQ(got.nonfinite_voxels, 0) << what;
      }
    }
  }
  // Float files and scaled integers keep their usual output.
  const std::string f = own_index_file<float>(dir + "/f.nii", {5, 4, 3}, NiftiDatatype::kFloat32);
  ReadOptions compact;
  compact.uint8_if_it_fits = true;
  EXPECT_EQ(read_volume(f, compact).data.scalar_type(), at::kFloat);
  const std::string u8 = own_index_file<uint8_t>(dir + "/u8.nii", {5, 4, 3}, NiftiDatatype::kUint8);
  compact.as_float = true;
  EXPECT_EQ(read_volume(u8, compact).data.scalar_type(), at::kByte);
}

TEST(ReadVolumeTest, FileOrderViewHasTheSameValuesWithoutTheTranspose) {
  const std::string dir = test_dir();
  const std::string path =
      own_index_file<float>(dir + "/v.nii.gz", {7, 6, 5, 3}, NiftiDatatype::kFloat32);
  const Volume a = read_volume(path);
  ReadOptions options;
  options.layout = VolumeLayout::kFileOrderView;
  const Volume b = read_volume(path, options);
  EXPECT_FALSE(b.data.is_contiguous());
  EXPECT_EQ(b.data.strides().vec(), (std::vector<int64_t>{7 * 6 * 5, 1, 7, 42}));
  EXPECT_TRUE(at::equal(a.data, b.data));
  options.as_float = false;
  const std::string path16 =
      own_index_file<int16_t>(dir + "/v16.nii", {7, 6, 5}, NiftiDatatype::kInt16);
  options.as_float = true;  // converting path
  EXPECT_TRUE(at::equal(read_volume(path16, options).data, read_volume_as_float(path16).data));
}

TEST(ReadVolumeTest, ParallelCopyGivesTheSameTensor) {
  const std::string dir = test_dir();
  const std::string path =
      own_index_file<int16_t>(dir + "/v.nii.gz", {40, 70, 33, 2}, NiftiDatatype::kInt16);
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  ReadOptions parallel;
  parallel.parallel = true;
  parallel.as_float = true;
  const Volume a = read_volume(path, parallel);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(a.data, read_volume_as_float(path).data));
}

TEST(ReadVolumeTest, CountsNanAndInfVoxelsWithoutFailing) {
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{2, 2, 2};
  std::vector<uint8_t> vox(32);
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  put_le<float>(vox, 0, nan);
  put_le<float>(vox, 4, inf);
  put_le<float>(vox, 8, -inf);
  put_le<float>(vox, 12, 1.0f);
  write_bytes(dir + "/nan.nii.gz", gzip(make_nifti(shape, NiftiDatatype::kFloat32, vox)));
  EXPECT_EQ(read_volume(dir + "/nan.nii.gz").nonfinite_voxels, 3);
  ReadOptions view;
  view.layout = VolumeLayout::kFileOrderView;
  EXPECT_EQ(read_volume(dir + "/nan.nii.gz", view).nonfinite_voxels, 3);
  view.count_nonfinite = false;  // the zero-copy read skips its counting pass
  const Volume uncounted = read_volume(dir + "/nan.nii.gz", view);
  EXPECT_EQ(uncounted.nonfinite_voxels, -1);
  EXPECT_TRUE(std::isnan(uncounted.data[0][0][0][0].item<float>()));
}

TEST(ReadVolumeTest, NoiseFreeAndNoisyGzipFilesReadAsTheirRawVoxels) {
  // The noise-free file inflates with ISA-L, the noisy one with libdeflate
  // (gzip_test.cpp pins the pick).
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{48, 40, 36};
  for (const bool noise_free : {true, false}) {
    std::vector<uint8_t> vox = noise_free ? sphere_voxels(shape) : noise_voxels(shape, 20);
    const std::string path = dir + (noise_free ? "/noise_free.nii.gz" : "/noisy.nii.gz");
    write_bytes(path, gzip(make_nifti(shape, NiftiDatatype::kFloat32, vox)));
    // File order is x fastest: (z, y, x) in C order, then nibabel's (1, x, y, z).
    const at::Tensor expected =
        at::from_blob(vox.data(), {shape[2], shape[1], shape[0]}, at::kFloat)
            .permute({2, 1, 0})
            .unsqueeze(0);
    EXPECT_TRUE(at::equal(read_volume(path).data, expected)) << path;
  }
}

TEST(ReadVolumeTest, BadFilesThrowNamingThePath) {
  const std::string dir = test_dir();
  try {
    read_volume(dir + "/nope.nii.gz");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir + "/nope.nii.gz"));
  }
  ReadOptions small;
  small.max_voxels = 100;
  const std::string big =
      own_index_file<uint8_t>(dir + "/big.nii", {10, 10, 10}, NiftiDatatype::kUint8);
  try {
    read_volume(big, small);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("max_voxels=100"));
    EXPECT_THAT(e.what(), HasSubstr(big));
  }
}

TEST(WriteVolumeTest, RoundTripsEveryDtypeShapeAndAffine) {
  const std::string dir = test_dir();
  const Affine affine{{{0, -2, 0, 10.25}, {1.5, 0, 0, -3}, {0, 0, 3, 7}, {0, 0, 0, 1}}};
  for (const auto dtype :
       {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kFloat, at::kDouble}) {
    for (const std::string suffix : {".nii", ".nii.gz"}) {
      for (const int version : {1, 2}) {
        const at::Tensor data = at::arange(3 * 17 * 5 * 4, at::TensorOptions().dtype(at::kLong))
                                    .reshape({3, 17, 5, 4})
                                    .to(dtype);
        const std::string path = dir + "/w" + std::to_string(version) + suffix;
        WriteOptions options;
        options.nifti_version = version;
        write_volume(path, data, affine, options);
        const Volume v = read_volume(path);
        EXPECT_EQ(v.data.scalar_type(), dtype);
        EXPECT_TRUE(at::equal(v.data, data)) << path << " " << c10::toString(dtype);
        EXPECT_EQ(v.affine, affine);
        EXPECT_EQ(v.header.version, version);
      }
    }
  }
}

TEST(WriteVolumeTest, OneChannelWritesAThreeDimensionalFile) {
  const std::string dir = test_dir();
  const at::Tensor data = at::rand({1, 4, 5, 6});
  write_volume(dir + "/one.nii.gz", data, identity_affine());
  const NiftiHeader h = read_nifti_header(dir + "/one.nii.gz");
  EXPECT_EQ(h.dim[0], 3);
  write_volume(dir + "/xyz.nii", data[0], identity_affine());
  EXPECT_TRUE(at::equal(read_volume(dir + "/xyz.nii").data, data));
}

TEST(WriteVolumeTest, RefusesUnsupportedDtypesAndShapes) {
  const std::string dir = test_dir();
  const Affine eye{{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}};
  try {
    write_volume(dir + "/b.nii", at::zeros({2, 2, 2}, at::TensorOptions().dtype(at::kBool)), eye);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("dtype Bool"));
    EXPECT_THAT(e.what(), HasSubstr(dir + "/b.nii"));
  }
  EXPECT_THROW(write_volume(dir + "/c.nii", at::zeros({2, 2}), eye), std::invalid_argument);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(WriteVolumeTest, DiskFullLeavesTheOldFileAndNoTemporary) {
  const std::string dir = test_dir();
  const Affine eye{{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}};
  const std::string path = dir + "/v.nii";
  write_volume(path, at::zeros({4, 4, 4}), eye);
  const auto before = read_bytes(path);
  // A file-size limit makes write() fail as a full disk would (EFBIG instead of ENOSPC).
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_volume(path, at::rand({64, 64, 64}), eye);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("write failed"));
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(LoadPairTest, IsTheTutorialsDeterministicPrefixInEitherImageLayout) {
  const std::string dir = test_dir();
  const at::Tensor image = at::randn({1, 9, 8, 7}) * 100;
  const at::Tensor label = (at::rand({1, 9, 8, 7}) > 0.6).to(at::kInt);
  write_volume(dir + "/img.nii.gz", image, identity_affine());
  write_volume(dir + "/seg.nii.gz", label, identity_affine());
  const ImageLabelPair pair{dir + "/img.nii.gz", dir + "/seg.nii.gz"};
  for (const VolumeLayout layout : {VolumeLayout::kFileOrderView, VolumeLayout::kContiguous}) {
    PairOptions o;
    o.image_layout = layout;
    const Sample s = load_pair(pair, 4, o);
    EXPECT_EQ(s.image.is_contiguous(), layout == VolumeLayout::kContiguous);
    EXPECT_TRUE(at::equal(s.image, scale_intensity(image)));
    EXPECT_TRUE(at::equal(s.label, label.to(at::kFloat)));
    ASSERT_TRUE(s.indices != nullptr);
    EXPECT_EQ(s.indices->foreground, label_indices(label.to(at::kFloat)).foreground);
    EXPECT_EQ(s.meta.index, 4);
    EXPECT_EQ(s.meta.source, pair.image);
  }
  PairOptions compact;
  compact.compact_label = true;
  const Sample c = load_pair(pair, 4, compact);
  EXPECT_EQ(c.label.scalar_type(), at::kByte);
  EXPECT_TRUE(at::equal(c.label, label.to(at::kByte)));
  EXPECT_EQ(c.indices->foreground, load_pair(pair, 4).indices->foreground);
  EXPECT_NE(compact.config_key(), PairOptions().config_key());
  PairOptions bare;
  bare.prefix.intensity = IntensityKind::kNone;
  bare.label_indices = false;
  EXPECT_NE(bare.config_key(), PairOptions().config_key());
  EXPECT_TRUE(at::equal(load_pair(pair, 0, bare).image, image));
  EXPECT_EQ(load_pair(pair, 0, bare).indices, nullptr);
}

TEST(LoadPairTest, NamesBothFilesWhenTheirSpatialShapesDiffer) {
  const std::string dir = test_dir();
  write_volume(dir + "/img.nii.gz", at::zeros({1, 9, 8, 7}), identity_affine());
  write_volume(dir + "/seg.nii.gz", at::zeros({1, 9, 8, 6}, at::kInt), identity_affine());
  try {
    load_pair({dir + "/img.nii.gz", dir + "/seg.nii.gz"}, 0);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("img.nii.gz has spatial shape 9x8x7 but label"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("seg.nii.gz has 9x8x6"));
  }
}

}  // namespace
}  // namespace volshard
