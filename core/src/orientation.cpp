#include "volshard/core/orientation.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>

#include "volshard/core/field.h"

namespace volshard {
namespace {

constexpr char kAxisLabels[3][2] = {{'L', 'R'}, {'P', 'A'}, {'I', 'S'}};

using Matrix3 = std::array<std::array<double, 3>, 3>;

// The world axis and direction each code names (R/A/S: +1; L/P/I: -1), or
// {-1, 0} for a letter that names none.
std::array<int, 2> axis_of_code(char c) {
  for (int axis = 0; axis < 3; ++axis)
    for (int side = 0; side < 2; ++side)
      if (c == kAxisLabels[axis][side]) return {axis, side == 1 ? 1 : -1};
  return {-1, 0};
}

// The polar factor of `a` as numpy's SVD gives nibabel: U V^T over the
// singular values above max * 3 * eps. One-sided Jacobi (Hestenes): plane
// rotations V make the columns of W = A V orthogonal; then the singular
// values are their norms and U's columns the columns normalised.
Matrix3 closest_rotation(const Matrix3& a) {
  Matrix3 w = a, v{};
  for (size_t i = 0; i < 3; ++i) v[i][i] = 1;
  constexpr double kEps = std::numeric_limits<double>::epsilon();
  for (int sweep = 0; sweep < 64; ++sweep) {
    bool rotated = false;
    for (size_t p = 0; p < 2; ++p) {
      for (size_t q = p + 1; q < 3; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        for (size_t k = 0; k < 3; ++k) {
          alpha += w[k][p] * w[k][p];
          beta += w[k][q] * w[k][q];
          gamma += w[k][p] * w[k][q];
        }
        if (gamma == 0 || std::abs(gamma) <= kEps * std::sqrt(alpha * beta)) continue;
        rotated = true;
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (size_t k = 0; k < 3; ++k) {
          const double wp = w[k][p], wq = w[k][q];
          w[k][p] = c * wp - s * wq;
          w[k][q] = s * wp + c * wq;
          const double vp = v[k][p], vq = v[k][q];
          v[k][p] = c * vp - s * vq;
          v[k][q] = s * vp + c * vq;
        }
      }
    }
    if (!rotated) break;
  }
  std::array<double, 3> sigma{};
  for (size_t j = 0; j < 3; ++j)
    sigma[j] = std::sqrt(w[0][j] * w[0][j] + w[1][j] * w[1][j] + w[2][j] * w[2][j]);
  const double tol = std::max({sigma[0], sigma[1], sigma[2]}) * 3 * kEps;
  Matrix3 r{};
  for (size_t j = 0; j < 3; ++j) {
    if (!(sigma[j] > tol)) continue;
    for (size_t row = 0; row < 3; ++row)
      for (size_t col = 0; col < 3; ++col) r[row][col] += w[row][j] / sigma[j] * v[col][j];
  }
  return r;
}

}  // namespace

Ornt io_orientation(const Affine& affine) {
  Matrix3 rs{};
  for (size_t c = 0; c < 3; ++c) {
    double zoom = 0;
    for (size_t r = 0; r < 3; ++r) zoom += affine[r][c] * affine[r][c];
    zoom = zoom == 0 ? 1.0 : std::sqrt(zoom);
    for (size_t r = 0; r < 3; ++r) rs[r][c] = affine[r][c] / zoom;
  }
  Matrix3 r = closest_rotation(rs);
  Ornt ornt{};
  for (size_t in = 0; in < 3; ++in) {
    size_t out = 0;
    double best = -1;
    for (size_t w = 0; w < 3; ++w) {
      if (std::abs(r[w][in]) > best) {
        best = std::abs(r[w][in]);
        out = w;
      }
    }
    if (best <= 1e-8) {  // np.allclose(col, 0): nibabel leaves the axis NaN
      ornt[in] = {-1, 0};
      continue;
    }
    ornt[in] = {static_cast<int>(out), r[out][in] < 0 ? -1 : 1};
    for (size_t c = 0; c < 3; ++c) r[out][c] = 0;
  }
  return ornt;
}

std::string axcodes(const Affine& affine) {
  std::string codes;
  for (const auto& [axis, flip] : io_orientation(affine))
    codes += axis < 0 ? '?' : kAxisLabels[axis][flip > 0 ? 1 : 0];
  return codes;
}

void check_axcodes(const std::string& codes, const std::string& what) {
  auto bad = [&](const std::string& why) { throw FieldError(what + " " + why); };
  if (codes.size() != 3) bad("must be three letters, one of L/R, P/A and I/S each (e.g. RAS)");
  bool used[3] = {false, false, false};
  for (const char c : codes) {
    const int axis = axis_of_code(c)[0];
    if (axis < 0)
      bad("has '" + std::string(1, c) + "', not one of L R P A I S (upper case, as nibabel)");
    if (used[axis]) bad("names the same axis twice");
    used[axis] = true;
  }
}

Ornt ornt_of_codes(const std::string& codes, const std::string& what) {
  check_axcodes(codes, what);
  Ornt ornt{};
  for (size_t i = 0; i < 3; ++i) ornt[i] = axis_of_code(codes[i]);
  return ornt;
}

}  // namespace volshard
