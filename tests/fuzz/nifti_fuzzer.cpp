// libFuzzer target over the std-only NIfTI reader: header parsing, gzip (ISA-L
// or libdeflate, and the zlib fallback) and the voxel copies. Built by clang with
// -fsanitize=fuzzer,address,undefined (tests/CMakeLists.txt, when clang++ is
// found); ctest runs it for 60 s from tests/fuzz/corpus. Longer:
//   build/bin/nifti_fuzzer build/fuzz-corpus tests/fuzz/corpus -dict=tests/fuzz/nifti.dict \
//     -max_total_time=3600 -jobs=2
// Properties checked: bad input only ever throws std::runtime_error (never
// crashes, never allocates beyond the voxel limit), and a file that parses
// converts to C order and back to the same voxels.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "volshard/volume_io/nifti_header.h"
#include "volshard/volume_io/voxel_copy.h"

namespace {

volshard::NiftiDatatype natural(volshard::NiftiDatatype t) {
  using volshard::NiftiDatatype;
  if (t == NiftiDatatype::kUint16) return NiftiDatatype::kInt32;
  if (t == NiftiDatatype::kUint32) return NiftiDatatype::kInt64;
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volshard::NiftiReadOptions options;
  options.max_voxels = int64_t{1} << 20;  // keeps every input's memory small
  volshard::NiftiFile file;
  try {
    file = volshard::parse_nifti_file(data, size, "fuzz.nii", options);
  } catch (const std::runtime_error&) {
    return 0;  // the documented way to refuse input
  }
  const volshard::NiftiHeader& h = file.header;
  if (h.num_voxels() > options.max_voxels) std::abort();
  if (file.bytes.size < static_cast<size_t>(h.vox_offset + h.data_bytes())) std::abort();

  auto dim = [&](size_t a) { return a < h.shape.size() ? h.shape[a] : int64_t{1}; };
  volshard::VoxelCopySpec spec;
  spec.cxyz = {dim(3), dim(0), dim(1), dim(2)};
  spec.src_type = h.datatype;
  spec.src_big_endian = h.big_endian;
  spec.scale = h.has_scaling();
  spec.slope = h.scl_slope;
  spec.inter = h.scl_inter;
  spec.dst_type = spec.scale ? volshard::NiftiDatatype::kFloat64 : natural(h.datatype);
  const size_t n = static_cast<size_t>(h.num_voxels());
  std::vector<uint64_t> c_order(n), file_order(n);  // 8 bytes per voxel fits every output type
  const int64_t bad_c = volshard::copy_voxels(file.voxels(), c_order.data(), spec, 0, spec.cxyz[2]);
  spec.to_c_order = false;
  const int64_t bad_f =
      volshard::copy_voxels(file.voxels(), file_order.data(), spec, 0, spec.cxyz[2]);
  if (bad_c != bad_f) std::abort();
  // Back to file order: must equal the untransposed copy, byte for byte.
  std::vector<uint64_t> back(n);
  volshard::c_order_to_file_order(c_order.data(), reinterpret_cast<uint8_t*>(back.data()),
                                  spec.dst_type, spec.cxyz, 0, spec.cxyz[2]);
  const size_t bytes = n * static_cast<size_t>(volshard::element_size(spec.dst_type));
  if (std::memcmp(back.data(), file_order.data(), bytes) != 0) std::abort();
  return 0;
}
