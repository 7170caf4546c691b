// MONAI's create_test_image_3d, bit-exact: goldens made by numpy with
// oracle/make_synthetic_golden.py (MONAI 1.4's algorithm on np.random.RandomState).
#include "volshard/volume_io/synthetic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace volshard {
namespace {

using ::testing::HasSubstr;

// SHA-256 (FIPS 180-4) of a byte range, lower-case hex: the golden pins
// volumes by the hash of their little-endian bytes.
std::string sha256_hex(const void* data, size_t size) {
  static constexpr uint32_t kK[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
      0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
      0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
      0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
      0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
      0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
      0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
      0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  uint32_t hs[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  auto block = [&](const unsigned char* p) {
    uint32_t w[64];
    for (int t = 0; t < 16; ++t) {
      w[t] = uint32_t{p[4 * t]} << 24 | uint32_t{p[4 * t + 1]} << 16 | uint32_t{p[4 * t + 2]} << 8 |
             p[4 * t + 3];
    }
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = hs[0], b = hs[1], c = hs[2], d = hs[3], e = hs[4], f = hs[5], g = hs[6], h = hs[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t t1 =
          h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[t] + w[t];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    hs[0] += a, hs[1] += b, hs[2] += c, hs[3] += d, hs[4] += e, hs[5] += f, hs[6] += g, hs[7] += h;
  };
  const auto* bytes = static_cast<const unsigned char*>(data);
  size_t full = size / 64 * 64;
  for (size_t off = 0; off < full; off += 64) block(bytes + off);
  unsigned char tail[128] = {};
  const size_t rest = size - full;
  if (rest > 0) std::memcpy(tail, bytes + full, rest);
  tail[rest] = 0x80;
  const size_t tail_size = rest + 9 <= 64 ? 64 : 128;
  const uint64_t bits = static_cast<uint64_t>(size) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_size - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  for (size_t off = 0; off < tail_size; off += 64) block(tail + off);
  std::string hex;
  char buf[9];
  for (uint32_t v : hs) {
    std::snprintf(buf, sizeof buf, "%08x", v);
    hex += buf;
  }
  return hex;
}

// Little-endian host assumed (x86-64, aarch64): the bytes are numpy's '<f4'/'<i4'.
std::string image_sha256(const SyntheticVolume& v) {
  return sha256_hex(v.image.data(), v.image.size() * 4);
}
std::string label_sha256(const SyntheticVolume& v) {
  return sha256_hex(v.label.data(), v.label.size() * 4);
}

const nlohmann::json& golden() {
  static const nlohmann::json g = [] {
    const std::string path = std::string(VOLSHARD_DATASETS_ORACLE_DIR) + "/synthetic_golden.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
  }();
  return g;
}

const nlohmann::json& golden_case(const std::string& name) {
  for (const auto& c : golden().at("cases")) {
    if (c.at("name") == name) return c;
  }
  throw std::out_of_range("no golden case " + name);
}

SyntheticOptions options_of(const nlohmann::json& p) {
  SyntheticOptions o;
  o.height = p.at("height").get<int64_t>();
  o.width = p.at("width").get<int64_t>();
  o.depth = p.at("depth").get<int64_t>();
  o.num_objs = p.at("num_objs").get<int>();
  o.rad_max = p.at("rad_max").get<int>();
  o.rad_min = p.at("rad_min").get<int>();
  o.noise_max = p.at("noise_max").get<double>();
  o.num_seg_classes = p.at("num_seg_classes").get<int>();
  return o;
}

SyntheticOptions tutorial_options() {
  SyntheticOptions o;  // 128^3, 12 objects, rad 5..30, no noise
  o.num_seg_classes = 1;
  return o;
}

size_t offset(const SyntheticVolume& v, int64_t i, int64_t j, int64_t k) {
  return static_cast<size_t>((i * v.shape[1] + j) * v.shape[2] + k);
}

int64_t foreground(const SyntheticVolume& v) {
  int64_t n = 0;
  for (int32_t l : v.label) n += l > 0;
  return n;
}

// Everything the golden says about one volume.
void expect_matches(const SyntheticVolume& v, const nlohmann::json& c) {
  SCOPED_TRACE(c.at("name").get<std::string>());
  ASSERT_EQ(v.shape[0], c.at("shape")[0].get<int64_t>());
  ASSERT_EQ(v.shape[1], c.at("shape")[1].get<int64_t>());
  ASSERT_EQ(v.shape[2], c.at("shape")[2].get<int64_t>());
  ASSERT_EQ(v.spheres.size(), c.at("objects").size());
  for (size_t s = 0; s < v.spheres.size(); ++s) {
    const auto& o = c.at("objects")[s];
    EXPECT_EQ(v.spheres[s].x, o[0].get<int64_t>()) << "sphere " << s;
    EXPECT_EQ(v.spheres[s].y, o[1].get<int64_t>()) << "sphere " << s;
    EXPECT_EQ(v.spheres[s].z, o[2].get<int64_t>()) << "sphere " << s;
    EXPECT_EQ(v.spheres[s].radius, o[3].get<int64_t>()) << "sphere " << s;
    EXPECT_EQ(v.spheres[s].value, o[4].get<double>()) << "sphere " << s;
  }
  for (const auto& p : c.at("voxels")) {
    const size_t at = offset(v, p[0].get<int64_t>(), p[1].get<int64_t>(), p[2].get<int64_t>());
    EXPECT_EQ(v.image[at], p[3].get<double>()) << "voxel " << p.dump();
    EXPECT_EQ(v.label[at], p[4].get<int32_t>()) << "voxel " << p.dump();
  }
  EXPECT_EQ(foreground(v), c.at("foreground").get<int64_t>());
  EXPECT_EQ(std::set<float>(v.image.begin(), v.image.end()).size(),
            c.at("image_distinct").get<size_t>());
  EXPECT_EQ(image_sha256(v), c.at("image_sha256").get<std::string>());
  EXPECT_EQ(label_sha256(v), c.at("label_sha256").get<std::string>());
}

TEST(SyntheticTest, Sha256OfKnownInputs) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string a55(55, 'a'), a64(64, 'a');  // padding fits / spills into a second block
  EXPECT_EQ(sha256_hex(a55.data(), a55.size()),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(a64.data(), a64.size()),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(SyntheticTest, RandomStateDrawsEqualNumpys) {
  const auto& p = golden().at("primitives");
  NumpyRandomState rs(p.at("seed").get<uint32_t>());
  for (const auto& r : p.at("randint")) {
    EXPECT_EQ(rs.randint(r[0].get<int64_t>(), r[1].get<int64_t>()), r[2].get<int64_t>())
        << r.dump();
  }
  for (const auto& r : p.at("random_after_randint")) EXPECT_EQ(rs.random(), r.get<double>());
  for (const auto& r : p.at("uniform")) {
    EXPECT_EQ(rs.uniform(r[0].get<double>(), r[1].get<double>()), r[2].get<double>()) << r.dump();
  }
  const auto& f = p.at("uniform_fill");
  std::vector<double> block(f.at("count").get<size_t>());
  rs.uniform_fill(f.at("lo").get<double>(), f.at("hi").get<double>(), block.data(), block.size());
  EXPECT_EQ(block.front(), f.at("first").get<double>());
  EXPECT_EQ(block.back(), f.at("last").get<double>());
  EXPECT_EQ(sha256_hex(block.data(), block.size() * 8), f.at("sha256").get<std::string>());
  EXPECT_EQ(rs.random(), p.at("random_after_fill").get<double>());
}

TEST(SyntheticTest, RandintOfOneValueDrawsNothingAsInNumpy) {
  const auto& p = golden().at("primitives");
  ASSERT_EQ(p.at("rng0_then_random_seed99"), p.at("fresh_random_seed99"));
  NumpyRandomState rs(99);
  EXPECT_EQ(rs.randint(5, 6), 5);
  EXPECT_EQ(rs.random(), p.at("fresh_random_seed99").get<double>());
}

TEST(SyntheticTest, RandomStateIsStdMt19937WithNumpysDoubles) {
  NumpyRandomState rs(2024);
  std::mt19937 ref(2024);
  EXPECT_EQ(rs.next_uint32(), ref());
  const uint32_t a = ref(), b = ref();
  EXPECT_EQ(rs.random(), ((a >> 5) * 67108864.0 + (b >> 6)) / 9007199254740992.0);
  rs.skip_doubles(5000);
  ref.discard(10000);
  EXPECT_EQ(rs.next_uint32(), ref());
}

TEST(SyntheticTest, EveryGoldenVolumeIsBitExact) {
  // Volumes with running_index k > 0 continue the RandomState of volume k - 1,
  // so these also pin where each volume leaves the generator.
  NumpyRandomState rs(0);
  int checked = 0;
  for (const auto& c : golden().at("cases")) {
    if (c.at("running_index").get<int>() == 0) rs = NumpyRandomState(c.at("seed").get<uint32_t>());
    const SyntheticVolume v = make_test_image_3d(options_of(c.at("params")), rs);
    expect_matches(v, c);
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

TEST(SyntheticTest, TutorialVolumeZeroHasTheDocumentedFacts) {
  // semantics.md §2: np.random.seed(0), 128^3, num_seg_classes=1.
  NumpyRandomState rs(0);
  const SyntheticVolume v = make_test_image_3d(tutorial_options(), rs);
  ASSERT_EQ(v.spheres.size(), 12u);
  EXPECT_EQ(v.spheres[0].x, 74);
  EXPECT_EQ(v.spheres[0].y, 77);
  EXPECT_EQ(v.spheres[0].z, 94);
  EXPECT_EQ(v.spheres[0].radius, 8);
  EXPECT_NEAR(v.spheres[0].value, 0.92897, 1e-5);
  EXPECT_EQ(foreground(v), 262848);
  float max = 0.0f;
  for (size_t at = 0; at < v.image.size(); ++at) {
    if (v.label[at] == 0) {
      ASSERT_EQ(v.image[at], 0.0f) << "background voxel " << at;
    }
    ASSERT_TRUE(v.label[at] == 0 || v.label[at] == 1) << "voxel " << at;
    max = std::max(max, v.image[at]);
  }
  EXPECT_EQ(max, 1.0f);
  expect_matches(v, golden_case("tutorial_vol0"));
}

TEST(SyntheticTest, TutorialVolumeOneContinuesTheStream) {
  NumpyRandomState rs(0);
  (void)make_test_image_3d(tutorial_options(), rs);
  expect_matches(make_test_image_3d(tutorial_options(), rs), golden_case("tutorial_vol1"));
}

TEST(SyntheticTest, MonaisOwnTestCaseUsesSeedZero) {
  // MONAI tests/test_synthetic.py 3D case after set_determinism(seed=0):
  // img.mean 0.025132, seg.mean 0.0753961 (assert_allclose atol = rtol = 1e-7).
  SyntheticOptions o;
  o.height = 64;
  o.width = 64;
  o.depth = 45;
  o.num_seg_classes = 3;
  o.rad_max = 10;
  o.rad_min = 4;
  NumpyRandomState rs(0);
  const SyntheticVolume v = make_test_image_3d(o, rs);
  double img_sum = 0.0, seg_sum = 0.0;
  int32_t seg_max = 0;
  for (size_t at = 0; at < v.image.size(); ++at) {
    img_sum += v.image[at];
    seg_sum += v.label[at];
    seg_max = std::max(seg_max, v.label[at]);
  }
  const auto n = static_cast<double>(v.image.size());
  EXPECT_NEAR(img_sum / n, 0.025132, 1e-7 + 1e-7 * 0.025132);
  EXPECT_NEAR(seg_sum / n, 0.0753961, 1e-7 + 1e-7 * 0.0753961);
  EXPECT_EQ(seg_max, 3);
  expect_matches(v, golden_case("monai_test_synthetic_3d"));
}

TEST(SyntheticTest, MakeVolumesUsesThePerVolumeSeedRule) {
  const auto& mv = golden().at("make_volumes");
  const auto seed = mv.at("seed").get<uint64_t>();
  const auto first = mv.at("first").get<int64_t>();
  const auto count = mv.at("count").get<int64_t>();
  const auto volumes = make_volumes(options_of(mv.at("params")), seed, first, count, 2);
  ASSERT_EQ(static_cast<int64_t>(volumes.size()), count);
  for (int64_t v = 0; v < count; ++v) {
    const auto& g = mv.at("volumes")[static_cast<size_t>(v)];
    ASSERT_EQ(g.at("index").get<int64_t>(), first + v);
    EXPECT_EQ(synthetic_volume_seed(seed, first + v), g.at("numpy_seed").get<uint32_t>());
    EXPECT_EQ(image_sha256(volumes[static_cast<size_t>(v)]),
              g.at("image_sha256").get<std::string>());
    EXPECT_EQ(label_sha256(volumes[static_cast<size_t>(v)]),
              g.at("label_sha256").get<std::string>());
  }
}

TEST(SyntheticTest, MakeVolumesIsByteIdenticalForAnyThreadCount) {
  const auto& mv = golden().at("make_volumes");
  const SyntheticOptions o = options_of(mv.at("params"));
  const auto one = make_volumes(o, 11, 2, 5, 1);
  for (int threads : {2, 4, 9}) {
    const auto many = make_volumes(o, 11, 2, 5, threads);
    ASSERT_EQ(many.size(), one.size());
    for (size_t v = 0; v < one.size(); ++v) {
      EXPECT_EQ(many[v].image, one[v].image) << "threads=" << threads << " volume " << v;
      EXPECT_EQ(many[v].label, one[v].label) << "threads=" << threads << " volume " << v;
    }
  }
  // Volume i does not depend on which range it was made in.
  const auto tail = make_volumes(o, 11, 4, 1, 1);
  EXPECT_EQ(tail[0].image, one[2].image);
  EXPECT_TRUE(make_volumes(o, 11, 0, 0, 4).empty());
}

TEST(SyntheticTest, FitRadiiKeepsMonaisDefaultsWhereTheyFitAndScalesThemBelow) {
  for (int64_t size : {61, 64, 128}) {
    SyntheticOptions o;
    o.rad_max = 7;
    fit_radii(o, size);
    EXPECT_EQ(o.rad_max, SyntheticOptions{}.rad_max) << size;
    EXPECT_EQ(o.rad_min, SyntheticOptions{}.rad_min) << size;
  }
  for (int64_t size : {5, 8, 16, 32, 60}) {
    SyntheticOptions o;
    o.height = o.width = o.depth = size;
    o.num_seg_classes = 1;
    fit_radii(o, size);
    EXPECT_NO_THROW(validate(o)) << size;
    NumpyRandomState rs(0);
    const SyntheticVolume v = make_test_image_3d(o, rs);
    EXPECT_GT(std::count(v.label.begin(), v.label.end(), 1), 0) << size;
  }
  SyntheticOptions o;
  fit_radii(o, 32);
  EXPECT_EQ(o.rad_max, 15);
  EXPECT_EQ(o.rad_min, 3);
  o.height = o.width = o.depth = 4;
  fit_radii(o, 4);
  EXPECT_THAT([&] { validate(o); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                        ::testing::HasSubstr("min(height, width, depth)=4")));
}

TEST(SyntheticTest, DifferentSeedsAndIndicesGiveDifferentVolumes) {
  const SyntheticOptions o = options_of(golden().at("make_volumes").at("params"));
  const auto a = make_volumes(o, 1, 0, 2, 1);
  const auto b = make_volumes(o, 2, 0, 1, 1);
  EXPECT_NE(a[0].image, a[1].image);
  EXPECT_NE(a[0].image, b[0].image);
  EXPECT_NE(synthetic_volume_seed(1, 0), synthetic_volume_seed(2, 0));
  EXPECT_NE(synthetic_volume_seed(1, 0), synthetic_volume_seed(1, 1));
  NumpyRandomState r1(1), r2(2);
  EXPECT_NE(make_test_image_3d(o, r1).label, make_test_image_3d(o, r2).label);
}

TEST(SyntheticTest, NoiseDrawsAdvanceTheGeneratorEvenWithoutNoise) {
  // One uniform per voxel (2 raw draws) whatever noise_max is: the generator
  // ends in the same place with and without noise.
  SyntheticOptions o = options_of(golden().at("make_volumes").at("params"));
  o.noise_max = 0.0;
  NumpyRandomState quiet(5), noisy(5);
  (void)make_test_image_3d(o, quiet);
  o.noise_max = 0.3;
  (void)make_test_image_3d(o, noisy);
  EXPECT_EQ(quiet.next_uint32(), noisy.next_uint32());
}

std::string error_of(const SyntheticOptions& o) {
  try {
    NumpyRandomState rs(0);
    (void)make_test_image_3d(o, rs);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(SyntheticTest, RejectsWhatMonaiRejectsAndNamesTheValue) {
  SyntheticOptions o;
  o.rad_max = 10;
  o.rad_min = 11;
  EXPECT_THAT(error_of(o), HasSubstr("rad_max=10 must be > rad_min=11"));
  o.rad_max = 5;
  o.rad_min = 5;
  EXPECT_THAT(error_of(o), HasSubstr("rad_max=5 must be > rad_min=5"));
  o = SyntheticOptions{};
  o.rad_min = 0;
  EXPECT_THAT(error_of(o), HasSubstr("rad_min=0 must be >= 1"));
  o = SyntheticOptions{};
  o.width = 60;  // == 2 * rad_max
  EXPECT_THAT(error_of(o), HasSubstr("min(height, width, depth)=60 must be > 2 * rad_max=60"));
  o = SyntheticOptions{};
  o.depth = -3;
  EXPECT_THAT(error_of(o), HasSubstr("depth=-3 must be >= 0"));
  o = SyntheticOptions{};
  o.num_seg_classes = 0;
  EXPECT_THAT(error_of(o), HasSubstr("num_seg_classes=0 must be >= 1"));
  o = SyntheticOptions{};
  o.noise_max = std::nan("");
  EXPECT_THAT(error_of(o), HasSubstr("noise_max=nan"));
  o = SyntheticOptions{};
  o.height = o.width = o.depth = int64_t{1} << 40;
  EXPECT_THAT(error_of(o), HasSubstr("voxels overflow"));
}

TEST(SyntheticTest, RejectsBadRangesAndThreadCounts) {
  NumpyRandomState rs(0);
  try {
    (void)rs.randint(4, 4);
    FAIL() << "randint(4, 4) did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("lo=4 must be < hi=4"));
  }
  EXPECT_THROW((void)rs.uniform(0.0, HUGE_VAL), std::invalid_argument);
  const SyntheticOptions o = options_of(golden().at("make_volumes").at("params"));
  auto message = [&](int64_t first, int64_t count, int threads) -> std::string {
    try {
      (void)make_volumes(o, 0, first, count, threads);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(message(-1, 1, 1), HasSubstr("first=-1 must be >= 0"));
  EXPECT_THAT(message(0, -2, 1), HasSubstr("count=-2 must be >= 0"));
  EXPECT_THAT(message(0, 1, 0), HasSubstr("threads=0 must be >= 1"));
}

}  // namespace
}  // namespace volshard
