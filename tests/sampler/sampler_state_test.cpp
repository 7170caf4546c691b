// Resumable and elastic sampler state, and passes without set_epoch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "sampler_test_util.h"
#include "volshard/core/log.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/sampler/shard_check.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;
using Shards = std::vector<std::vector<int64_t>>;

// Seed 3 throughout, so nothing here leans on seed 0.
DistributedSamplerOptions options(int64_t n, int64_t w, int64_t rank, PartitionMode mode,
                                  uint64_t seed = 3) {
  return test::sampler_options(n, w, rank, mode, true, seed);
}

// Captures volshard::warn for the lifetime of the object.
struct WarningCapture {
  std::vector<std::string> messages;
  WarningHandler previous;
  WarningCapture() {
    previous = set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~WarningCapture() { set_warning_handler(previous); }
};

TEST(SamplerStateTest, RoundTripsThroughJson) {
  DistributedSampler s(options(1000, 4, 2, PartitionMode::kDropLast, (1ULL << 63) + 5));
  s.set_epoch(7);
  s.set_position(30);
  const SamplerState state = s.state();
  EXPECT_EQ(state.consumed, 120);
  EXPECT_EQ(state.epoch, 7);
  EXPECT_EQ(state.world_size, 4);
  const std::string json = state.to_json();
  EXPECT_THAT(json, HasSubstr("\"version\":1"));
  EXPECT_THAT(json, HasSubstr("\"mode\":\"drop_last\""));
  EXPECT_EQ(SamplerState::from_json(json), state);
}

TEST(SamplerStateTest, RejectsBadJsonNamingTheField) {
  const std::string good = SamplerState{}.to_json();
  const auto error = [](const std::string& text) -> std::string {
    try {
      SamplerState::from_json(text);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error("{"), HasSubstr("not valid JSON"));
  EXPECT_THAT(error("[1]"), HasSubstr("expected a JSON object"));
  std::string missing = good;
  missing.replace(missing.find("\"epoch\""), 7, "\"epochs\"");
  EXPECT_THAT(error(missing), HasSubstr("field 'epoch' is missing"));
  EXPECT_THAT(error(R"({"version":2})"), HasSubstr("field 'version'=2 is not supported"));
  std::string bad_mode = good;
  bad_mode.replace(bad_mode.find("\"pad\""), 5, "\"even\"");
  EXPECT_THAT(error(bad_mode), HasSubstr("mode='even'"));
  std::string too_far = good;
  too_far.replace(too_far.find("\"consumed\":0"), 12, "\"consumed\":5");
  EXPECT_THAT(error(too_far), HasSubstr("field 'consumed'=5 must be <= dataset_size=0"));
  std::string negative = good;
  negative.replace(negative.find("\"epoch\":0"), 9, "\"epoch\":-1");
  EXPECT_THAT(error(negative), HasSubstr("field 'epoch'=-1 must be >= 0"));
}

TEST(SamplerStateTest, RestoredSamplerContinuesTheEpochAndSetEpochOfItKeepsTheStart) {
  DistributedSampler full(options(21, 2, 1, PartitionMode::kPad));
  full.set_epoch(4);
  const auto all = full.indices().to_vector();
  full.set_position(5);
  DistributedSampler resumed = DistributedSampler::restore(full.state(), 1, 2);
  EXPECT_EQ(resumed.epoch(), 4);
  EXPECT_EQ(resumed.num_samples(), 6);
  const std::vector<int64_t> rest(all.begin() + 5, all.end());
  EXPECT_EQ(resumed.indices().to_vector(), rest);
  resumed.set_epoch(4);  // the training loop's set_epoch of the resumed epoch
  EXPECT_EQ(resumed.indices().to_vector(), rest);
  resumed.set_epoch(5);  // the next epoch starts from its beginning
  EXPECT_EQ(resumed.num_samples(), 11);
  DistributedSampler fresh(options(21, 2, 1, PartitionMode::kPad));
  fresh.set_epoch(5);
  EXPECT_EQ(resumed.indices().to_vector(), fresh.indices().to_vector());
}

TEST(SamplerStateTest, SetPositionOutsideTheShardIsOutOfRange) {
  DistributedSampler s(options(10, 2, 0, PartitionMode::kPad));
  EXPECT_THROW(s.set_position(6), std::out_of_range);
  EXPECT_THROW(s.set_position(-1), std::out_of_range);
  try {
    s.set_position(6);
  } catch (const std::out_of_range& e) {
    EXPECT_THAT(e.what(), HasSubstr("position=6 out of range [0, num_samples=5]"));
  }
}

TEST(SamplerStateTest, RestoreRejectsARankOutsideTheNewWorld) {
  SamplerState state;
  state.dataset_size = 10;
  EXPECT_THROW(DistributedSampler::restore(state, 3, 3), std::invalid_argument);
  state.consumed = 11;
  EXPECT_THROW(DistributedSampler::restore(state, 0, 1), std::invalid_argument);
}

TEST(SamplerStateTest, ElasticResumeFromTwoRanksToOneReadsEachRemainingSampleOnce) {
  // n = 10, W = 2, batch 2, 1 step done: positions [0, 4) consumed.
  Shards before = all_shards(options(10, 2, 0, PartitionMode::kUneven), 0);
  DistributedSampler rank0(options(10, 2, 0, PartitionMode::kUneven));
  rank0.set_position(2);
  const SamplerState state = rank0.state();
  EXPECT_EQ(state.consumed, 4);
  const auto after = DistributedSampler::restore(state, 0, 1).indices();
  std::vector<int64_t> all = {before[0][0], before[0][1], before[1][0], before[1][1]};
  all.insert(all.end(), after.begin(), after.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(SamplerPassTest, SecondPassWithoutSetEpochWarnsOnce) {
  WarningCapture warnings;
  DistributedSampler s(options(20, 2, 0, PartitionMode::kPad));
  const auto first = s.iterate().to_vector();
  EXPECT_TRUE(warnings.messages.empty());
  EXPECT_EQ(s.iterate().to_vector(), first);
  (void)s.iterate();
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_THAT(warnings.messages[0], HasSubstr("without set_epoch()"));
  EXPECT_THAT(warnings.messages[0], HasSubstr("epoch 0"));
}

TEST(SamplerPassTest, SetEpochBetweenPassesDoesNotWarn) {
  WarningCapture warnings;
  DistributedSampler s(options(20, 2, 0, PartitionMode::kPad));
  for (int64_t e = 0; e < 3; ++e) {
    s.set_epoch(e);
    (void)s.iterate();
  }
  EXPECT_TRUE(warnings.messages.empty());
}

TEST(SamplerPassTest, AutoAdvanceMovesToTheNextEpochOnEachPass) {
  WarningCapture warnings;
  DistributedSamplerOptions o = options(20, 2, 0, PartitionMode::kPad);
  o.auto_advance_epoch = true;
  DistributedSampler s(o);
  (void)s.iterate();
  const auto second = s.iterate().to_vector();
  EXPECT_EQ(s.epoch(), 1);
  DistributedSampler reference(options(20, 2, 0, PartitionMode::kPad));
  reference.set_epoch(1);
  EXPECT_EQ(second, reference.indices().to_vector());
  EXPECT_TRUE(warnings.messages.empty());
}

struct Cut {
  DistributedSamplerOptions o;
  int64_t epoch = 0;
  int64_t batch = 1;
};

void showValue(const Cut& c, std::ostream& os) {
  os << "n=" << c.o.dataset_size << " W=" << c.o.num_replicas << " mode=" << to_string(c.o.mode)
     << " shuffle=" << c.o.shuffle << " seed=" << c.o.seed << " epoch=" << c.epoch
     << " batch=" << c.batch;
}

rc::Gen<Cut> gen_cut() {
  return rc::gen::exec([] {
    Cut c;
    c.o.mode =
        *rc::gen::element(PartitionMode::kPad, PartitionMode::kDropLast, PartitionMode::kUneven);
    c.o.num_replicas = *rc::gen::inRange<int64_t>(1, 9);
    c.o.dataset_size = *rc::gen::inRange<int64_t>(c.o.num_replicas, 300);
    c.o.shuffle = *rc::gen::arbitrary<bool>();
    c.o.seed = *rc::gen::arbitrary<uint64_t>();
    c.epoch = *rc::gen::inRange<int64_t>(0, 50);
    c.batch = *rc::gen::inRange<int64_t>(1, 9);
    return c;
  });
}

// Every step boundary of the epoch is a cut point; the restored sampler at
// the same world size yields exactly the rest of the uninterrupted epoch.
RC_GTEST_PROP(SamplerStateProperty, MidEpochResumeYieldsTheRestOfTheEpochAtEveryCut, ()) {
  const Cut c = *gen_cut();
  const int64_t w = c.o.num_replicas;
  const Shards full = all_shards(c.o, c.epoch);
  DistributedSamplerOptions r0 = c.o;
  r0.rank = 0;
  DistributedSampler rank0(r0);
  rank0.set_epoch(c.epoch);
  for (int64_t done = 0; done <= rank0.num_samples();
       done = std::min(done + c.batch, rank0.num_samples() + 1)) {
    rank0.set_position(std::min(done, rank0.num_samples()));
    const SamplerState state = SamplerState::from_json(rank0.state().to_json());
    for (int64_t r = 0; r < w; ++r) {
      const auto& shard = full[static_cast<size_t>(r)];
      const std::vector<int64_t> rest(
          shard.begin() + std::min<int64_t>(done, static_cast<int64_t>(shard.size())), shard.end());
      RC_ASSERT(DistributedSampler::restore(state, r, w).indices() == rest);
    }
    if (done == rank0.num_samples()) break;
  }
}

// W -> W' at a random step: what all ranks read before, plus what the W'
// ranks read after, is the epoch's samples (each once in uneven; all present
// in pad; none twice in drop_last, which drops remaining % W').
RC_GTEST_PROP(SamplerStateProperty, ElasticResumeNeitherSkipsNorRepeatsASample, ()) {
  const Cut c = *gen_cut();
  const int64_t w2 = *rc::gen::inRange<int64_t>(1, 9);
  const Shards full = all_shards(c.o, c.epoch);
  const int64_t shard0 = static_cast<int64_t>(full[0].size());
  const int64_t steps = shard0 / c.batch;  // full steps every rank took part in
  const int64_t done = c.batch * *rc::gen::inRange<int64_t>(0, steps + 1);
  DistributedSamplerOptions r0 = c.o;
  r0.rank = 0;
  DistributedSampler rank0(r0);
  rank0.set_epoch(c.epoch);
  rank0.set_position(done);
  const SamplerState state = rank0.state();

  std::map<int64_t, int64_t> count;
  int64_t read = 0;
  for (const auto& shard : full) {
    for (int64_t k = 0; k < std::min<int64_t>(done, static_cast<int64_t>(shard.size())); ++k) {
      ++count[shard[static_cast<size_t>(k)]];
      ++read;
    }
  }
  RC_ASSERT(std::min(read, c.o.dataset_size) ==
            state.consumed);  // padding read last ends the epoch
  if (state.consumed == 0 && c.o.mode == PartitionMode::kUneven && c.o.dataset_size < w2) {
    // Nothing read yet: a whole epoch at W', which uneven refuses for n < W' (as MONAI).
    RC_ASSERT_THROWS_AS(DistributedSampler::restore(state, 0, w2), std::invalid_argument);
    return;
  }
  for (int64_t r = 0; r < w2; ++r) {
    for (int64_t i : DistributedSampler::restore(state, r, w2).indices()) ++count[i];
  }
  const int64_t n = c.o.dataset_size;
  const int64_t remaining = n - state.consumed;
  int64_t repeated = 0;
  for (const auto& [index, k] : count) {
    RC_ASSERT(index >= 0 && index < n);
    repeated += k > 1 ? 1 : 0;
  }
  switch (c.o.mode) {
    case PartitionMode::kUneven:
      RC_ASSERT(static_cast<int64_t>(count.size()) == n);
      RC_ASSERT(repeated == 0);
      break;
    case PartitionMode::kPad:
      RC_ASSERT(static_cast<int64_t>(count.size()) == n);
      break;
    case PartitionMode::kDropLast:
      RC_ASSERT(repeated == 0);
      RC_ASSERT(static_cast<int64_t>(count.size()) == n - remaining % w2);
      break;
  }
}

}  // namespace
}  // namespace volshard
