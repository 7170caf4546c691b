#include "volshard/core/orientation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

namespace volshard {
namespace {

using ::testing::HasSubstr;

Affine affine_of(const std::vector<std::vector<double>>& rows) {
  Affine a = identity_affine();
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < rows[r].size(); ++c) a[r][c] = rows[r][c];
  return a;
}

// Every signed permutation of the axes, with unequal zooms and an offset:
// each voxel axis points exactly along one world axis, so the codes are read
// off the construction, and ornt_of_codes gives the orientation back.
TEST(OrientationTest, SignedPermutationsGiveTheCodesTheyAreMadeOf) {
  const char labels[3][2] = {{'L', 'R'}, {'P', 'A'}, {'I', 'S'}};
  std::array<int, 3> perm{0, 1, 2};
  int cases = 0;
  do {
    for (int signs = 0; signs < 8; ++signs) {
      Affine a = identity_affine();
      a[0][0] = a[1][1] = a[2][2] = 0;
      std::string expected;
      for (int in = 0; in < 3; ++in) {
        const int sign = (signs >> in & 1) ? -1 : 1;
        a[static_cast<size_t>(perm[static_cast<size_t>(in)])][static_cast<size_t>(in)] =
            sign * (0.5 + in);
        expected += labels[perm[static_cast<size_t>(in)]][sign > 0 ? 1 : 0];
      }
      a[0][3] = -12.5;
      EXPECT_EQ(axcodes(a), expected);
      EXPECT_EQ(io_orientation(a), ornt_of_codes(expected, "test"));
      ++cases;
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(cases, 48);
}

// Sheared affines, where the closest rotation decides: nibabel 5.3.2's
// aff2axcodes from the pinned environment (numpy.random.default_rng(7),
// normal 3 x 3 rounded to 3 decimals; the first is where a per-column guess,
// as `volshard info` made before, said "PLI").
TEST(OrientationTest, ShearedAffinesGiveNibabelsCodes) {
  const std::vector<std::pair<std::vector<std::vector<double>>, std::string>> cases = {
      {{{-1.265, -0.623, 0.041}, {-2.325, -0.219, -1.246}, {-0.732, -0.544, -0.316}}, "LIP"},
      {{{0.001, 0.299, -0.274, -6.205}, {-0.891, -0.455, -0.992, 4.898}, {0.06, 1.34, -0.492, 3.569}},
       "PSL"},
      {{{0.105, -0.93, -0.029, -2.351}, {0.695, -1.344, -0.458, -12.674}, {-1.901, -1.29, -1.842, 2.713}},
       "ALI"},
      {{{0.157, -0.187, -2.517, -8.088}, {-0.539, -0.049, 0.113, 10.609}, {-1.53, -0.478, -0.979, -8.075}},
       "PIL"},
      {{{-0.033, 0.884, -0.584, -15.471}, {-0.112, 0.11, 0.064, 8.594}, {-1.225, 0.076, 1.359, 1.194}},
       "IRA"},
      {{{-0.641, 2.0, 0.762, 6.672}, {-1.199, 0.075, 0.577, 14.385}, {-0.189, 0.683, -0.067, -6.757}},
       "PRI"},
      {{{0.203, -0.463, 0.127, -7.946}, {-1.187, -0.579, -0.196, 6.469}, {0.899, 1.145, -1.324, -19.924}},
       "PLI"},
  };
  for (const auto& [rows, codes] : cases) EXPECT_EQ(axcodes(affine_of(rows)), codes);
}

// A voxel axis that moves nowhere: nibabel leaves it out (None, NaN); here '?'
// and {-1, 0}, the other axes as nibabel gives them.
TEST(OrientationTest, AnAxisThatPointsNowhereIsLeftOut) {
  const Affine a = affine_of({{1, 0, 0}, {0, 0, 0}, {0, 0, 1}});
  EXPECT_EQ(axcodes(a), "R?S");
  EXPECT_EQ(io_orientation(a)[1], (std::array<int, 2>{-1, 0}));
}

TEST(OrientationTest, CodesFollowOneRuleNamedByTheirCaller) {
  EXPECT_EQ(ornt_of_codes("LPS", "x")[0], (std::array<int, 2>{0, -1}));
  for (const auto& [codes, why] : std::vector<std::pair<std::string, std::string>>{
           {"ras", "has 'r', not one of L R P A I S (upper case, as nibabel)"},
           {"RA", "must be three letters"},
           {"RRS", "names the same axis twice"},
           {"RLS", "names the same axis twice"}}) {
    try {
      check_axcodes(codes, "--orientation=" + codes);
      FAIL() << codes;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("--orientation=" + codes + " " + why.substr(0, 20)));
    }
  }
}

}  // namespace
}  // namespace volshard
