// options.cpp: the train table's rows carry the options' roles.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "volshard/trainer/options.h"

namespace volshard {
namespace {

// The options' roles live in their table rows: what a resumed run must keep
// (the data, randomness, network: resume refuses a change) and what only
// says where a run writes or how it waits (diff sets it aside); every kept
// key is saved in config.json, where resume reads it back.
TEST(OptionRolesTest, KeptAndRunLocalKeysComeFromTheTable) {
  const auto& kept = TrainOptions::keys_with(Field::Role::kKept);
  const auto& local = TrainOptions::keys_with(Field::Role::kLocal);
  for (const char* key :
       {"seed", "data", "crop", "channels", "pixdim", "prefix_order", "amp", "invariant", "labels",
        "a_min", "crop_foreground", "rot90_prob", "flip_prob", "rand_shift", "rand_scale"})
    EXPECT_EQ(kept.count(key), 1u) << key;
  for (const char* key : {"out", "workers", "cache_rate", "cache_dir", "fingerprints", "timeout"})
    EXPECT_EQ(local.count(key), 1u) << key;
  for (const char* key : {"lr", "epochs", "val_every", "cache_device"})
    EXPECT_EQ(kept.count(key) + local.count(key), 0u) << key << " may change between runs";
  const nlohmann::json saved = nlohmann::json::parse(TrainOptions().to_json());
  for (const std::string& key : kept) EXPECT_TRUE(saved.contains(key)) << key;
}

}  // namespace
}  // namespace volshard
