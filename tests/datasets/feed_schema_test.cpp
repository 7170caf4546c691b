// The pipeline's schema (feed.h): one row per field gives its JSON key, its
// conversion from configs/*.json and the Python Loader, and its bounds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

#include "volshard/datasets/feed.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& json) {
  try {
    (void)feed_from_json(json, "Loader: ");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(FeedSchemaTest, EveryFieldGoesToJsonAndBackUnderItsKey) {
  FeedOptions f;
  f.prefix.orientation = "LPS";
  f.prefix.pixdim = {1.5, 1.25, 2};
  f.prefix.intensity = IntensityKind::kRange;
  f.prefix.range = {-57, 164, 0.25, 0.75, true};
  f.prefix.spatial_pad = {20};
  f.prefix.order = {"intensity", "crop_foreground", "orientation", "spacing"};
  f.prefix.labels = LabelMap::kDecathlonBrats;
  f.prefix.num_classes = 4;
  f.crop_kind = CropKind::kSpatial;
  f.crop = 16;
  f.rand_shift = 0.2;
  const std::string text = feed_to_json(f);
  const nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_EQ(j.size(), feed_keys().size());
  for (const std::string& key : feed_keys()) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["intensity"], "range");
  EXPECT_EQ(j["labels"], "decathlon_brats");
  EXPECT_EQ(j["pixdim"], nlohmann::json({1.5, 1.25, 2.0}));
  EXPECT_EQ(feed_to_json(feed_from_json(text, "")), text);
}

TEST(FeedSchemaTest, ListsTakeAnArrayACommaSeparatedStringOrOneValueAsTheFlagsDo) {
  EXPECT_EQ(feed_from_json(R"({"pixdim": "1.5,1.5,2"})", "").prefix.pixdim,
            (std::vector<double>{1.5, 1.5, 2}));
  EXPECT_EQ(feed_from_json(R"({"spatial_pad": 96})", "").prefix.spatial_pad,
            (std::vector<int64_t>{96}));
  EXPECT_EQ(
      feed_from_json(R"({"prefix_order": "intensity,crop_foreground,orientation,spacing"})", "")
          .prefix.order.front(),
      "intensity");
  EXPECT_EQ(feed_from_json(R"({"crop": 8.0, "a_min": "-57"})", "").crop, 8);
}

TEST(FeedSchemaTest, AWrongValueIsNamedByItsKeyAndTheCallersName) {
  EXPECT_THAT(error_of(R"({"pixdim": "abc"})"),
              HasSubstr("Loader: pixdim='abc' is not a valid pixdim (a number)"));
  EXPECT_THAT(error_of(R"({"intensity": "zscore"})"),
              HasSubstr("intensity='zscore' must be one of none, scale, range, normalize"));
  EXPECT_THAT(error_of(R"({"crop": 9223372036854775808})"),
              HasSubstr("crop=9223372036854775808 is out of range"));
  EXPECT_THAT(error_of(R"({"clip": "yes"})"), HasSubstr("clip='yes' is not a valid clip"));
  EXPECT_THAT(error_of(R"({"pixdims": [1, 1, 1]})"), HasSubstr("unknown pipeline key 'pixdims'"));
  EXPECT_THAT(error_of("[1]"), HasSubstr("must be a JSON object"));
  EXPECT_THAT(error_of("{"), HasSubstr("not valid JSON"));
}

TEST(FeedSchemaTest, TheSchemasBoundsValidateWithTheFlagsNames) {
  EXPECT_THAT(error_of(R"({"crop": 0})"), HasSubstr("Loader: --crop=0 must be >= 1"));
  EXPECT_THAT(error_of(R"({"num_samples": 5000})"),
              HasSubstr("--num-samples=5000 must be in [1, 4096]"));
  EXPECT_THAT(error_of(R"({"rot90_prob": 1.5})"), HasSubstr("--rot90-prob=1.5 must be in [0, 1]"));
  EXPECT_THAT(error_of(R"({"rand_scale": 1})"), HasSubstr("--rand-scale=1 must be in [0, 1)"));
  EXPECT_THAT(error_of(R"({"rand_shift": "inf"})"), HasSubstr("--rand-shift=inf must be >= 0"));
  EXPECT_THAT(error_of(R"({"foreground_margin": -1})"),
              HasSubstr("--foreground-margin=-1 must be >= 0"));
  EXPECT_THAT(error_of(R"({"num_classes": -2})"), HasSubstr("--num-classes=-2 must be >= 0"));
}

TEST(FeedSchemaTest, AConfigFilesNetworkKeysAreSkippedAndItsPipelineKeysRead) {
  const std::string path = ::testing::TempDir() + "feed_schema_config.json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"lr": 0.001, "channels": [4, 8], "crop": 32, "intensity": "normalize"})", f);
    std::fclose(f);
  }
  const FeedOptions feed = feed_from_config(path);
  EXPECT_EQ(feed.crop, 32);
  EXPECT_EQ(feed.prefix.intensity, IntensityKind::kNormalize);
  try {
    (void)feed_from_config(path + ".missing");
    FAIL() << "a missing config was read";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("feed_schema_config.json.missing"));
  }
}

}  // namespace
}  // namespace volshard
