#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include "volshard/datasets/volume.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>

#include "volshard/core/error.h"
#include "volshard/core/limits.h"
#include "volshard/datasets/out_of_memory.h"
#include "volshard/volume_io/voxel_copy.h"

namespace volshard {
namespace {

NiftiDatatype natural_type(NiftiDatatype disk) {
  switch (disk) {
    case NiftiDatatype::kUint16:
      return NiftiDatatype::kInt32;
    case NiftiDatatype::kUint32:
      return NiftiDatatype::kInt64;
    default:
      return disk;
  }
}

at::ScalarType scalar_type(NiftiDatatype t) {
  switch (t) {
    case NiftiDatatype::kUint8:
      return at::kByte;
    case NiftiDatatype::kInt8:
      return at::kChar;
    case NiftiDatatype::kInt16:
      return at::kShort;
    case NiftiDatatype::kInt32:
      return at::kInt;
    case NiftiDatatype::kInt64:
      return at::kLong;
    case NiftiDatatype::kFloat32:
      return at::kFloat;
    case NiftiDatatype::kFloat64:
      return at::kDouble;
    case NiftiDatatype::kUint16:
    case NiftiDatatype::kUint32:
      break;
  }
  throw std::logic_error("no ATen type for " + to_string(t));
}

bool is_integer(NiftiDatatype t) {
  return t != NiftiDatatype::kFloat32 && t != NiftiDatatype::kFloat64;
}

NiftiDatatype output_type(const NiftiHeader& h, const ReadOptions& options) {
  if (options.uint8_if_it_fits && is_integer(h.datatype) &&
      !(options.apply_scaling && h.has_scaling())) {
    return NiftiDatatype::kUint8;
  }
  if (options.as_float) return NiftiDatatype::kFloat32;
  if (options.apply_scaling && h.has_scaling()) return NiftiDatatype::kFloat64;
  return natural_type(h.datatype);
}

bool host_is_big_endian() {
  const uint16_t one = 1;
  uint8_t first;
  std::memcpy(&first, &one, 1);
  return first == 0;
}

// Rows per parallel chunk: about 256 K voxels, so that small volumes stay on
// one thread.
int64_t row_grain(const std::array<int64_t, 4>& cxyz) {
  const int64_t per_row = cxyz[0] * cxyz[1] * cxyz[3];
  return std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, per_row));
}

template <class Fn>
void for_rows(int64_t rows, int64_t grain, bool parallel, const Fn& fn) {
  if (parallel && rows > grain) {
    at::parallel_for(0, rows, grain, fn);
  } else {
    fn(0, rows);
  }
}

}  // namespace

at::ScalarType volume_dtype(const NiftiHeader& header, const ReadOptions& options) {
  return scalar_type(output_type(header, options));
}

namespace {

Volume read_volume_unguarded(const std::string& path, const ReadOptions& options) {
  NiftiReadOptions nifti_options;
  nifti_options.max_voxels = options.max_voxels;
  NiftiFile file = read_nifti(path, nifti_options);
  const NiftiHeader& h = file.header;
  const auto dim = [&](size_t axis) { return axis < h.shape.size() ? h.shape[axis] : int64_t{1}; };
  const std::array<int64_t, 4> cxyz{dim(3), dim(0), dim(1), dim(2)};
  const int64_t C = cxyz[0], X = cxyz[1], Y = cxyz[2], Z = cxyz[3];

  VoxelCopySpec spec;
  spec.cxyz = cxyz;
  spec.src_type = h.datatype;
  spec.src_big_endian = h.big_endian;
  spec.dst_type = output_type(h, options);
  spec.scale = options.apply_scaling && h.has_scaling();
  spec.slope = h.scl_slope;
  spec.inter = h.scl_inter;
  spec.to_c_order = options.layout == VolumeLayout::kContiguous;
  spec.narrow_to_uint8 =
      spec.dst_type == NiftiDatatype::kUint8 && h.datatype != NiftiDatatype::kUint8;
  const at::ScalarType dtype = scalar_type(spec.dst_type);

  Volume v;
  const bool file_order = options.layout == VolumeLayout::kFileOrderView;
  const bool zero_copy = file_order && !spec.scale && spec.dst_type == h.datatype &&
                         (h.big_endian == host_is_big_endian() || element_size(h.datatype) == 1) &&
                         h.vox_offset % element_size(h.datatype) == 0;
  at::Tensor storage;
  if (zero_copy) {
    // The decompressed file becomes the tensor's storage.
    auto holder = std::make_shared<ByteBuffer>(std::move(file.bytes));
    void* voxels = holder->data.get() + h.vox_offset;
    storage = at::from_blob(
        voxels, {C, Z, Y, X}, [holder](void*) {}, at::TensorOptions().dtype(dtype));
    v.nonfinite_voxels =
        options.count_nonfinite ? count_nonfinite(voxels, storage.numel(), h.datatype) : -1;
  } else {
    const auto copy = [&] {
      const at::ScalarType type = scalar_type(spec.dst_type);
      storage = file_order ? at::empty({C, Z, Y, X}, at::TensorOptions().dtype(type))
                           : at::empty({C, X, Y, Z}, at::TensorOptions().dtype(type));
      std::atomic<int64_t> bad{0};
      const uint8_t* src = file.voxels();
      void* dst = storage.data_ptr();
      for_rows(Y, row_grain(cxyz), options.parallel,
               [&](int64_t jb, int64_t je) { bad += copy_voxels(src, dst, spec, jb, je); });
      return bad.load();
    };
    const int64_t bad = copy();
    if (spec.narrow_to_uint8 && bad > 0) {  // not a compact label after all: the usual output
      ReadOptions usual = options;
      usual.uint8_if_it_fits = false;
      spec.dst_type = output_type(h, usual);
      spec.narrow_to_uint8 = false;
      v.nonfinite_voxels = copy();
    } else {
      v.nonfinite_voxels = spec.narrow_to_uint8 ? 0 : bad;
    }
  }
  v.data = file_order ? storage.permute({0, 3, 2, 1}) : storage;
  for (size_t axis = 0; axis < 3; ++axis) {
    v.spacing_mm[axis] = axis < h.shape.size() ? h.pixdim[axis + 1] : 1.0;
  }
  v.affine = h.affine;
  v.disk_dtype = h.datatype;
  v.path = path;
  v.header = h;
  return v;
}

}  // namespace

Volume read_volume(const std::string& path, const ReadOptions& options) {
  try {
    return read_volume_unguarded(path, options);
  } catch (const std::bad_alloc& e) {  // the float copy's
    throw_read_out_of_memory(path, e);
  } catch (const c10::Error& e) {  // c10's allocator (not tuned for volumes)
    if (is_out_of_memory(e) && bytes_asked(e) > 0)
      throw_read_out_of_memory(path, OutOfMemoryError(bytes_asked(e)));
    rethrow_naming_out_of_memory(path, e);
  }
}

Volume read_volume_as_float(const std::string& path, ReadOptions options) {
  options.as_float = true;
  return read_volume(path, options);
}

void write_volume(const std::string& path, const at::Tensor& data, const Affine& affine,
                  const WriteOptions& options) {
  auto fail = [&](const std::string& message) {
    throw std::invalid_argument("write_volume: " + path + ": " + message);
  };
  if (!data.defined()) fail("data is an undefined tensor");
  if (data.dim() != 3 && data.dim() != 4) {
    fail("data has " + std::to_string(data.dim()) + " dims; expected X x Y x Z or C x X x Y x Z");
  }
  NiftiDatatype type;
  switch (data.scalar_type()) {
    case at::kByte:
      type = NiftiDatatype::kUint8;
      break;
    case at::kChar:
      type = NiftiDatatype::kInt8;
      break;
    case at::kShort:
      type = NiftiDatatype::kInt16;
      break;
    case at::kInt:
      type = NiftiDatatype::kInt32;
      break;
    case at::kLong:
      type = NiftiDatatype::kInt64;
      break;
    case at::kFloat:
      type = NiftiDatatype::kFloat32;
      break;
    case at::kDouble:
      type = NiftiDatatype::kFloat64;
      break;
    default:
      fail(std::string("dtype ") + c10::toString(data.scalar_type()) +
           " cannot be written; use uint8, int8, int16, int32, int64, float32 or float64");
  }
  at::Tensor t = data.device().is_cpu() ? data : data.to(at::kCPU);
  if (t.dim() == 3) t = t.unsqueeze(0);
  t = t.contiguous();
  const std::array<int64_t, 4> cxyz{t.size(0), t.size(1), t.size(2), t.size(3)};
  for (int64_t i = 0; i < 4; ++i) {
    if (cxyz[static_cast<size_t>(i)] < 1)
      fail("data has an empty dimension (size " + std::to_string(cxyz[static_cast<size_t>(i)]) +
           ")");
  }
  NiftiWriteSpec spec;
  spec.shape = {cxyz[1], cxyz[2], cxyz[3]};
  if (cxyz[0] > 1) spec.shape.push_back(cxyz[0]);
  spec.datatype = type;
  spec.affine = affine;
  const bool fits_nifti1 =
      std::all_of(spec.shape.begin(), spec.shape.end(), [](int64_t d) { return d <= 32767; });
  if (options.nifti_version == 1 && !fits_nifti1)
    fail("shape " + shape_text(spec.shape) +
         ": NIfTI-1 stores dims up to 32767; nifti_version=2 (or 0, the default, to choose)");
  spec.version = options.nifti_version != 0 ? options.nifti_version : fits_nifti1 ? 1 : 2;
  spec.spacing_mm = options.spacing_mm;
  spec.descrip = options.descrip;
  const auto nbytes = static_cast<size_t>(t.numel() * element_size(type));
  ByteBuffer buffer = ByteBuffer::allocate(nbytes);
  const void* src = t.data_ptr();
  uint8_t* dst = buffer.data.get();
  for_rows(cxyz[2], row_grain(cxyz), options.parallel,
           [&](int64_t jb, int64_t je) { c_order_to_file_order(src, dst, type, cxyz, jb, je); });
  NiftiWriteOptions write_options;
  write_options.gzip_level = options.gzip_level;
  write_nifti(path, spec, buffer.data.get(), nbytes, write_options);
}

}  // namespace volshard
