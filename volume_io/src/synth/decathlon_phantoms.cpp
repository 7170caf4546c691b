#include "volshard/volume_io/synthetic_decathlon.h"

// The Decathlon-like phantoms: a CT case (body, organs, a spleen in HU) and an
// MRI case (a brain with a tumour's regions in four channels), each from its
// own seed stream. decathlon_writer.cpp writes them as a task folder.

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "volshard/core/field.h"
#include "volshard/core/seed_streams.h"
#include "volshard/volume_io/synthetic_dataset.h"

namespace volshard {
namespace {

using Mat3 = std::array<std::array<double, 3>, 3>;

constexpr double kSqrt3 = 1.7320508075688772;

// About N(0, 1) from one 64-bit draw: the sum of its four 16-bit fields
// (Irwin-Hall, bounded at +-sqrt(12) = +-3.46), shifted and scaled to unit
// variance. Integer sums and one multiply: the same bits on every platform,
// where Box-Muller's log/cos could differ in the last bit between libms.
double gaussish(StreamRng& rng) {
  const uint64_t u = rng.next_u64();
  const auto sum = static_cast<int64_t>((u & 0xFFFFu) + ((u >> 16) & 0xFFFFu) +
                                        ((u >> 32) & 0xFFFFu) + (u >> 48));
  return static_cast<double>(sum - 2 * 65535) * (kSqrt3 / 65536.0);
}

double uniform(StreamRng& rng, double lo, double hi) {
  return lo + (hi - lo) * rng.uniform_double();
}

// tan(angle / 2) of a small turn, 3.4 to 6.9 degrees either way. Drawn for
// every case (used by the oblique ones) so that all cases draw alike.
double turn_parameter(StreamRng& rng) {
  const double t = static_cast<double>(30 + rng.below(31)) / 1000.0;
  return rng.below(2) == 0 ? t : -t;
}

// The rotation by 2 * atan(t) about `axis`, from the rational parametrisation
// cos = (1 - t^2) / (1 + t^2), sin = 2t / (1 + t^2): exact arithmetic, no libm.
Mat3 rotation_about(int axis, double t) {
  const double c = (1 - t * t) / (1 + t * t), s = 2 * t / (1 + t * t);
  Mat3 r{};
  for (int a = 0; a < 3; ++a) r[a][a] = 1;
  const int p = (axis + 1) % 3, q = (axis + 2) % 3;
  r[p][p] = c;
  r[p][q] = -s;
  r[q][p] = s;
  r[q][q] = c;
  return r;
}

Mat3 identity3() { return rotation_about(0, 0.0); }

// rot * diag(axis_mm) with the translation that puts the grid's centre voxel
// at centre_mm.
Affine grid_affine(const Mat3& rot, const std::array<double, 3>& axis_mm,
                   const std::array<double, 3>& centre_mm, const std::array<int64_t, 3>& shape) {
  Affine a{};
  for (int r = 0; r < 3; ++r) {
    double offset = 0;
    for (int c = 0; c < 3; ++c) {
      a[r][c] = rot[r][c] * axis_mm[c];
      offset += a[r][c] * static_cast<double>(shape[c] - 1) / 2;
    }
    a[r][3] = centre_mm[r] - offset;
  }
  a[3][3] = 1;
  return a;
}

StreamRng case_rng(uint64_t seed, uint64_t purpose, int64_t index) {
  return StreamRng(derive_seed(seed, Stream::kShared, 0, purpose + static_cast<uint64_t>(index)));
}

void check_index(const char* what, int64_t index) {
  if (index < 0) {
    throw std::invalid_argument(std::string(what) + ": index=" + std::to_string(index) +
                                " must be >= 0");
  }
}

// ---- CT ----

enum CtClass : uint8_t { kAir, kFat, kTissue, kBone, kSpleen };
// HU mean is drawn per case; the noise is this many HU (one standard deviation).
constexpr double kCtNoiseHu[] = {6, 12, 12, 60, 10};

// ---- MRI ----

enum MriClass : uint8_t { kBackground, kCsf, kGrey, kWhite, kEdema, kNonEnhancing, kEnhancing };
// Mean intensity per class and channel (FLAIR, T1w, t1gd, T2w), arbitrary
// scanner units: CSF dark in FLAIR and bright in T2w, white matter brighter
// than grey in T1; edema bright in FLAIR and T2w, the enhancing rim bright in
// t1gd, the non-enhancing core dark in T1.
constexpr double kMriMean[7][4] = {
    {0, 0, 0, 0},          {80, 250, 260, 1400},  {420, 500, 520, 600},  {330, 700, 720, 450},
    {800, 430, 450, 1100}, {450, 250, 270, 1200}, {600, 520, 1300, 700},
};
constexpr uint8_t kMriLabel[7] = {0, 0, 0, 0, 1, 2, 3};

// Inside the ellipsoid with centre c and semi-axes r?
bool inside(double i, double j, double k, const std::array<double, 3>& c,
            const std::array<double, 3>& r) {
  const double u = (i - c[0]) / r[0], v = (j - c[1]) / r[1], w = (k - c[2]) / r[2];
  return u * u + v * v + w * w <= 1;
}

}  // namespace

std::string to_string(SynthKind kind) {
  switch (kind) {
    case SynthKind::kSpheres:
      return "spheres";
    case SynthKind::kCt:
      return "ct";
    case SynthKind::kMri:
      return "mri";
  }
  return "kind " + std::to_string(static_cast<int>(kind));
}

SynthKind parse_synth_kind(const std::string& name) {
  for (const SynthKind k : {SynthKind::kSpheres, SynthKind::kCt, SynthKind::kMri}) {
    if (name == to_string(k)) return k;
  }
  throw FieldError(field_ref("kind") + "=" + name + " must be one of spheres, ct, mri");
}

int64_t default_decathlon_size(SynthKind kind) { return kind == SynthKind::kMri ? 64 : 96; }

std::pair<int64_t, int64_t> decathlon_size_range(SynthKind kind) {
  return kind == SynthKind::kMri ? std::pair<int64_t, int64_t>{24, 256}
                                 : std::pair<int64_t, int64_t>{16, 512};
}

std::array<int64_t, 3> decathlon_shape(SynthKind kind, int64_t size) {
  if (kind == SynthKind::kSpheres)
    throw std::invalid_argument("decathlon_shape: kind=spheres has no Decathlon grid");
  const auto [lo, hi] = decathlon_size_range(kind);
  if (size < lo || size > hi) {
    throw FieldError(field_ref("size") + "=" + std::to_string(size) + " must be in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "] for " + field_ref("kind") +
                     "=" + to_string(kind));
  }
  return {size, size, kind == SynthKind::kCt ? size / 4 : size * 5 / 8};
}

CtCase make_ct_case(int64_t size, uint64_t seed, int64_t index) {
  CtCase ct;
  ct.shape = decathlon_shape(SynthKind::kCt, size);
  check_index("make_ct_case", index);
  const int64_t X = ct.shape[0], Y = ct.shape[1], Z = ct.shape[2];
  StreamRng rng = case_rng(seed, kCtSeedPurpose, index);

  // The geometry first (a fixed number of draws for every case), then one
  // draw per voxel. Spacing in hundredths / tenths of a mm, as scanners store it.
  const double sxy = static_cast<double>(70 + rng.below(21)) / 100;
  const double sz = static_cast<double>(45 + rng.below(11)) / 10;
  ct.spacing_mm = {sxy, sxy, sz};
  const double turn = turn_parameter(rng);
  ct.oblique = index % 3 == 1;
  const std::array<double, 3> centre_mm{uniform(rng, -30, 30), uniform(rng, -30, 30),
                                        uniform(rng, -100, 100)};
  // Voxel axes towards the patient's left and posterior (x and y negative in
  // NIfTI's RAS world), as CT converted from DICOM's LPS-ordered slices has.
  ct.affine = grid_affine(ct.oblique ? rotation_about(2, turn) : identity3(), {-sxy, -sxy, sz},
                          centre_mm, ct.shape);

  // Body: an elliptic cylinder (voxel units) narrowing a little towards the
  // first and last slices, with a fat layer under the skin.
  const double bx =
      static_cast<double>(X - 1) / 2 + static_cast<double>(X) * uniform(rng, -0.03, 0.03);
  const double by =
      static_cast<double>(Y - 1) / 2 + static_cast<double>(Y) * uniform(rng, -0.03, 0.03);
  const double ax = static_cast<double>(X) * uniform(rng, 0.40, 0.46);
  const double ay = static_cast<double>(Y) * uniform(rng, 0.30, 0.37);
  const double inner = 1 - uniform(rng, 0.08, 0.14);
  // A vertebra behind the centre: +j is posterior with the y axis negative.
  const double spine_y = by + 0.62 * ay, spine_r = std::max(1.0, 0.16 * ay);
  // The spleen on the patient's left (+i with the x axis negative),
  // posterior. Its nearest voxel to the centre is always inside it (semi-axes
  // >= 1 voxel) and in soft tissue, so every case has foreground.
  const std::array<double, 3> organ_c{
      bx + ax * uniform(rng, 0.38, 0.50), by + ay * uniform(rng, 0.05, 0.30),
      static_cast<double>(Z - 1) / 2 + static_cast<double>(Z) * uniform(rng, -0.1, 0.1)};
  const std::array<double, 3> organ_r{
      std::max(1.0, ax * uniform(rng, 0.14, 0.22)), std::max(1.0, ay * uniform(rng, 0.20, 0.32)),
      std::max(1.0, static_cast<double>(Z) * uniform(rng, 0.22, 0.38))};
  const double mean_hu[] = {-1000, uniform(rng, -110, -90), uniform(rng, 35, 45),
                            uniform(rng, 400, 500), uniform(rng, 110, 130)};

  const auto n = static_cast<size_t>(X * Y * Z);
  ct.stored.resize(n);
  ct.label.resize(n);
  size_t v = 0;
  const double half_z = static_cast<double>(Z - 1) / 2;
  for (int64_t k = 0; k < Z; ++k) {
    const double zc = (static_cast<double>(k) - half_z) / half_z;
    const double taper = 1 - 0.12 * zc * zc;
    for (int64_t j = 0; j < Y; ++j) {
      for (int64_t i = 0; i < X; ++i, ++v) {
        const auto di = static_cast<double>(i), dj = static_cast<double>(j),
                   dk = static_cast<double>(k);
        const double u = (di - bx) / (ax * taper), w = (dj - by) / (ay * taper);
        const double r2 = u * u + w * w;
        CtClass cls = kTissue;
        if (r2 > 1) {
          cls = kAir;
        } else if (r2 > inner * inner) {
          cls = kFat;
        } else if ((di - bx) * (di - bx) + (dj - spine_y) * (dj - spine_y) <= spine_r * spine_r) {
          cls = kBone;
        } else if (inside(di, dj, dk, organ_c, organ_r)) {
          cls = kSpleen;
        }
        const double hu = mean_hu[cls] + kCtNoiseHu[cls] * gaussish(rng);
        const long stored = std::clamp(std::lround(hu), -1024L, 3071L) + 1024;
        ct.stored[v] = static_cast<int16_t>(stored);
        ct.label[v] = cls == kSpleen ? 1 : 0;
      }
    }
  }
  return ct;
}

MriCase make_mri_case(int64_t size, uint64_t seed, int64_t index) {
  MriCase mri;
  mri.shape = decathlon_shape(SynthKind::kMri, size);
  check_index("make_mri_case", index);
  const int64_t X = mri.shape[0], Y = mri.shape[1], Z = mri.shape[2];
  StreamRng rng = case_rng(seed, kMriSeedPurpose, index);

  const double turn = turn_parameter(rng);
  mri.oblique = index % 3 == 1;
  const std::array<double, 3> centre_mm{uniform(rng, -5, 5), uniform(rng, -30, -10),
                                        uniform(rng, 0, 20)};
  // RAS at 1 mm; oblique cases pitch about x (a tilted head).
  mri.affine = grid_affine(mri.oblique ? rotation_about(0, turn) : identity3(), {1, 1, 1},
                           centre_mm, mri.shape);

  // Brain: an ellipsoid of BraTS proportions, grey matter beyond `cortex`
  // of its radius, two ventricles beside the midline.
  std::array<double, 3> bc{}, ba{};
  const double brain_fraction[3][2] = {{0.30, 0.34}, {0.36, 0.41}, {0.36, 0.42}};
  for (int a = 0; a < 3; ++a) {
    const auto edge = static_cast<double>(mri.shape[a]);
    bc[a] = (edge - 1) / 2 + edge * uniform(rng, -0.03, 0.03);
    ba[a] = edge * uniform(rng, brain_fraction[a][0], brain_fraction[a][1]);
  }
  const double cortex = uniform(rng, 0.78, 0.86);
  const std::array<double, 3> cortex_r{cortex * ba[0], cortex * ba[1], cortex * ba[2]};
  const std::array<double, 3> ventricle_r{std::max(0.8, 0.07 * ba[0]), 0.30 * ba[1], 0.18 * ba[2]};
  const std::array<double, 3> left_ventricle{bc[0] - 0.12 * ba[0], bc[1] - 0.05 * ba[1],
                                             bc[2] + 0.05 * ba[2]};
  std::array<double, 3> right_ventricle = left_ventricle;
  right_ventricle[0] = bc[0] + 0.12 * ba[0];

  // Tumour: three nested ellipsoids about a voxel centre, each region at
  // least one voxel thick along every axis (rn >= 1, rc >= rn + 1, re >= rc
  // + 1), so all three labels are present. The centre stays within 0.3 of
  // the brain's semi-axes and the edema within about 0.55 of the smallest,
  // so the tumour lies inside the brain ((0.3 + 0.55)^2 + 2 * 0.3^2 < 1).
  std::array<double, 3> tc{}, re{}, rc{}, rn{};
  for (int a = 0; a < 3; ++a) tc[a] = std::floor(bc[a] + ba[a] * uniform(rng, -0.3, 0.3) + 0.5);
  const double smallest = std::min({ba[0], ba[1], ba[2]});
  for (int a = 0; a < 3; ++a) re[a] = smallest * uniform(rng, 0.40, 0.55);
  const double core = uniform(rng, 0.55, 0.70), necrotic = uniform(rng, 0.40, 0.55);
  for (int a = 0; a < 3; ++a) {
    rn[a] = std::max(1.0, re[a] * core * necrotic);
    rc[a] = std::max(rn[a] + 1, re[a] * core);
    re[a] = std::max(rc[a] + 1, re[a]);
  }

  // Per channel: a gain (scanners differ, so NormalizeIntensity matters) and a
  // linear bias field of at most +-10% across the brain.
  double gain[4], bias[4][3];
  for (int c = 0; c < 4; ++c) {
    gain[c] = uniform(rng, 0.8, 1.25);
    for (int a = 0; a < 3; ++a) bias[c][a] = uniform(rng, -1, 1) * 0.1 / 3;
  }

  const auto n = static_cast<size_t>(X * Y * Z);
  std::vector<uint8_t> cls(n);
  mri.label.resize(n);
  size_t v = 0;
  for (int64_t k = 0; k < Z; ++k) {
    for (int64_t j = 0; j < Y; ++j) {
      for (int64_t i = 0; i < X; ++i, ++v) {
        const auto di = static_cast<double>(i), dj = static_cast<double>(j),
                   dk = static_cast<double>(k);
        MriClass c = kBackground;
        if (!inside(di, dj, dk, bc, ba)) {
          c = kBackground;
        } else if (inside(di, dj, dk, tc, rn)) {
          c = kNonEnhancing;
        } else if (inside(di, dj, dk, tc, rc)) {
          c = kEnhancing;
        } else if (inside(di, dj, dk, tc, re)) {
          c = kEdema;
        } else if (inside(di, dj, dk, left_ventricle, ventricle_r) ||
                   inside(di, dj, dk, right_ventricle, ventricle_r)) {
          c = kCsf;
        } else {
          c = inside(di, dj, dk, bc, cortex_r) ? kWhite : kGrey;
        }
        cls[v] = c;
        mri.label[v] = kMriLabel[c];
      }
    }
  }

  // One noise draw per voxel and channel, background included, so the
  // stream does not depend on the geometry.
  mri.image.resize(4 * n);
  for (int c = 0; c < 4; ++c) {
    float* out = mri.image.data() + static_cast<size_t>(c) * n;
    v = 0;
    for (int64_t k = 0; k < Z; ++k) {
      for (int64_t j = 0; j < Y; ++j) {
        for (int64_t i = 0; i < X; ++i, ++v) {
          const double z = gaussish(rng);
          if (cls[v] == kBackground) {
            out[v] = 0.0f;  // skull-stripped: exactly 0, what nonzero masks find
            continue;
          }
          const double field = 1 + bias[c][0] * (static_cast<double>(i) - bc[0]) / ba[0] +
                               bias[c][1] * (static_cast<double>(j) - bc[1]) / ba[1] +
                               bias[c][2] * (static_cast<double>(k) - bc[2]) / ba[2];
          const double value = kMriMean[cls[v]][c] * gain[c] * field * (1 + 0.04 * z);
          out[v] = static_cast<float>(std::max(1.0, value));
        }
      }
    }
  }
  return mri;
}

}  // namespace volshard
