#pragma once
// What `sampler-inspect` prints: per-rank shards, batches, fingerprints and
// verdicts for a range of epochs. The tool's main() only parses flags.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "volshard/sampler/distributed_sampler.h"

namespace volshard::inspect {

enum class Format { kTable, kJson, kCsv, kSummary };

/// "table" | "json" | "csv" | "summary"; throws std::invalid_argument naming the value.
Format parse_format(const std::string& text);

struct EpochRange {
  int64_t first = 0;
  int64_t last = 0;  ///< inclusive
};
/// "A:B" (inclusive, A <= B); throws std::invalid_argument naming the text.
EpochRange parse_epoch_range(const std::string& text);

struct InspectOptions {
  DistributedSamplerOptions sampler;  ///< rank is ignored; see `rank`
  std::optional<int64_t> rank;        ///< show only this rank
  EpochRange epochs;
  int64_t batch_size = 0;  ///< 0: no batches
  bool drop_last_batch = false;
  Format format = Format::kTable;
  bool verify = false;
  /// Show what each rank reads next from this saved state (its epoch only),
  /// at sampler.num_replicas ranks (the saved world size, or another one).
  std::optional<SamplerState> resume;
  bool seeds = false;    ///< print derived per-rank and per-sample seeds
  std::string png_path;  ///< non-empty: also draw the assignment as a PNG
};

/// Options that show a saved state: the state's sampler settings and epoch,
/// at `world_size` ranks (0: the saved world size).
InspectOptions options_from_state(const SamplerState& state, int64_t world_size);

/// FNV-1a 64 over each index written as 8 little-endian bytes (int64), the
/// fingerprint `--format summary` prints. Empty list: 0xcbf29ce484222325.
uint64_t fingerprint(const std::vector<int64_t>& indices);

/// Prints the report to `out`; verdict lines go to `out` for table and summary
/// and to `verdicts` for json and csv, which stay machine-readable.
/// Returns 0, or 1 when --verify found a failure. Throws std::invalid_argument
/// for options the sampler rejects.
int run(const InspectOptions& options, std::ostream& out, std::ostream& verdicts);

}  // namespace volshard::inspect
