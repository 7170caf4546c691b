#include "volshard/volume_io/nifti_header.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <new>
#include <string>

#include "nifti_test_util.h"
#include "volshard/core/limits.h"
#include "volshard/volume_io/voxel_copy.h"

namespace volshard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace volshard::testing;

// Expects `fn` to throw E whose message contains every piece.
template <class E = std::runtime_error, class Fn>
void expect_error(Fn fn, const std::vector<std::string>& pieces) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one mentioning " << ::testing::PrintToString(pieces);
  } catch (const E& e) {
    for (const auto& p : pieces) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

TEST(NiftiHeaderTest, ParsesTheFieldsOfAWrittenNifti1Header) {
  const std::vector<int64_t> shape{3, 4, 5};
  const auto bytes = make_nifti(shape, NiftiDatatype::kInt16, own_index_voxels<int16_t>(shape));
  const NiftiHeader h =
      parse_nifti_header(bytes.data(), bytes.size(), "mem.nii", static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(h.version, 1);
  EXPECT_FALSE(h.big_endian);
  EXPECT_EQ(h.shape, shape);
  EXPECT_EQ(h.datatype, NiftiDatatype::kInt16);
  EXPECT_EQ(h.bitpix, 16);
  EXPECT_EQ(h.vox_offset, 352);
  EXPECT_EQ(h.num_voxels(), 60);
  EXPECT_EQ(h.data_bytes(), 120);
  EXPECT_FALSE(h.has_scaling());  // scl_slope = nan, as nibabel writes
  EXPECT_EQ(h.sform_code, 2);
  EXPECT_EQ(h.qform_code, 2);
  EXPECT_EQ(h.spacing_mm(), (std::array<double, 3>{2, 3, 4}));
  const Affine want{{{2, 0, 0, -10}, {0, 3, 0, 5}, {0, 0, 4, 7}, {0, 0, 0, 1}}};
  EXPECT_EQ(h.affine, want);
}

TEST(NiftiHeaderTest, ReadsNifti2AndBigEndianHeadersByTheirSizeofHdr) {
  const std::vector<int64_t> shape{2, 3, 4};
  auto v2 = make_nifti(shape, NiftiDatatype::kFloat64, own_index_voxels<double>(shape), 2);
  const NiftiHeader h2 = parse_nifti_header(v2.data(), v2.size(), "v2.nii");
  EXPECT_EQ(h2.version, 2);
  EXPECT_EQ(h2.header_size, 540);
  EXPECT_EQ(h2.vox_offset, 544);
  EXPECT_EQ(h2.shape, shape);

  // Byte-swap the int16 fields of a NIfTI-1 header we need: sizeof_hdr, dim, datatype, ...
  auto v1 = make_nifti(shape, NiftiDatatype::kUint8, own_index_voxels<uint8_t>(shape));
  auto swap = [&](size_t offset, size_t n) {
    std::reverse(v1.begin() + static_cast<long>(offset),
                 v1.begin() + static_cast<long>(offset + n));
  };
  swap(0, 4);
  for (size_t d = 0; d < 8; ++d) swap(40 + 2 * d, 2);
  swap(70, 2);
  swap(72, 2);
  for (size_t p = 0; p < 8; ++p) swap(76 + 4 * p, 4);
  swap(108, 4);
  swap(112, 4);
  swap(116, 4);
  swap(252, 2);
  swap(254, 2);
  for (size_t q = 0; q < 6; ++q) swap(256 + 4 * q, 4);
  for (size_t s = 0; s < 12; ++s) swap(280 + 4 * s, 4);
  const NiftiHeader be = parse_nifti_header(v1.data(), v1.size(), "be.nii");
  EXPECT_TRUE(be.big_endian);
  EXPECT_EQ(be.shape, shape);
  EXPECT_EQ(be.datatype, NiftiDatatype::kUint8);
  EXPECT_EQ(be.affine[1][1], 3);
}

TEST(NiftiHeaderTest, BaseAffineFlipsXAndCentresTheOriginAsNibabel) {
  NiftiHeader h;
  h.dim = {3, 3, 4, 5, 1, 1, 1, 1};
  h.pixdim = {1, 2, 3, 4, 1, 1, 1, 1};
  // nibabel: shape_zoom_affine((3,4,5), (2,3,4), x_flip=True)
  const Affine want{{{-2, 0, 0, 2}, {0, 3, 0, -4.5}, {0, 0, 4, -8}, {0, 0, 0, 1}}};
  EXPECT_EQ(nifti_base_affine(h), want);
  h.dim = {2, 6, 7, 1, 1, 1, 1, 1};  // 2D: missing dims count as size 1, zoom 1
  const Affine want2{{{-2, 0, 0, 5}, {0, 3, 0, -9}, {0, 0, 1, 0}, {0, 0, 0, 1}}};
  EXPECT_EQ(nifti_base_affine(h), want2);
}

TEST(NiftiHeaderTest, QformRotatesByTheQuaternionAndFlipsZByQfac) {
  NiftiHeader h;
  h.version = 1;
  h.quatern_b = 0;
  h.quatern_c = 0;
  h.quatern_d = static_cast<float>(std::sqrt(0.5));  // 90 degrees about z
  h.pixdim = {-1, 1.5, 2, 3, 1, 1, 1, 1};
  h.qoffset_x = 10;
  h.qoffset_y = -3;
  h.qoffset_z = 7;
  const Affine a = nifti_qform_affine(h);
  const double want[3][4] = {{0, -2, 0, 10}, {1.5, 0, 0, -3}, {0, 0, -3, 7}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(a[i][j], want[i][j], 1e-6) << i << "," << j;
}

TEST(NiftiHeaderTest, AppliesNibabelsLoadTimeFixesToPixdimAndCodes) {
  const std::vector<int64_t> shape{2, 2, 2};
  auto b = make_nifti(shape, NiftiDatatype::kUint8, own_index_voxels<uint8_t>(shape));
  put_le<float>(b, 76, 0.0f);   // qfac 0 -> 1
  put_le<float>(b, 80, 0.0f);   // pixdim[1] 0 -> 1
  put_le<float>(b, 84, -2.5f);  // pixdim[2] negative -> abs
  put_le<int16_t>(b, 252, 9);   // qform_code 9 -> 0
  put_le<int16_t>(b, 254, 0);   // no sform: base affine
  const NiftiHeader h = parse_nifti_header(b.data(), b.size(), "fix.nii");
  EXPECT_EQ(h.pixdim[0], 1);
  EXPECT_EQ(h.pixdim[1], 1);
  EXPECT_EQ(h.pixdim[2], 2.5);
  EXPECT_EQ(h.qform_code, 0);
  EXPECT_EQ(h.affine, nifti_base_affine(h));
}

TEST(NiftiHeaderTest, ScalingFollowsNibabelsSlopeRules) {
  NiftiHeader h;
  h.scl_slope = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(h.has_scaling());
  h.scl_slope = 0;
  h.scl_inter = 5;
  EXPECT_FALSE(h.has_scaling());
  h.scl_slope = 1;
  h.scl_inter = 0;
  EXPECT_FALSE(h.has_scaling());
  h.scl_inter = 5;
  EXPECT_TRUE(h.has_scaling());
  h.scl_slope = -0.5;
  h.scl_inter = 0;
  EXPECT_TRUE(h.has_scaling());
}

TEST(NiftiHeaderTest, AppliesNifti1FreesurferShapeHacks) {
  std::vector<uint8_t> b =
      make_nifti({7, 1, 1}, NiftiDatatype::kUint8, own_index_voxels<uint8_t>({7, 1, 1}));
  put_le<int16_t>(b, 42, -1);
  put_le<int32_t>(b, 144, 7);  // glmin holds the length
  const NiftiHeader h =
      parse_nifti_header(b.data(), b.size(), "fs.nii", static_cast<int64_t>(b.size()));
  EXPECT_EQ(h.shape, (std::vector<int64_t>{7, 1, 1}));
}

TEST(NiftiFileTest, ReadsTheVoxelBytesOfNiiAndNiiGzAlike) {
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{5, 3, 4, 2};
  const auto bytes = make_nifti(shape, NiftiDatatype::kInt32, own_index_voxels<int32_t>(shape));
  write_bytes(dir + "/a.nii", bytes);
  write_bytes(dir + "/b.nii.gz", gzip(bytes));
  for (const std::string name : {"/a.nii", "/b.nii.gz"}) {
    const NiftiFile f = read_nifti(dir + name);
    ASSERT_EQ(f.voxel_bytes(), 5u * 3 * 4 * 2 * 4);
    for (int64_t v = 0; v < 120; ++v) {
      int32_t got;
      std::memcpy(&got, f.voxels() + v * 4, 4);
      ASSERT_EQ(got, v) << name;
    }
    EXPECT_EQ(read_nifti_header(dir + name).shape, shape);
  }
}

TEST(NiftiFileTest, ReadsMultiMemberGzipAndTrailingBytesThroughTheFallback) {
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{9, 8, 7};
  const auto bytes = make_nifti(shape, NiftiDatatype::kFloat32, own_index_voxels<float>(shape));
  std::vector<uint8_t> first(bytes.begin(), bytes.begin() + 500),
      rest(bytes.begin() + 500, bytes.end());
  std::vector<uint8_t> multi = gzip(first);
  const auto tail = gzip(rest, 6);
  multi.insert(multi.end(), tail.begin(), tail.end());
  write_bytes(dir + "/multi.nii.gz", multi);
  std::vector<uint8_t> padded = bytes;
  padded.resize(bytes.size() + 1000, 0xAB);
  write_bytes(dir + "/padded.nii.gz", gzip(padded));
  for (const std::string name : {"/multi.nii.gz", "/padded.nii.gz"}) {
    const NiftiFile f = read_nifti(dir + name);
    ASSERT_EQ(f.voxel_bytes(), 9u * 8 * 7 * 4);
    EXPECT_EQ(std::memcmp(f.voxels(), bytes.data() + 352, f.voxel_bytes()), 0) << name;
  }
}

TEST(NiftiFileTest, NeverReadsASiblingNii) {
  const std::string dir = test_dir();
  const std::vector<int64_t> shape{2, 2, 2};
  write_bytes(dir + "/x.nii.gz",
              gzip(make_nifti(shape, NiftiDatatype::kUint8, own_index_voxels<uint8_t>(shape))));
  std::vector<uint8_t> other(8, 99);
  write_bytes(dir + "/x.nii", make_nifti(shape, NiftiDatatype::kUint8, other));
  const NiftiFile f = read_nifti(dir + "/x.nii.gz");
  for (int v = 0; v < 8; ++v) EXPECT_EQ(f.voxels()[v], v);
}

// ---- bad input: each a runtime_error naming the path and the field ----

class NiftiBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_dir();
    good_ = make_nifti(shape_, NiftiDatatype::kInt16, own_index_voxels<int16_t>(shape_));
  }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = dir_ + "/" + name;
    write_bytes(path, bytes);
    return path;
  }
  void expect_read_error(const std::string& path, const std::vector<std::string>& pieces,
                         const NiftiReadOptions& options = {}) {
    std::vector<std::string> all = pieces;
    all.push_back(path);
    expect_error([&] { read_nifti(path, options); }, all);
  }
  std::string dir_;
  std::vector<int64_t> shape_{4, 3, 2};
  std::vector<uint8_t> good_;
};

TEST_F(NiftiBadInputTest, NonexistentPathNamesThePath) {
  expect_read_error(dir_ + "/missing.nii.gz", {"cannot open", "No such file"});
  expect_error([&] { read_nifti_header(dir_ + "/missing.nii"); }, {"missing.nii", "cannot open"});
}

TEST_F(NiftiBadInputTest, DirectoryIsNotARegularFile) {
  expect_read_error(dir_, {"not a regular file"});
}

TEST_F(NiftiBadInputTest, TextFileIsNotANifti) {
  std::vector<uint8_t> text(400, 'a');
  expect_read_error(write("notes.nii", text), {"sizeof_hdr=", "not a NIfTI file"});
  expect_read_error(write("empty.nii", {}), {"too short"});
  expect_read_error(write("notes.nii.gz", gzip(text)), {"sizeof_hdr="});
}

TEST_F(NiftiBadInputTest, BadSizeofHdr) {
  auto b = good_;
  put_le<int32_t>(b, 0, 350);
  expect_read_error(write("size.nii", b), {"sizeof_hdr=350"});
}

TEST_F(NiftiBadInputTest, BadMagic) {
  auto b = good_;
  std::memcpy(b.data() + 344, "n+3", 4);
  expect_read_error(write("magic.nii", b), {"magic=\"n+3\""});
  std::memcpy(b.data() + 344, "ni1", 4);
  expect_read_error(write("pair.nii", b), {"magic=\"ni1\"", "pair"});
  auto v2 = make_nifti(shape_, NiftiDatatype::kInt16, own_index_voxels<int16_t>(shape_), 2);
  v2[9] = 13;  // eol_check corrupted (13,13,26,10)
  expect_read_error(write("eol.nii", v2), {"eol_check"});
}

TEST_F(NiftiBadInputTest, TruncatedNii) {
  std::vector<uint8_t> cut(good_.begin(), good_.end() - 5);
  expect_read_error(write("cut.nii", cut), {"truncated", "vox_offset=352"});
  std::vector<uint8_t> header_only(good_.begin(), good_.begin() + 200);
  expect_read_error(write("header.nii", header_only), {"truncated header", "348"});
}

TEST_F(NiftiBadInputTest, TruncatedAndCorruptNiiGz) {
  // Big enough that the cut lands in the data, not the header.
  const std::vector<int64_t> shape{40, 30, 20};
  const auto gz = gzip(make_nifti(shape, NiftiDatatype::kFloat32, own_index_voxels<float>(shape)));
  std::vector<uint8_t> cut(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
  expect_read_error(write("cut.nii.gz", cut), {"truncated"});
  std::vector<uint8_t> no_trailer(gz.begin(), gz.end() - 8);  // all data, no CRC/ISIZE
  expect_read_error(write("no_trailer.nii.gz", no_trailer), {"truncated gzip stream"});
  std::vector<uint8_t> corrupt = gz;
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 64; ++i) corrupt[i] ^= 0x5a;
  expect_read_error(write("corrupt.nii.gz", corrupt), {"corrupt gzip data"});
  std::vector<uint8_t> bad_crc = gz;
  bad_crc[gz.size() - 6] ^= 1;
  expect_read_error(write("crc.nii.gz", bad_crc), {"corrupt gzip data"});
  std::vector<uint8_t> tiny(gz.begin(), gz.begin() + 10);
  // A gzip header and nothing else is a cut stream like any other.
  expect_read_error(write("tiny.nii.gz", tiny), {"truncated gzip stream", "after 0 decompressed"});
}

TEST_F(NiftiBadInputTest, DimsBelowOneForUsedDims) {
  auto b = good_;
  put_le<int16_t>(b, 46, 0);  // dim[3]
  expect_read_error(write("dim3.nii.gz", gzip(b)), {"dim[3]=0 must be >= 1"});
  b = good_;
  put_le<int16_t>(b, 44, -5);  // dim[2]
  expect_read_error(write("dim2.nii", b), {"dim[2]=-5 must be >= 1"});
  b = good_;
  put_le<int16_t>(b, 40, 0);  // dim[0]
  expect_read_error(write("dim0.nii", b), {"dim[0]=0 must be in 1..7"});
  put_le<int16_t>(b, 40, 8);
  expect_read_error(write("dim0big.nii", b), {"dim[0]=8"});
  // dim[4] = 0 is fine when dim[0] = 3 (unused)
  b = good_;
  put_le<int16_t>(b, 48, 0);
  EXPECT_NO_THROW(read_nifti(write("unused.nii", b)));
}

TEST_F(NiftiBadInputTest, MoreThanFourNonTrivialDims) {
  const std::vector<int64_t> shape{2, 2, 2, 2, 3};
  const auto b = make_nifti(shape, NiftiDatatype::kUint8, own_index_voxels<uint8_t>(shape));
  expect_read_error(write("5d.nii", b), {"dim[5]=3", "at most 4 dimensions"});
}

TEST_F(NiftiBadInputTest, VoxelCountOverflowAndLimit) {
  auto v2 = make_nifti(shape_, NiftiDatatype::kInt16, own_index_voxels<int16_t>(shape_), 2);
  put_le<int64_t>(v2, 16 + 8, int64_t{1} << 40);
  put_le<int64_t>(v2, 16 + 16, int64_t{1} << 40);
  expect_read_error(write("overflow.nii", v2), {"dim[1..3]", "overflows"});
  NiftiReadOptions small;
  small.max_voxels = 10;
  expect_read_error(write("limit.nii", good_), {"24 voxels exceed max_voxels=10"}, small);
  // The default limit: 2^16 x 2^16 x 2^2 = 2^34 voxels > 4 * 2^30.
  put_le<int64_t>(v2, 16 + 8, int64_t{1} << 16);
  put_le<int64_t>(v2, 16 + 16, int64_t{1} << 16);
  put_le<int64_t>(v2, 16 + 24, int64_t{4});
  expect_read_error(write("default_limit.nii.gz", gzip(v2)), {"exceed max_voxels=4294967296"});
}

TEST_F(NiftiBadInputTest, VoxOffsetBeyondTheFileOrInsideTheHeader) {
  auto b = good_;
  put_le<float>(b, 108, 1e6f);
  expect_read_error(write("far.nii", b), {"vox_offset=1000000 is beyond the end of the file"});
  expect_read_error(write("far.nii.gz", gzip(b)), {"holds 400 bytes", "needs 1000048 (vox_offset"});
  put_le<float>(b, 108, 100.0f);
  expect_read_error(write("low.nii", b), {"vox_offset=100 must be >= 352"});
  put_le<float>(b, 108, std::numeric_limits<float>::quiet_NaN());
  expect_read_error(write("nan.nii", b), {"vox_offset=nan"});
}

TEST_F(NiftiBadInputTest, UnsupportedDatatype) {
  auto b = good_;
  put_le<int16_t>(b, 70, 32);
  expect_read_error(write("complex.nii", b), {"datatype=32 (complex64) is not supported"});
  put_le<int16_t>(b, 70, 5);
  expect_read_error(write("five.nii.gz", gzip(b)), {"datatype=5"});
}

TEST_F(NiftiBadInputTest, NonFiniteInterceptWithAValidSlope) {
  auto b = good_;
  put_le<float>(b, 112, 2.0f);
  put_le<float>(b, 116, std::numeric_limits<float>::infinity());
  expect_read_error(write("inter.nii", b), {"scl_inter=inf must be finite"});
}

TEST_F(NiftiBadInputTest, GzipThatCannotHoldWhatTheHeaderPromises) {
  auto b = good_;
  put_le<int16_t>(b, 42, 2000);
  put_le<int16_t>(b, 44, 2000);
  put_le<int16_t>(b, 46, 1000);
  expect_read_error(write("bomb.nii.gz", gzip(std::vector<uint8_t>(b.begin(), b.begin() + 352))),
                    {"holds 352 bytes", "needs 8000000352"});
}

TEST_F(NiftiBadInputTest, QformWithANonUnitQuaternionWhenItIsUsed) {
  auto b = good_;
  put_le<int16_t>(b, 254, 0);  // no sform: qform is used
  put_le<float>(b, 256, 0.9f);
  put_le<float>(b, 260, 0.9f);
  expect_read_error(write("quat.nii", b), {"quatern_b,c,d", "not a unit quaternion"});
}

// ---- voxel_copy: file order <-> C order ----

TEST(VoxelCopyTest, TransposesFileOrderToChannelFirstCOrder) {
  for (const auto& shape : std::vector<std::vector<int64_t>>{
           {3, 4, 5, 2}, {17, 5, 33, 1}, {16, 16, 16, 3}, {1, 1, 1, 1}, {40, 1, 19, 2}}) {
    const int64_t X = shape[0], Y = shape[1], Z = shape[2], C = shape[3];
    const auto src = own_index_voxels<int32_t>(shape);
    VoxelCopySpec spec;
    spec.cxyz = {C, X, Y, Z};
    spec.src_type = NiftiDatatype::kInt32;
    spec.dst_type = NiftiDatatype::kFloat64;
    std::vector<double> dst(static_cast<size_t>(C * X * Y * Z), -1);
    EXPECT_EQ(copy_voxels(src.data(), dst.data(), spec, 0, Y), 0);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < X; ++i)
        for (int64_t j = 0; j < Y; ++j)
          for (int64_t k = 0; k < Z; ++k)
            ASSERT_EQ(dst[static_cast<size_t>(((c * X + i) * Y + j) * Z + k)],
                      file_index(shape, i, j, k, c));
    // and back
    std::vector<double> back(dst.size());
    c_order_to_file_order(dst.data(), reinterpret_cast<uint8_t*>(back.data()),
                          NiftiDatatype::kFloat64, spec.cxyz, 0, Y);
    for (size_t v = 0; v < back.size(); ++v) ASSERT_EQ(back[v], static_cast<double>(v));
  }
}

TEST(VoxelCopyTest, LongThinVolumesAreTransposedWithoutAHugeScratch) {
  // 600,000 k-slices of 2 x 1 voxels: a padded scratch would need 128 bytes per slice.
  const std::vector<int64_t> shape{2, 1, 600000};
  const auto src = own_index_voxels<float>(shape);
  VoxelCopySpec spec;
  spec.cxyz = {1, 2, 1, 600000};
  std::vector<float> dst(1200000);
  EXPECT_EQ(copy_voxels(src.data(), dst.data(), spec, 0, 1), 0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 600000; k += 997)
      ASSERT_EQ(dst[static_cast<size_t>(i * 600000 + k)],
                static_cast<float>(file_index(shape, i, 0, k)));
}

TEST(VoxelCopyTest, RowRangesComposeToTheWhole) {
  const std::vector<int64_t> shape{7, 9, 5, 2};
  const auto src = own_index_voxels<float>(shape);
  VoxelCopySpec spec;
  spec.cxyz = {2, 7, 9, 5};
  std::vector<float> whole(630), parts(630);
  copy_voxels(src.data(), whole.data(), spec, 0, 9);
  copy_voxels(src.data(), parts.data(), spec, 0, 4);
  copy_voxels(src.data(), parts.data(), spec, 4, 9);
  EXPECT_EQ(whole, parts);
}

TEST(VoxelCopyTest, SwapsBigEndianAndScalesAsNibabel) {
  // int16 big-endian values 0, 1, -2 ; slope -0.5, inter 0 -> -0.0, -0.5, 1.0
  const std::vector<uint8_t> src{0x00, 0x00, 0x00, 0x01, 0xff, 0xfe};
  VoxelCopySpec spec;
  spec.cxyz = {1, 3, 1, 1};
  spec.src_type = NiftiDatatype::kInt16;
  spec.src_big_endian = true;
  spec.dst_type = NiftiDatatype::kFloat64;
  spec.scale = true;
  spec.slope = -0.5;
  spec.inter = 0;
  std::vector<double> dst(3);
  copy_voxels(src.data(), dst.data(), spec, 0, 1);
  EXPECT_EQ(dst, (std::vector<double>{0.0, -0.5, 1.0}));
  EXPECT_TRUE(std::signbit(dst[0]));  // numpy: 0 * -0.5 = -0.0, no intercept added
  spec.inter = 1;
  copy_voxels(src.data(), dst.data(), spec, 0, 1);
  EXPECT_EQ(dst, (std::vector<double>{1.0, 0.5, 2.0}));
}

TEST(VoxelCopyTest, CountsNonFiniteOutputs) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values{1, nan, inf, -inf, 2, 3};
  std::vector<uint8_t> src(values.size() * 4);
  std::memcpy(src.data(), values.data(), src.size());
  VoxelCopySpec spec;
  spec.cxyz = {1, 2, 3, 1};
  std::vector<float> dst(6);
  EXPECT_EQ(copy_voxels(src.data(), dst.data(), spec, 0, 3), 3);
  spec.to_c_order = false;
  EXPECT_EQ(copy_voxels(src.data(), dst.data(), spec, 0, 3), 3);
}

TEST(VoxelCopyTest, RefusesNarrowingOrScaledIntegerOutputs) {
  VoxelCopySpec spec;
  spec.src_type = NiftiDatatype::kUint16;
  spec.dst_type = NiftiDatatype::kInt16;
  uint8_t src[2] = {0, 0};
  int16_t dst[1];
  expect_error<std::invalid_argument>([&] { copy_voxels(src, dst, spec, 0, 1); },
                                      {"uint16 -> int16"});
  spec.dst_type = NiftiDatatype::kInt32;
  spec.scale = true;
  expect_error<std::invalid_argument>([&] { copy_voxels(src, dst, spec, 0, 1); }, {"scaling"});
}

// ---- writing ----

// A .nii.gz whose header asks for more than the process can allocate (a
// 4 MB file of a 2000 x 1000 x 1000 int16 volume, under an address-space
// limit 1 GB above what the process maps) is refused naming the file, the
// header's volume and the size asked; it was a bare "std::bad_alloc".
TEST(NiftiReadTest, AVolumeTooLargeToAllocateIsNamedWithItsFileAndSize) {
  const std::string dir = test_dir();
  const std::string path = dir + "/big.nii.gz";
  write_huge_nifti_gz(path);
  const std::string text = out_of_memory_in_child(dir, [&] { (void)read_nifti(path); });
  EXPECT_THAT(text,
              AllOf(HasSubstr(path + ": its header gives 2000 x 1000 x 1000 int16 voxels (4.0 GB): "
                                     "could not allocate 4.0 GB (4000000352 bytes)"),
                    HasSubstr("(ulimit -v)")));
}

TEST(NiftiWriteTest, WritesAtomicallyAndReadsBack) {
  const std::string dir = test_dir();
  NiftiWriteSpec spec;
  spec.shape = {3, 4, 5};
  spec.datatype = NiftiDatatype::kUint16;
  spec.affine = {{{0, -2, 0, 10}, {1.5, 0, 0, -3}, {0, 0, 3, 7}, {0, 0, 0, 1}}};
  const auto voxels = own_index_voxels<uint16_t>(spec.shape);
  for (const std::string name : {"/w.nii", "/w.nii.gz"}) {
    write_nifti(dir + name, spec, voxels.data(), voxels.size());
    const NiftiFile f = read_nifti(dir + name);
    EXPECT_EQ(f.header.shape, spec.shape);
    EXPECT_EQ(f.header.qform_code, 2);
    EXPECT_EQ(std::memcmp(f.voxels(), voxels.data(), voxels.size()), 0);
    const Affine q = nifti_qform_affine(f.header);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) EXPECT_NEAR(q[i][j], spec.affine[i][j], 1e-5);
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            2);
}

TEST(NiftiWriteTest, ShearLeavesTheQformUnknown) {
  NiftiWriteSpec spec;
  spec.shape = {2, 2, 2};
  spec.affine = {{{1, 0.5, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}};
  const auto h = encode_nifti_header(spec);
  const NiftiHeader parsed = parse_nifti_header(h.data(), h.size(), "shear");
  EXPECT_EQ(parsed.qform_code, 0);
  EXPECT_EQ(parsed.sform_code, 2);
  EXPECT_EQ(parsed.affine, spec.affine);
}

TEST(NiftiWriteTest, StoresScalingAndFourDimensionsAsDecathlonFilesHaveThem) {
  // CT stores HU + 1024 in int16 with scl_inter = -1024; BraTS stacks the
  // modalities as a 4th dimension (dim[0] = 4).
  NiftiWriteSpec spec;
  spec.shape = {3, 4, 5, 2};
  spec.datatype = NiftiDatatype::kInt16;
  spec.affine = {{{-0.75, 0, 0, 10}, {0, -0.75, 0, 20}, {0, 0, 5, -30}, {0, 0, 0, 1}}};
  spec.scl_slope = 1;
  spec.scl_inter = -1024;
  for (const int version : {1, 2}) {
    spec.version = version;
    const auto bytes = encode_nifti_header(spec);
    const NiftiHeader h = parse_nifti_header(bytes.data(), bytes.size(), "scaled");
    EXPECT_EQ(h.dim[0], 4);
    EXPECT_EQ(h.shape, spec.shape);
    EXPECT_EQ(h.scl_slope, 1);
    EXPECT_EQ(h.scl_inter, -1024);
    EXPECT_TRUE(h.has_scaling());
    EXPECT_EQ(h.spacing_mm(), (std::array<double, 3>{0.75, 0.75, 5}));
    EXPECT_EQ(h.pixdim[4], 1);
    EXPECT_EQ(h.affine, spec.affine);
  }
  // The default stays nibabel's "no scaling".
  NiftiWriteSpec plain_spec;
  plain_spec.shape = {2, 2, 2};
  const auto plain = encode_nifti_header(plain_spec);
  const NiftiHeader h = parse_nifti_header(plain.data(), plain.size(), "plain");
  EXPECT_TRUE(std::isnan(h.scl_slope));
  EXPECT_FALSE(h.has_scaling());
}

TEST(NiftiWriteTest, RefusesASlopeWithoutAFiniteIntercept) {
  NiftiWriteSpec spec;
  spec.shape = {2, 2, 2};
  spec.scl_slope = 2;
  expect_error<std::invalid_argument>([&] { encode_nifti_header(spec); },
                                      {"scl_inter=nan", "scl_slope=2"});
}

TEST(NiftiWriteTest, FailedWriteNamesThePathAndLeavesNothing) {
  const std::string dir = test_dir();
  NiftiWriteSpec spec;
  spec.shape = {2, 2, 2};
  spec.datatype = NiftiDatatype::kUint8;
  const auto voxels = own_index_voxels<uint8_t>(spec.shape);
  const std::string path = dir + "/no/such/dir/x.nii";
  expect_error([&] { write_nifti(path, spec, voxels.data(), voxels.size()); },
               {path, "temporary file"});
  expect_error<std::invalid_argument>([&] { write_nifti(dir + "/x.nii", spec, voxels.data(), 3); },
                                      {"x.nii", "3 voxel bytes given"});
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

}  // namespace
}  // namespace volshard
