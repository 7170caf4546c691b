#pragma once
// A picture of how a sampler assigns samples to ranks, epoch by epoch.

#include <cstdint>
#include <string>
#include <vector>

namespace volshard::inspect {

struct PngRow {
  int64_t epoch = 0;
  std::vector<std::vector<int64_t>> shards;  ///< every rank's indices
};

/// Writes a PNG: one row per epoch, one cell per sample index 0..n-1, coloured
/// by the rank that reads it (the lowest, if several). A sample read twice
/// (padding) carries a white dot; one that no rank reads (dropped) is light
/// grey with a cross; one consumed before a resume (`consumed_before`) is dark
/// grey. A legend of rank colours runs along the top.
/// Throws std::invalid_argument if n > 4096 or 0, std::runtime_error naming the
/// path if it cannot be written.
void write_assignment_png(const std::string& path, int64_t n, int64_t world_size,
                          const std::vector<PngRow>& rows,
                          const std::vector<int64_t>& consumed_before);

}  // namespace volshard::inspect
