#pragma once
// Which way a grid's voxel axes point: nibabel's io_orientation, aff2axcodes
// and axcodes2ornt, for every caller (`volshard info`, Orientation, the
// prefix and its inverse). Std only.

#include <array>
#include <string>

#include "volshard/core/affine.h"

namespace volshard {

/// Per voxel axis: the world axis (0 = x L/R, 1 = y P/A, 2 = z I/S) and +1 or
/// -1 (pointing R/A/S or L/P/I); {-1, 0} for an axis that points nowhere.
using Ornt = std::array<std::array<int, 2>, 3>;

/// nibabel's io_orientation: the columns scaled to unit length, the rotation
/// closest to them (the polar factor, U V^T of their SVD, singular values
/// under 3 eps of the largest left out), then each voxel axis in turn takes
/// the world axis it points along most of those not taken. A shear changes
/// the answer from a per-column guess (nibabel's "LIP" where that says "PLI").
Ornt io_orientation(const Affine& affine);

/// nibabel's aff2axcodes: "RAS", "LPS", "PSR", ...; '?' for an axis that
/// points nowhere.
std::string axcodes(const Affine& affine);

/// The one rule for axis codes, nibabel's axcodes2ornt with its default
/// labels (MONAI's Orientation passes them on): three upper-case letters of
/// L/R, P/A, I/S naming each world axis once. Throws std::invalid_argument
/// "<what> <why>" otherwise (what: "--orientation=ras", ...).
void check_axcodes(const std::string& codes, const std::string& what);

/// axcodes2ornt: the codes (checked as check_axcodes, named by `what`) as an Ornt.
Ornt ornt_of_codes(const std::string& codes, const std::string& what);

}  // namespace volshard
