#pragma once
// Where NIfTI-1 and NIfTI-2 keep the fields volshard reads and writes: one
// table per version, shared by the reader (nifti_header.cpp) and the writer
// (nifti_io.cpp), so that neither restates the other's offsets.

#include <cstddef>
#include <cstdint>

namespace volshard::detail {

struct NiftiLayout {
  int64_t header_size;         ///< sizeof_hdr: 348 or 540
  int64_t vox_offset_written;  ///< where a single file's voxels start: header + 4 extension bytes
  size_t magic;                ///< "n+1\0" (4 bytes) or "n+2\0\r\n\032\n" (8 bytes)
  size_t dim, dim_size, intent_p, intent_p_size, intent_code, intent_code_size, datatype, bitpix,
      pixdim, vox_offset, scl_slope, scl_inter, cal_max, cal_min, xyzt_units, xyzt_units_size,
      descrip, qform_code, sform_code, code_size, quatern, srow, intent_name, real_size;
  /// qoffset_x, _y, _z follow quatern_b, _c, _d.
  size_t qoffset() const { return quatern + 3 * real_size; }
};

constexpr NiftiLayout kNifti1Layout{348, 352, 344, 40,  2,   56,  4,   68,  2,
                                    70,  72,  76,  108, 112, 116, 124, 128, 123,
                                    1,   148, 252, 254, 2,   256, 280, 328, 4};
constexpr NiftiLayout kNifti2Layout{540, 544, 4,   16,  8,   80,  8,   504, 4,
                                    12,  14,  104, 168, 176, 184, 192, 200, 500,
                                    4,   240, 344, 348, 4,   352, 400, 508, 8};

inline const NiftiLayout& nifti_layout(int version) {
  return version == 1 ? kNifti1Layout : kNifti2Layout;
}

}  // namespace volshard::detail
