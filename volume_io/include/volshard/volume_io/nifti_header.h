#pragma once
// NIfTI-1 and NIfTI-2 single files (.nii, .nii.gz): header parsing with
// nibabel 5.0's rules, the raw voxel bytes, and writing. Standard library only
// (plus ISA-L/libdeflate/zlib inside the .cpp): also compiled by clang into the
// libFuzzer target tests/fuzz/nifti_fuzzer.cpp.
//
// What "nibabel's rules" means here (nibabel/nifti1.py, analyze.py, nifti2.py):
//  * NIfTI-1 vs NIfTI-2 and the byte order come from sizeof_hdr (348 / 540,
//    native or byte-swapped); the magic must then be "n+1" / "n+2" (single file).
//  * The load-time fixes nibabel's check_fix applies are applied too:
//    pixdim[1..3] == 0 -> 1, negative -> abs; pixdim[0] (qfac) not +-1 -> 1;
//    qform_code / sform_code outside 0..5 -> 0. Where nibabel raises (unknown
//    datatype, NIfTI-2 EOL bytes corrupted, 0 < vox_offset < 352, a valid
//    scl_slope with a non-finite scl_inter), we throw.
//  * Shape = dim[1..dim[0]], with NIfTI-1's FreeSurfer hacks (dim[1..3] ==
//    (-1,1,1) -> glmin voxels; (27307,1,6) -> (163842,1,1)).
//  * affine = nibabel's img.affine: sform if sform_code != 0, else qform if
//    qform_code != 0, else the base affine (x flipped, origin at the centre).
//    The qform is evaluated as nibabel does, in long double, from the header's
//    float32 (NIfTI-1) or float64 (NIfTI-2) parameters.
// Where we are stricter than nibabel (each an error naming the path and the
// field): dim[0] outside 1..7, a used dim < 1, more than 4 non-trivial
// dimensions, vox_offset 0 or beyond the file, voxel counts above the limit,
// datatypes other than the nine below, pair files (magic "ni1"/"ni2").

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "volshard/core/affine.h"
#include "volshard/core/file_io.h"  // ByteBuffer

namespace volshard {

/// The NIfTI datatype codes volshard reads and writes.
enum class NiftiDatatype : int16_t {
  kUint8 = 2,
  kInt16 = 4,
  kInt32 = 8,
  kFloat32 = 16,
  kFloat64 = 64,
  kInt8 = 256,
  kUint16 = 512,
  kUint32 = 768,
  kInt64 = 1024,
};

/// "uint8", "int16", ...: numpy's names.
std::string to_string(NiftiDatatype type);
/// Bytes per voxel: 1, 2, 4 or 8.
int64_t element_size(NiftiDatatype type);
bool is_floating(NiftiDatatype type);

/// A parsed, validated header. Values are the file's, widened (NIfTI-1 float32
/// -> double exactly), after nibabel's load-time fixes.
struct NiftiHeader {
  int version = 1;          ///< 1 (348-byte header) or 2 (540-byte header)
  bool big_endian = false;  ///< byte order of the header and the voxels on disk
  int64_t header_size = 348;
  std::array<int64_t, 8> dim{};  ///< raw dim[0..7] as stored
  /// nibabel's get_data_shape(): dim[1..ndim] after the FreeSurfer hacks.
  std::vector<int64_t> shape;
  NiftiDatatype datatype = NiftiDatatype::kUint8;
  int64_t bitpix = 8;                  ///< as stored (nibabel ignores a wrong bitpix; so do we)
  int64_t vox_offset = 0;              ///< bytes from the start of the (decompressed) file
  std::array<double, 8> pixdim{};      ///< after the fixes; pixdim[0] = qfac
  std::array<double, 8> raw_pixdim{};  ///< as stored (nibabel turns 0 into 1, negatives positive)
  double scl_slope = 0;                ///< raw; see has_scaling()
  double scl_inter = 0;
  double cal_min = 0, cal_max = 0;
  int64_t qform_code = 0, sform_code = 0;  ///< after the fixes (0 if not in 0..5)
  double quatern_b = 0, quatern_c = 0, quatern_d = 0;
  double qoffset_x = 0, qoffset_y = 0, qoffset_z = 0;
  std::array<std::array<double, 4>, 3> srow{};  ///< srow_x, srow_y, srow_z
  int64_t intent_code = 0;
  std::array<double, 3> intent_p{};
  std::string intent_name;  ///< up to 16 chars, NUL-trimmed
  std::string descrip;      ///< up to 80 chars, NUL-trimmed
  int64_t xyzt_units = 0;
  Affine affine{};  ///< nibabel's img.affine

  int64_t num_voxels() const;  ///< product of shape
  int64_t data_bytes() const { return num_voxels() * element_size(datatype); }
  /// nibabel's get_slope_inter() is not (None, None) and not (1, 0), so that
  /// np.asanyarray(img.dataobj) is scaled (and floating): scl_slope finite
  /// and != 0, and (scl_slope, scl_inter) != (1, 0).
  bool has_scaling() const;
  /// Voxel spacing in mm: pixdim[1..3] (after the fixes), what
  /// nibabel's header.get_zooms()[:3] gives for a 3D or 4D image.
  std::array<double, 3> spacing_mm() const { return {pixdim[1], pixdim[2], pixdim[3]}; }
};

struct NiftiReadOptions {
  /// Refuse volumes with more voxels than this (before allocating anything).
  int64_t max_voxels = int64_t{4} << 30;
};

/// Parses and validates the first `size` bytes of a (decompressed) NIfTI file.
/// `file_size` is the size of the whole decompressed file when known (checks
/// vox_offset + data against it), or -1. `path` only names the file in
/// messages. Throws std::runtime_error "<path>: <field>=<value> ..." on bad
/// input; never reads outside [data, data + size).
NiftiHeader parse_nifti_header(const uint8_t* data, size_t size, const std::string& path,
                               int64_t file_size = -1, const NiftiReadOptions& options = {});

/// nibabel's base affine for this shape and pixdim (no sform, no qform).
Affine nifti_base_affine(const NiftiHeader& header);
/// nibabel's Nifti1Header.get_qform() (used when qform_code != 0).
Affine nifti_qform_affine(const NiftiHeader& header);

/// A whole NIfTI file, decompressed: header plus the voxel bytes in file
/// order (i fastest, last dimension slowest) and file byte order.
struct NiftiFile {
  std::string path;
  NiftiHeader header;
  /// The decompressed file from byte 0: header, extensions, voxels. May be
  /// longer than needed (trailing bytes are ignored, as nibabel does).
  ByteBuffer bytes;
  const uint8_t* voxels() const { return bytes.data.get() + header.vox_offset; }
  size_t voxel_bytes() const { return static_cast<size_t>(header.data_bytes()); }
};

/// Reads a .nii or a gzip-compressed .nii (detected by the gzip magic, not
/// the name). Gzip: one call into a buffer sized from the header's vox_offset
/// + data and the gzip ISIZE trailer, by ISA-L for files that inflate to 3x
/// their size or more (noise-free volumes, labels), else libdeflate;
/// multi-member streams and trailers that disagree go through streaming zlib.
/// CRCs are checked.
/// Never reads a sibling file. Throws std::runtime_error naming the path (and
/// the field) on a missing file, bad header, truncated or corrupt data.
/// Thread-safe.
NiftiFile read_nifti(const std::string& path, const NiftiReadOptions& options = {});

/// Rethrows a std::bad_alloc met while reading `path` as an OutOfMemoryError
/// naming the file and what its header asks ("big.nii.gz: its header gives
/// 1600 x 1600 x 1600 int16 voxels (8.2 GB): could not allocate ..."). For
/// every reader of volumes.
[[noreturn]] void throw_read_out_of_memory(const std::string& path, const std::bad_alloc& e);

/// Reads only as much of the file as the header needs (gzip: inflates the
/// first bytes only) and validates it, including vox_offset against the file
/// size for uncompressed files.
NiftiHeader read_nifti_header(const std::string& path, const NiftiReadOptions& options = {});

/// Same as read_nifti, on bytes already in memory (the fuzz target's entry).
NiftiFile parse_nifti_file(const uint8_t* data, size_t size, const std::string& path,
                           const NiftiReadOptions& options = {});

/// What write_nifti stores besides the voxels.
struct NiftiWriteSpec {
  std::vector<int64_t> shape;  ///< 1..7 dims, each in [1, 2^15-1] for NIfTI-1
  NiftiDatatype datatype = NiftiDatatype::kFloat32;
  Affine affine{};  ///< stored as sform (code 2, aligned) and, where representable, qform
  int version = 1;  ///< 1: float32 header fields; 2: float64 (the affine round-trips exactly)
  /// pixdim[1..3]; empty -> the affine's column norms (what nibabel writes)
  std::vector<double> spacing_mm;
  std::string descrip;
  /// Stored scl_slope / scl_inter: readers give x * slope + inter. NaN, the
  /// default, is "no scaling", as nibabel writes. A finite, non-zero slope
  /// needs a finite inter (nibabel refuses to read anything else).
  double scl_slope = std::numeric_limits<double>::quiet_NaN();
  double scl_inter = std::numeric_limits<double>::quiet_NaN();
};

/// A header for the spec, as bytes (348 + 4 extension bytes for NIfTI-1, 540 +
/// 4 for NIfTI-2), little-endian, vox_offset = 352 / 544, the spec's
/// scl_slope/scl_inter (NaN: no scaling). qform from the affine as nibabel's
/// set_qform; qform_code = 2 unless the affine's 3x3 has shear (then 0).
/// A 4D shape (X, Y, Z, channels) is stored with dim[0] = 4 and pixdim[4] = 1.
std::vector<uint8_t> encode_nifti_header(const NiftiWriteSpec& spec);

struct NiftiWriteOptions {
  /// -1: decide by the name (".gz" -> gzip); 0: no gzip; 1..12: libdeflate level.
  int gzip_level = -1;
};

/// Writes header + voxels (file order, little-endian, `size` bytes) to `path`
/// atomically: a temporary file beside it, fsync, rename. On any failure
/// (disk full, no permission) the temporary is removed, `path` is untouched
/// and std::runtime_error names the path and the cause.
void write_nifti(const std::string& path, const NiftiWriteSpec& spec, const void* voxels,
                 size_t size, const NiftiWriteOptions& options = {});

/// gzip of `data` at `level` (libdeflate), as write_nifti compresses.
std::vector<uint8_t> gzip_compress(const uint8_t* data, size_t size, int level);

}  // namespace volshard
