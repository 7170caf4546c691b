#include "io/gzip.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "nifti_test_util.h"

namespace volshard {
namespace {

using detail::Inflater;
using ::testing::HasSubstr;
using namespace volshard::testing;

const std::vector<int64_t> kShape{48, 40, 36};

std::vector<uint8_t> noise_free_nifti() {
  return make_nifti(kShape, NiftiDatatype::kFloat32, sphere_voxels(kShape));
}

std::vector<uint8_t> noisy_nifti() {
  return make_nifti(kShape, NiftiDatatype::kFloat32, noise_voxels(kShape, 20));
}

uint64_t trailer_isize(const std::vector<uint8_t>& gz) {
  const uint8_t* t = gz.data() + gz.size() - 4;
  return uint64_t{t[0]} | uint64_t{t[1]} << 8 | uint64_t{t[2]} << 16 | uint64_t{t[3]} << 24;
}

Inflater picked(const std::vector<uint8_t>& gz) {
  return detail::pick_inflater(trailer_isize(gz), gz.size());
}

// gzip with a file name in its header, as Python's gzip module (nibabel) writes.
std::vector<uint8_t> gzip_with_name(const std::vector<uint8_t>& bytes, const char* name) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  gz_header header{};
  header.name = reinterpret_cast<Bytef*>(const_cast<char*>(name));
  header.os = 3;
  EXPECT_EQ(deflateSetHeader(&z, &header), Z_OK);
  std::vector<uint8_t> out(deflateBound(&z, static_cast<uLong>(bytes.size())) + 64);
  z.next_in = const_cast<Bytef*>(bytes.data());
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// gunzip_sized's message for `gz` (picked, or `first` forced); "" if it reads.
std::string gunzip_error(const std::vector<uint8_t>& gz, uint64_t needed, const std::string& path,
                         const Inflater* first = nullptr) {
  try {
    if (first) {
      detail::gunzip_sized(gz.data(), gz.size(), needed, path, *first);
    } else {
      detail::gunzip_sized(gz.data(), gz.size(), needed, path);
    }
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(PickInflaterTest, IsalFromThreeTimesTheCompressedSizeUpTo100) {
  static_assert(detail::kIsalMinRatio == 3 && detail::kIsalMaxRatio == 100);
  EXPECT_EQ(detail::pick_inflater(9999, 100), Inflater::kIsal);
  EXPECT_EQ(detail::pick_inflater(10000, 100), Inflater::kLibdeflate);
  EXPECT_EQ(detail::pick_inflater(8388960, 72482), Inflater::kLibdeflate);  // synth's spheres
  EXPECT_EQ(detail::pick_inflater(8388960, 104397), Inflater::kIsal);       // nibabel's
  EXPECT_EQ(detail::pick_inflater(300, 100), Inflater::kIsal);
  EXPECT_EQ(detail::pick_inflater(299, 100), Inflater::kLibdeflate);
  EXPECT_EQ(detail::pick_inflater(3 * 7919, 7919), Inflater::kIsal);
  EXPECT_EQ(detail::pick_inflater(3 * 7919 - 1, 7919), Inflater::kLibdeflate);
  EXPECT_EQ(detail::pick_inflater(8388960, 96000), Inflater::kIsal);          // noise-free 128^3
  EXPECT_EQ(detail::pick_inflater(8388960, 7570000), Inflater::kLibdeflate);  // noisy 128^3
  // Past 4 GiB the header widens ISIZE, so the ratio is still the file's.
  EXPECT_EQ(detail::pick_inflater(uint64_t{9} << 32, size_t{3} << 32), Inflater::kIsal);
  EXPECT_EQ(detail::pick_inflater((uint64_t{9} << 32) - 1, size_t{3} << 32), Inflater::kLibdeflate);
  EXPECT_EQ(detail::pick_inflater(0, 0), Inflater::kLibdeflate);
}

TEST(GunzipSizedTest, EveryInflaterGivesTheRawBytesOfNoiseFreeAndNoisyVolumes) {
  const std::string dir = test_dir();
  for (const bool noise_free : {true, false}) {
    const std::vector<uint8_t> raw = noise_free ? noise_free_nifti() : noisy_nifti();
    const std::vector<uint8_t> gz = gzip(raw);
    const std::string path = dir + (noise_free ? "/noise_free.nii.gz" : "/noisy.nii.gz");
    EXPECT_EQ(picked(gz), noise_free ? Inflater::kIsal : Inflater::kLibdeflate) << path;
    for (const Inflater first : {Inflater::kIsal, Inflater::kLibdeflate, Inflater::kZlib}) {
      Inflater used = first == Inflater::kZlib ? Inflater::kIsal : Inflater::kZlib;
      const ByteBuffer out =
          detail::gunzip_sized(gz.data(), gz.size(), raw.size(), path, first, &used);
      EXPECT_EQ(used, first) << path;
      ASSERT_EQ(out.size, raw.size()) << path;
      EXPECT_EQ(std::memcmp(out.data.get(), raw.data(), raw.size()), 0) << path;
    }
    write_bytes(path, gz);
    const NiftiFile f = read_nifti(path);
    ASSERT_EQ(f.voxel_bytes(), raw.size() - 352);
    EXPECT_EQ(std::memcmp(f.voxels(), raw.data() + 352, f.voxel_bytes()), 0) << path;
  }
}

TEST(GunzipSizedTest, IsalSkipsAFileNameInTheGzipHeaderAsNibabelWritesIt) {
  const std::vector<uint8_t> raw = noise_free_nifti();
  const std::vector<uint8_t> gz = gzip_with_name(raw, "noise_free.nii");
  ASSERT_EQ(gz[3] & 0x08, 0x08);  // FNAME
  ASSERT_EQ(picked(gz), Inflater::kIsal);
  Inflater used = Inflater::kZlib;
  const ByteBuffer out = detail::gunzip_sized(gz.data(), gz.size(), raw.size(), "named.nii.gz",
                                              Inflater::kIsal, &used);
  EXPECT_EQ(used, Inflater::kIsal);
  ASSERT_EQ(out.size, raw.size());
  EXPECT_EQ(std::memcmp(out.data.get(), raw.data(), raw.size()), 0);
}

TEST(GunzipSizedTest, IsalTakesOneMemberFilesOnlyAndLeavesASecondMemberToLibdeflate) {
  // Two copies: the trailer's ISIZE agrees with the header, and the first
  // member alone holds the whole file, as libdeflate reads it today.
  const std::vector<uint8_t> raw = noise_free_nifti();
  std::vector<uint8_t> gz = gzip(raw);
  const std::vector<uint8_t> second = gzip(raw, 6);
  gz.insert(gz.end(), second.begin(), second.end());
  ASSERT_EQ(picked(gz), Inflater::kIsal);
  Inflater used = Inflater::kZlib;
  const ByteBuffer out =
      detail::gunzip_sized(gz.data(), gz.size(), raw.size(), "two.nii.gz", Inflater::kIsal, &used);
  EXPECT_EQ(used, Inflater::kLibdeflate);
  ASSERT_GE(out.size, raw.size());
  EXPECT_EQ(std::memcmp(out.data.get(), raw.data(), raw.size()), 0);
}

TEST(GunzipSizedTest, CorruptAndCutNoiseFreeFilesFailAsTheyDidBeforeIsal) {
  // Each keeps the trailer, so ISIZE agrees with the header and ISA-L may
  // take it (forced here, picked where the ratio says so); ISA-L refuses
  // them and libdeflate and zlib word the error as before.
  const std::string dir = test_dir();
  const std::vector<uint8_t> raw = noise_free_nifti();
  const std::vector<uint8_t> gz = gzip(raw);
  std::vector<uint8_t> flipped = gz;
  flipped[gz.size() / 2] ^= 0xff;
  std::vector<uint8_t> cut(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
  cut.insert(cut.end(), gz.end() - 8, gz.end());
  std::vector<uint8_t> bad_crc = gz;
  bad_crc[gz.size() - 6] ^= 1;
  std::vector<uint8_t> no_crc(gz.begin(), gz.end() - 8);  // the CRC cut out: ISIZE is read as one
  no_crc.insert(no_crc.end(), gz.end() - 4, gz.end());
  const Inflater libdeflate = Inflater::kLibdeflate, isal = Inflater::kIsal;
  for (const auto& [name, bytes, words] :
       {std::tuple{"flipped.nii.gz", flipped, "corrupt gzip data"},
        std::tuple{"cut.nii.gz", cut, "truncated"},
        std::tuple{"crc.nii.gz", bad_crc, "corrupt gzip data"},
        std::tuple{"no_crc.nii.gz", no_crc, "corrupt gzip data"}}) {
    const std::string path = dir + "/" + name;
    // What the file said before ISA-L: libdeflate first, then zlib.
    const std::string before = gunzip_error(bytes, raw.size(), path, &libdeflate);
    EXPECT_THAT(before, HasSubstr(words));
    EXPECT_THAT(before, HasSubstr(path));
    EXPECT_EQ(gunzip_error(bytes, raw.size(), path, &isal), before) << name;
    EXPECT_EQ(gunzip_error(bytes, raw.size(), path), before) << name;
    write_bytes(path, bytes);
    try {
      read_nifti(path);
      ADD_FAILURE() << name << " read";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), before);
    }
  }
}

}  // namespace
}  // namespace volshard
