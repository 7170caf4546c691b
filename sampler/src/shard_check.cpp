#include "volshard/sampler/shard_check.h"

#include <algorithm>
#include <sstream>

namespace volshard {
namespace {

// Smallest rank holding each sample, or -1 when no rank does (dropped).
std::vector<int64_t> owner_of(int64_t n, const std::vector<std::vector<int64_t>>& shards) {
  std::vector<int64_t> owner(static_cast<size_t>(n), -1);
  for (size_t r = shards.size(); r-- > 0;) {
    for (const int64_t i : shards[r]) owner[static_cast<size_t>(i)] = static_cast<int64_t>(r);
  }
  return owner;
}

}  // namespace

int64_t count_changed_owner(int64_t n, const std::vector<std::vector<int64_t>>& before,
                            const std::vector<std::vector<int64_t>>& now) {
  const auto owner_before = owner_of(n, before);
  const auto owner_now = owner_of(n, now);
  int64_t changed = 0;
  for (size_t i = 0; i < owner_now.size(); ++i) changed += owner_before[i] != owner_now[i] ? 1 : 0;
  return changed;
}

std::vector<std::vector<int64_t>> all_shards(const DistributedSamplerOptions& options,
                                             int64_t epoch, int64_t start) {
  std::vector<std::vector<int64_t>> shards;
  const SamplerState state = SamplerState::at(options, epoch, start);
  for (int64_t r = 0; r < options.num_replicas; ++r) {
    shards.push_back(DistributedSampler::restore(state, r, options.num_replicas).indices());
  }
  return shards;
}

EpochCheck check_epoch(const DistributedSamplerOptions& options, int64_t epoch,
                       const std::vector<std::vector<int64_t>>& shards,
                       const std::vector<std::vector<int64_t>>* previous, int64_t start) {
  EpochCheck check;
  check.epoch = epoch;
  const auto fail = [&](const std::string& what) { check.failures.push_back(what); };
  const ShardLayout layout =
      ShardLayout::make(options.dataset_size, options.num_replicas, options.mode, start);
  const int64_t n = layout.dataset_size;
  const int64_t w = layout.num_replicas;
  if (static_cast<int64_t>(shards.size()) != w) {
    fail("expected " + std::to_string(w) + " shards, got " + std::to_string(shards.size()));
    return check;
  }

  // Each rank alone equals its stride of the reference global order.
  const std::vector<int64_t> order =
      global_order(layout, options.shuffle, options.seed, epoch, options.randperm);
  for (int64_t r = 0; r < w; ++r) {
    const auto& shard = shards[static_cast<size_t>(r)];
    std::vector<int64_t> expected;
    for (int64_t pos = r; pos < layout.total_size; pos += w) {
      expected.push_back(order[static_cast<size_t>(pos)]);
    }
    if (shard != expected) fail("rank " + std::to_string(r) + " differs from order[r::W]");
    if (static_cast<int64_t>(shard.size()) != layout.num_samples(r)) {
      fail("rank " + std::to_string(r) + " has " + std::to_string(shard.size()) +
           " samples, expected " + std::to_string(layout.num_samples(r)));
    }
  }

  // Sizes: equal, or in kUneven differing by at most one with lower ranks larger.
  for (int64_t r = 1; r < w; ++r) {
    const auto prev = static_cast<int64_t>(shards[static_cast<size_t>(r - 1)].size());
    const auto cur = static_cast<int64_t>(shards[static_cast<size_t>(r)].size());
    const bool good =
        options.mode == PartitionMode::kUneven ? (prev == cur || prev == cur + 1) : prev == cur;
    if (!good)
      fail("shard sizes of ranks " + std::to_string(r - 1) + " and " + std::to_string(r) +
           " break the mode's rule");
  }

  // The multiset union, with what was consumed before a resume, follows the mode.
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  if (start > 0) {
    const auto perm = global_order(ShardLayout::make(n, 1, PartitionMode::kPad), options.shuffle,
                                   options.seed, epoch, options.randperm);
    for (int64_t p = 0; p < start; ++p) ++count[static_cast<size_t>(perm[static_cast<size_t>(p)])];
  }
  int64_t seen = 0;
  for (const auto& shard : shards) {
    for (const int64_t i : shard) {
      if (i < 0 || i >= n) {
        fail("index " + std::to_string(i) + " outside [0, " + std::to_string(n) + ")");
        return check;
      }
      ++count[static_cast<size_t>(i)];
      ++seen;
    }
  }
  const int64_t missing = std::count(count.begin(), count.end(), 0);
  if (seen != layout.total_size) {
    fail("shards hold " + std::to_string(seen) +
         " positions, expected total_size=" + std::to_string(layout.total_size));
  }
  switch (options.mode) {
    case PartitionMode::kUneven:
    case PartitionMode::kDropLast: {
      const int64_t repeated =
          std::count_if(count.begin(), count.end(), [](int64_t c) { return c > 1; });
      if (repeated > 0) fail(std::to_string(repeated) + " samples on more than one position");
      check.dropped = missing;
      if (options.mode == PartitionMode::kUneven && missing > 0) {
        fail(std::to_string(missing) + " samples on no rank");
      }
      break;
    }
    case PartitionMode::kPad:
      if (missing > 0) fail(std::to_string(missing) + " samples on no rank");
      check.padded = layout.total_size - layout.remaining();
      break;
  }

  // set_epoch(e) again reproduces epoch e, after another epoch was computed.
  if (start == 0) {
    DistributedSamplerOptions o = options;
    o.rank = w - 1;
    DistributedSampler again(o);
    again.set_epoch(epoch + 1);
    (void)again.indices();
    again.set_epoch(epoch);
    if (again.indices().to_vector() != shards.back()) fail("set_epoch(e) did not reproduce e");
  }

  if (previous != nullptr && previous->size() == shards.size()) {
    check.changed_rank = count_changed_owner(n, *previous, shards);
    if (options.shuffle && n >= 8 && *previous == shards) {
      fail("order identical to the previous epoch's");
    }
  }
  return check;
}

}  // namespace volshard
