// Properties of the sampler over random n in [0, 10^4], W in [1, 64], seed,
// epoch, mode and shuffle. Replay a failure with RC_PARAMS="seed=N".
#include "volshard/sampler/distributed_sampler.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

namespace volshard {
namespace {

using Shards = std::vector<std::vector<int64_t>>;

struct Config {
  DistributedSamplerOptions options;
  int64_t epoch = 0;
};

void showValue(const Config& c, std::ostream& os) {
  os << "n=" << c.options.dataset_size << " W=" << c.options.num_replicas
     << " rank=" << c.options.rank << " mode=" << to_string(c.options.mode)
     << " shuffle=" << c.options.shuffle << " seed=" << c.options.seed << " epoch=" << c.epoch;
}

rc::Gen<Config> gen_config(int64_t max_n = 10000) {
  return rc::gen::exec([max_n] {
    Config c;
    c.options.mode =
        *rc::gen::element(PartitionMode::kPad, PartitionMode::kDropLast, PartitionMode::kUneven);
    c.options.num_replicas = *rc::gen::inRange<int64_t>(1, 65);
    const int64_t min_n = c.options.mode == PartitionMode::kUneven ? c.options.num_replicas : 0;
    c.options.dataset_size = *rc::gen::inRange<int64_t>(min_n, std::max(min_n, max_n) + 1);
    c.options.shuffle = *rc::gen::arbitrary<bool>();
    c.options.seed = *rc::gen::arbitrary<uint64_t>();
    c.epoch = *rc::gen::inRange<int64_t>(0, 1000);
    return c;
  });
}

Shards all_ranks(DistributedSamplerOptions o, int64_t epoch) {
  Shards out;
  for (o.rank = 0; o.rank < o.num_replicas; ++o.rank) {
    DistributedSampler s(o);
    s.set_epoch(epoch);
    out.push_back(s.indices().to_vector());
  }
  return out;
}

std::map<int64_t, int64_t> multiset(const Shards& shards) {
  std::map<int64_t, int64_t> m;
  for (const auto& s : shards) {
    for (int64_t i : s) ++m[i];
  }
  return m;
}

RC_GTEST_PROP(DistributedSamplerProperty, UnevenShardsAreDisjointAndCoverEveryIndexOnce, ()) {
  Config c = *gen_config();
  c.options.mode = PartitionMode::kUneven;
  RC_PRE(c.options.dataset_size >= c.options.num_replicas);
  const auto m = multiset(all_ranks(c.options, c.epoch));
  RC_ASSERT(static_cast<int64_t>(m.size()) == c.options.dataset_size);
  for (const auto& [index, count] : m) {
    RC_ASSERT(index >= 0 && index < c.options.dataset_size);
    RC_ASSERT(count == 1);
  }
}

RC_GTEST_PROP(DistributedSamplerProperty, PadUnionIsThePermutationPlusItsWrappedHead, ()) {
  Config c = *gen_config();
  c.options.mode = PartitionMode::kPad;
  const int64_t n = c.options.dataset_size;
  const auto m = multiset(all_ranks(c.options, c.epoch));
  std::map<int64_t, int64_t> expected;
  const auto perm = c.options.shuffle ? randperm(n, epoch_seed(c.options.seed, c.epoch))
                                      : std::vector<uint32_t>();
  const auto perm_at = [&](int64_t p) {
    return c.options.shuffle ? static_cast<int64_t>(perm[p]) : p;
  };
  const int64_t total =
      n == 0 ? 0
             : (n + c.options.num_replicas - 1) / c.options.num_replicas * c.options.num_replicas;
  for (int64_t p = 0; p < n; ++p) ++expected[perm_at(p)];
  for (int64_t k = 0; k < total - n; ++k) ++expected[perm_at(k % n)];
  RC_ASSERT(m == expected);
}

RC_GTEST_PROP(DistributedSamplerProperty, DropLastUnionIsThePermutationHead, ()) {
  Config c = *gen_config();
  c.options.mode = PartitionMode::kDropLast;
  const int64_t n = c.options.dataset_size;
  const int64_t total = n / c.options.num_replicas * c.options.num_replicas;
  const auto perm = randperm(n, epoch_seed(c.options.seed, c.epoch));
  std::map<int64_t, int64_t> expected;
  for (int64_t p = 0; p < total; ++p)
    ++expected[c.options.shuffle ? static_cast<int64_t>(perm[p]) : p];
  RC_ASSERT(multiset(all_ranks(c.options, c.epoch)) == expected);
}

RC_GTEST_PROP(DistributedSamplerProperty, ShardSizesAreEqualExceptUnevenWhereLowerRanksHoldOneMore,
              ()) {
  const Config c = *gen_config();
  const Shards s = all_ranks(c.options, c.epoch);
  for (size_t r = 1; r < s.size(); ++r) {
    if (c.options.mode == PartitionMode::kUneven) {
      RC_ASSERT(s[r - 1].size() == s[r].size() || s[r - 1].size() == s[r].size() + 1);
    } else {
      RC_ASSERT(s[r - 1].size() == s[r].size());
    }
  }
  for (size_t r = 0; r < s.size(); ++r) {
    DistributedSamplerOptions o = c.options;
    o.rank = static_cast<int64_t>(r);
    RC_ASSERT(DistributedSampler(o).num_samples() == static_cast<int64_t>(s[r].size()));
  }
}

RC_GTEST_PROP(DistributedSamplerProperty, EachRankAloneEqualsItsStrideOfTheGlobalOrder, ()) {
  const Config c = *gen_config();
  DistributedSamplerOptions o = c.options;
  o.rank = *rc::gen::inRange<int64_t>(0, o.num_replicas);
  DistributedSampler alone(o);
  alone.set_epoch(c.epoch);
  const ShardLayout layout = ShardLayout::make(o.dataset_size, o.num_replicas, o.mode);
  const auto order = global_order(layout, o.shuffle, o.seed, c.epoch);
  std::vector<int64_t> expected;
  for (int64_t p = o.rank; p < layout.total_size; p += o.num_replicas) expected.push_back(order[p]);
  RC_ASSERT(alone.indices().to_vector() == expected);
  RC_ASSERT(all_ranks(o, c.epoch)[static_cast<size_t>(o.rank)] == expected);
}

RC_GTEST_PROP(DistributedSamplerProperty, SetEpochAgainReproducesTheEpoch, ()) {
  const Config c = *gen_config();
  DistributedSamplerOptions o = c.options;
  o.rank = *rc::gen::inRange<int64_t>(0, o.num_replicas);
  DistributedSampler s(o);
  s.set_epoch(c.epoch);
  const auto first = s.indices().to_vector();
  s.set_epoch(c.epoch + *rc::gen::inRange<int64_t>(1, 5));
  (void)s.indices();
  s.set_epoch(c.epoch);
  RC_ASSERT(s.indices().to_vector() == first);
}

RC_GTEST_PROP(DistributedSamplerProperty, ConsecutiveEpochsReshuffleFromEightSamples, ()) {
  Config c = *gen_config();
  c.options.shuffle = true;
  RC_PRE(c.options.dataset_size >= 8);
  const ShardLayout layout =
      ShardLayout::make(c.options.dataset_size, c.options.num_replicas, c.options.mode);
  RC_ASSERT(randperm(c.options.dataset_size, epoch_seed(c.options.seed, c.epoch)) !=
            randperm(c.options.dataset_size, epoch_seed(c.options.seed, c.epoch + 1)));
  if (layout.total_size >= 8) {  // drop_last may keep nothing: n = 8, W = 64
    RC_ASSERT(all_ranks(c.options, c.epoch) != all_ranks(c.options, c.epoch + 1));
  }
}

// PyTorch 2's inside-out shuffle runs only from n = 214,748,364; here both
// algorithms' fast per-rank paths meet their plain references at small n.
RC_GTEST_PROP(DistributedSamplerProperty, EitherShuffleShardEqualsItsReferenceStride, ()) {
  Config c = *gen_config(3000);
  c.options.shuffle = true;
  c.options.rank = *rc::gen::inRange<int64_t>(0, c.options.num_replicas);
  const bool inside_out = *rc::gen::arbitrary<bool>();
  const auto perm = detail::reference_randperm(c.options.dataset_size,
                                               epoch_seed(c.options.seed, c.epoch), inside_out);
  const ShardLayout layout =
      ShardLayout::make(c.options.dataset_size, c.options.num_replicas, c.options.mode);
  std::vector<int64_t> expected;
  for (int64_t p = c.options.rank; p < layout.total_size; p += c.options.num_replicas) {
    expected.push_back(perm[static_cast<size_t>(p % c.options.dataset_size)]);
  }
  RC_ASSERT(detail::shard_indices(c.options, c.epoch, inside_out) == expected);
}

RC_GTEST_PROP(DistributedSamplerProperty, RandpermIsAPermutation, ()) {
  const auto n = *rc::gen::inRange<int64_t>(0, 10001);
  const auto seed = *rc::gen::arbitrary<uint64_t>();
  auto p = detail::reference_randperm(n, seed, *rc::gen::arbitrary<bool>());
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < n; ++i) RC_ASSERT(p[static_cast<size_t>(i)] == static_cast<uint32_t>(i));
}

}  // namespace
}  // namespace volshard
