#pragma once
// gzip decompression for NIfTI files (private to datasets): knows gzip, not
// NIfTI; the header parser says how many bytes it needs.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "volshard/core/file_io.h"  // ByteBuffer

namespace volshard::detail {

/// The gzip magic (1f 8b) at the start.
inline bool is_gzip(const uint8_t* data, size_t size) {
  return size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
}

/// Decompresses the NIfTI header that starts a gzip stream: up to `max_bytes`
/// of output (fewer if the stream is complete and shorter). Throws naming the
/// path on corrupt data or a stream cut before `max_bytes` ("truncated gzip
/// stream"); a complete but short result is left to the header parser.
std::vector<uint8_t> gunzip_prefix(const uint8_t* data, size_t size, size_t max_bytes,
                                   const std::string& path);

/// Deflate cannot expand data by more than 1032:1 (258-byte matches in
/// 2-bit codes); a header promising more than that from the file is lying.
constexpr uint64_t kMaxDeflateRatio = 1032;

/// Who inflates a gzip file that is one member whose ISIZE agrees with the
/// header: ISA-L or libdeflate, in one call into the sized buffer; kZlib is
/// the streaming fallback for everything else (multi-member, disagreeing
/// ISIZE, corrupt or truncated data), which also words the errors.
enum class Inflater { kLibdeflate, kIsal, kZlib };

/// ISA-L for ISIZE / compressed size in [kIsalMinRatio, kIsalMaxRatio), from
/// ten files measured on 2026-11-23 (gzip.cpp): ISA-L is faster on
/// compressible zlib streams (nibabel's level 1: noise-free 128^3 at ratio
/// ~80, 0.75 ms to libdeflate's 1.13; CT-like int16 at ratio 3.6-83, 5-29 %
/// faster) and slower on noisy ones (ratio 1.1: 22.6 ms to 22.2) and on
/// near-constant streams (libdeflate-written spheres at ratio 116 and labels
/// at 205-271, zlib level 6-9 at 190-226: 1.3-2x slower).
constexpr uint64_t kIsalMinRatio = 3;
constexpr uint64_t kIsalMaxRatio = 100;

/// The per-file choice, from the trailer alone (one division).
/// `isize`: the decompressed size the trailer gives.
constexpr Inflater pick_inflater(uint64_t isize, size_t compressed_bytes) {
  if (compressed_bytes == 0) return Inflater::kLibdeflate;
  const uint64_t ratio = isize / compressed_bytes;
  return ratio >= kIsalMinRatio && ratio < kIsalMaxRatio ? Inflater::kIsal : Inflater::kLibdeflate;
}

/// Inflates a whole gzip file in memory whose output must hold at least
/// `needed` bytes (the header's vox_offset + data bytes), into a buffer sized
/// from `needed` and the ISIZE trailer: ISA-L or libdeflate (pick_inflater) in
/// one call, streaming zlib for multi-member or disagreeing streams; what
/// ISA-L refuses goes to libdeflate, what libdeflate refuses to zlib. The
/// result may be longer than `needed`. Throws std::runtime_error naming the
/// path on truncated or corrupt data.
/// Thread-safe (one decompressor state per thread).
ByteBuffer gunzip_sized(const uint8_t* data, size_t size, uint64_t needed, const std::string& path);

/// For tests: as above, with `first` in place of pick_inflater's choice
/// (kZlib: the streaming path alone). `*used`, when given, is who produced
/// the result: `first`, or a fallback after it refused the stream.
ByteBuffer gunzip_sized(const uint8_t* data, size_t size, uint64_t needed, const std::string& path,
                        Inflater first, Inflater* used = nullptr);

/// For a gzip file that cannot hold `needed` bytes (more than
/// kMaxDeflateRatio times its size): inflates it, keeping nothing, and throws
/// what is wrong: "truncated gzip stream" when it is cut, else how many bytes
/// the complete stream holds.
[[noreturn]] void fail_short_gzip(const uint8_t* data, size_t size, uint64_t needed,
                                  const std::string& path);

}  // namespace volshard::detail
