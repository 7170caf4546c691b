#pragma once
// The persistent cache's entry files: key derivation, writing, and a reader
// that checks every byte before anything is used.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "volshard/datasets/content_hash.h"
#include "volshard/transforms/sample.h"

namespace volshard::detail {

/// What an entry is for: the prepare configuration and its files' contents.
struct EntryKey {
  std::string config_key;
  std::vector<std::string> files;   ///< as item_files gave them (paths are not part of the key)
  std::vector<FileDigest> digests;  ///< one per file
  uint64_t hash = 0;                ///< XXH64 of the format version, config_key and digests
};

/// Digests the files and derives the key; throws std::runtime_error naming a
/// file that cannot be read, std::invalid_argument for an empty list.
EntryKey make_entry_key(const std::string& config_key, std::vector<std::string> files,
                        int64_t index);

/// "<16 hex digits>.vscache"
std::string entry_file_name(uint64_t hash);

/// An entry that exists but must not be used; what() says why.
class BadEntry : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Writes the entry atomically (write_file_atomic, temporary file then rename,
/// without fsync: read_entry refuses a torn file); throws std::runtime_error
/// naming the path on failure, std::invalid_argument for a tensor type the
/// format does not hold.
void write_entry(const std::string& path, const EntryKey& key, int64_t index, const Sample& sample);

/// nullopt if there is no file at `path`; the sample if the entry is complete,
/// intact and made for `key`; throws BadEntry otherwise. meta.index and
/// meta.source are mapped to `index` and key.files when they named the writer's.
std::optional<Sample> read_entry(const std::string& path, const EntryKey& key, int64_t index);

}  // namespace volshard::detail
