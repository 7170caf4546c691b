#include "volshard/datasets/content_hash.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "volume_io/nifti_test_util.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;
using namespace volshard::testing;

// xxHash's own sanity buffer (xxhsum's BMK_sanityCheck): 101 bytes from a
// squaring 32-bit generator.
std::vector<uint8_t> sanity_buffer() {
  std::vector<uint8_t> b(101);
  uint32_t gen = 2654435761U;
  for (auto& byte : b) {
    byte = static_cast<uint8_t>(gen >> 24);
    gen *= gen;
  }
  return b;
}

TEST(Xxh64Test, MatchesXxhashReferenceVectors) {
  EXPECT_EQ(xxh64(nullptr, 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(xxh64(nullptr, 0, 1), 0xD5AFBA1336A3BE4BULL);
  EXPECT_EQ(xxh64("a", 1), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ULL);
  const char* text = "Nobody inspects the spammish repetition";
  EXPECT_EQ(xxh64(text, std::strlen(text)), 0xFBCEA83C8A378BF1ULL);
  const auto b = sanity_buffer();
  const uint64_t prime = 2654435761U;
  EXPECT_EQ(xxh64(b.data(), 1), 0x4FCE394CC88952D8ULL);
  EXPECT_EQ(xxh64(b.data(), 1, prime), 0x739840CB819FA723ULL);
  EXPECT_EQ(xxh64(b.data(), 14), 0xCFFA8DB881BC3A3DULL);
  EXPECT_EQ(xxh64(b.data(), 14, prime), 0x5B9611585EFCC9CBULL);
  EXPECT_EQ(xxh64(b.data(), 101), 0x0EAB543384F878ADULL);
  EXPECT_EQ(xxh64(b.data(), 101, prime), 0xCAA65939306F1E21ULL);
}

TEST(Xxh64Test, GivesTheSameDigestForAnySplitIntoUpdates) {
  std::vector<uint8_t> data(1000);
  for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(k * 131 + 7);
  const uint64_t whole = xxh64(data.data(), data.size(), 42);
  for (const size_t step : {1, 3, 8, 31, 32, 33, 100, 999}) {
    Xxh64 h(42);
    for (size_t at = 0; at < data.size(); at += step)
      h.update(data.data() + at, std::min(step, data.size() - at));
    EXPECT_EQ(h.digest(), whole) << "step " << step;
  }
}

TEST(DigestFileTest, HashesAFileAsItsBytes) {
  const std::string dir = test_dir();
  std::vector<uint8_t> bytes(7u << 20);  // a 128^3 float32 .nii.gz of noise is ~7.5 MB
  for (size_t k = 0; k < bytes.size(); ++k)
    bytes[k] = static_cast<uint8_t>((k * 2654435761u) >> 13);
  write_bytes(dir + "/f.bin", bytes);
  const FileDigest d = digest_file(dir + "/f.bin");
  EXPECT_EQ(d.size_bytes, bytes.size());
  EXPECT_EQ(d.xxh64, xxh64(bytes.data(), bytes.size()));
  write_bytes(dir + "/empty.bin", {});
  EXPECT_EQ(digest_file(dir + "/empty.bin").xxh64, 0xEF46DB3751D8E999ULL);
}

TEST(DigestFileTest, NamesAFileItCannotRead) {
  const std::string dir = test_dir();
  try {
    (void)digest_file(dir + "/missing.nii.gz");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir + "/missing.nii.gz: cannot open"));
  }
  EXPECT_THROW((void)digest_file(dir), std::runtime_error);  // a folder
}

}  // namespace
}  // namespace volshard
