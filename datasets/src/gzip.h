#pragma once
// gzip for NIfTI files (private to volume_io).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "volshard/datasets/nifti_header.h"

namespace volshard::detail {

/// The gzip magic (1f 8b) at the start.
inline bool is_gzip(const uint8_t* data, size_t size) {
  return size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
}

/// Decompresses the NIfTI header that starts a gzip stream: up to `max_bytes`
/// of output (fewer if the stream is shorter). Throws naming the path on
/// corrupt data; a short result is left to the header parser to report.
std::vector<uint8_t> gunzip_prefix(const uint8_t* data, size_t size, size_t max_bytes,
                                   const std::string& path);

/// Fills file.header and file.bytes (at least vox_offset + data bytes) from a
/// whole gzip file in memory.
void gunzip_nifti(const uint8_t* data, size_t size, const std::string& path,
                  const NiftiReadOptions& options, NiftiFile& file);

}  // namespace volshard::detail
