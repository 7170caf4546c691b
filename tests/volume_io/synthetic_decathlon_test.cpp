#include "volshard/volume_io/synthetic_decathlon.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

#include "volshard/core/field.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;

// FNV-1a 64 over raw bytes: pins a case's bytes without storing them.
template <class T>
uint64_t fnv1a(const std::vector<T>& v, uint64_t h = 0xcbf29ce484222325ULL) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

constexpr int64_t kCases = 12;  // four turns of the every-third-case oblique rule

TEST(SyntheticDecathlonTest, KindsParseByNameAndAnUnknownOneListsThem) {
  EXPECT_EQ(parse_synth_kind("spheres"), SynthKind::kSpheres);
  EXPECT_EQ(parse_synth_kind("ct"), SynthKind::kCt);
  EXPECT_EQ(parse_synth_kind("mri"), SynthKind::kMri);
  EXPECT_EQ(to_string(SynthKind::kMri), "mri");
  try {
    parse_synth_kind("CT");
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    // By key for the library's callers; by flag on synth's command line.
    EXPECT_STREQ(e.what(), "kind=CT must be one of spheres, ct, mri");
    EXPECT_EQ(flag_text(e), "--kind=CT must be one of spheres, ct, mri");
  }
}

TEST(SyntheticDecathlonTest, GridsFollowTheSizeAndRefuseSizesOutsideTheRange) {
  EXPECT_EQ(decathlon_shape(SynthKind::kCt, 48), (std::array<int64_t, 3>{48, 48, 12}));
  EXPECT_EQ(decathlon_shape(SynthKind::kMri, 32), (std::array<int64_t, 3>{32, 32, 20}));
  EXPECT_EQ(default_decathlon_size(SynthKind::kCt), 96);
  EXPECT_EQ(default_decathlon_size(SynthKind::kMri), 64);
  EXPECT_EQ(decathlon_test_count(3), 1);
  EXPECT_EQ(decathlon_test_count(40), 10);
  try {
    make_ct_case(15, 0, 0);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "size=15 must be in [16, 512] for kind=ct");
    EXPECT_EQ(flag_text(e), "--size=15 must be in [16, 512] for --kind=ct");
  }
  EXPECT_THROW(make_mri_case(23, 0, 0), std::invalid_argument);
  EXPECT_THROW(make_mri_case(32, 0, -1), std::invalid_argument);
  EXPECT_THROW(decathlon_shape(SynthKind::kSpheres, 32), std::invalid_argument);
}

TEST(SyntheticDecathlonTest, CtCasesHaveHuBodyAndABrighterSpleenAtEverySize) {
  for (const int64_t size : {16, 17, 32, 48, 96}) {
    for (int64_t index = 0; index < kCases; ++index) {
      SCOPED_TRACE("size " + std::to_string(size) + " case " + std::to_string(index));
      const CtCase c = make_ct_case(size, 3, index);
      const size_t n = static_cast<size_t>(c.shape[0] * c.shape[1] * c.shape[2]);
      ASSERT_EQ(c.stored.size(), n);
      ASSERT_EQ(c.label.size(), n);
      // Spacing as abdominal CT, LPS-like axes, one case in three turned about z.
      EXPECT_GE(c.spacing_mm[0], 0.7);
      EXPECT_LE(c.spacing_mm[0], 0.9);
      EXPECT_EQ(c.spacing_mm[0], c.spacing_mm[1]);
      EXPECT_GE(c.spacing_mm[2], 4.5);
      EXPECT_LE(c.spacing_mm[2], 5.5);
      EXPECT_LT(c.affine[0][0], 0);
      EXPECT_LT(c.affine[1][1], 0);
      EXPECT_GT(c.affine[2][2], 0);
      EXPECT_EQ(c.oblique, index % 3 == 1);
      EXPECT_EQ(c.affine[0][1] != 0, c.oblique);
      double organ = 0, body = 0;
      int64_t organ_n = 0, body_n = 0;
      int16_t lo = 4096, hi = -1;
      for (size_t v = 0; v < n; ++v) {
        const int hu = c.stored[v] - 1024;
        lo = std::min(lo, c.stored[v]);
        hi = std::max(hi, c.stored[v]);
        ASSERT_LE(c.label[v], 1);
        if (c.label[v] == 1) {
          organ += hu;
          ++organ_n;
        } else if (hu > -500) {
          body += hu;
          ++body_n;
        }
      }
      EXPECT_GE(lo, 0);
      EXPECT_LE(hi, 4095);
      EXPECT_LT(lo - 1024, -990);  // air
      ASSERT_GT(organ_n, 0);
      ASSERT_GT(body_n, organ_n);
      EXPECT_NEAR(organ / static_cast<double>(organ_n), 120, 25);
      EXPECT_LT(body / static_cast<double>(body_n), organ / static_cast<double>(organ_n) - 50);
    }
  }
}

TEST(SyntheticDecathlonTest, MriCasesHaveEveryNestedLabelAndZeroOutsideTheBrain) {
  for (const int64_t size : {24, 25, 31, 32, 48, 64}) {
    for (int64_t index = 0; index < kCases; ++index) {
      SCOPED_TRACE("size " + std::to_string(size) + " case " + std::to_string(index));
      const MriCase m = make_mri_case(size, 5, index);
      const size_t n = static_cast<size_t>(m.shape[0] * m.shape[1] * m.shape[2]);
      ASSERT_EQ(m.image.size(), 4 * n);
      ASSERT_EQ(m.label.size(), n);
      EXPECT_EQ(m.oblique, index % 3 == 1);
      EXPECT_EQ(m.affine[1][2] != 0, m.oblique);
      std::set<int> labels;
      double mean[4][4] = {};  // [label][channel]
      int64_t count[4] = {};
      for (size_t v = 0; v < n; ++v) {
        const bool brain = m.image[v] != 0;
        for (size_t c = 0; c < 4; ++c) {
          // Every channel has the same support: the brain, >= 1 inside.
          ASSERT_EQ(m.image[c * n + v] != 0, brain);
          if (brain) {
            ASSERT_GE(m.image[c * n + v], 1.0f);
          }
        }
        ASSERT_LE(m.label[v], 3);
        if (m.label[v] > 0) {
          ASSERT_TRUE(brain);
        }
        labels.insert(m.label[v]);
        if (!brain) continue;
        ++count[m.label[v]];
        for (size_t c = 0; c < 4; ++c) mean[m.label[v]][c] += m.image[c * n + v];
      }
      ASSERT_EQ(labels, (std::set<int>{0, 1, 2, 3}));
      for (int l = 0; l < 4; ++l)
        for (int c = 0; c < 4; ++c) mean[l][c] /= static_cast<double>(count[l]);
      EXPECT_GT(count[0], count[1]);            // the tumour is a part of the brain
      EXPECT_GT(mean[1][0], 1.5 * mean[0][0]);  // edema bright in FLAIR
      EXPECT_GT(mean[3][2], 1.5 * mean[0][2]);  // the enhancing rim bright in t1gd
      EXPECT_LT(mean[2][1], mean[0][1]);        // the core dark in T1w
    }
  }
}

TEST(SyntheticDecathlonTest, ACaseDependsOnlyOnSeedIndexAndSize) {
  const CtCase a = make_ct_case(32, 7, 4), b = make_ct_case(32, 7, 4);
  EXPECT_EQ(a.stored, b.stored);
  EXPECT_EQ(a.affine, b.affine);
  EXPECT_NE(make_ct_case(32, 8, 4).stored, a.stored);
  EXPECT_NE(make_ct_case(32, 7, 5).stored, a.stored);
  EXPECT_EQ(make_mri_case(24, 7, 4).image, make_mri_case(24, 7, 4).image);
  EXPECT_NE(make_mri_case(24, 7, 4).image, make_mri_case(24, 7, 3).image);
}

TEST(SyntheticDecathlonTest, PinnedBytesOfOneCaseOfEachKind) {
  // Integer noise, rational rotations, no libm or std distributions: these
  // bytes do not depend on the standard library (nor, where multiply-adds are
  // not fused, as in our ISO C++ build, on the platform). A change here
  // changes every file `volshard synth --kind ct|mri` writes.
  const CtCase ct = make_ct_case(16, 0, 1);
  EXPECT_EQ(fnv1a(ct.label, fnv1a(ct.stored)), 2770534891750862746u);
  const MriCase mri = make_mri_case(24, 0, 1);
  EXPECT_EQ(fnv1a(mri.label, fnv1a(mri.image)), 9704282168033402244u);
}

}  // namespace
}  // namespace volshard
