// The pipeline's schema (feed.h): one row per field gives its JSON key, its
// conversion from configs/*.json and the Python Loader, and its bounds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "volshard/datasets/feed.h"
#include "volshard/datasets/field_json.h"
#include "volshard/datasets/loader.h"

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

// Changes one value of any row's type: the cache key must see it.
struct Mutate {
  template <class T>
  void operator()(T& v) const {
    if constexpr (std::is_same_v<T, bool>) {
      v = !v;
    } else if constexpr (std::is_enum_v<T>) {
      for (const auto& [name, value] : enum_names(T{}))
        if (value != v) return void(v = value);
    } else if constexpr (std::is_arithmetic_v<T>) {
      v = static_cast<T>(v + 1);
    } else if constexpr (std::is_same_v<T, std::string>) {
      v += "x";
    } else {
      v.push_back(typename T::value_type{});
    }
  }
};

// The persistent cache's key is the schema's: every prefix row changes it
// (but the one that says it changes no value), and a row added to the table
// is in the key without being listed anywhere else.
TEST(CacheKeyTest, EveryPrefixRowIsInTheKeyBecauseTheSchemaSaysSo) {
  const PrefixOptions base;
  size_t rows = 0;
  for_each_prefix_field(base, [&rows](const Field&, const auto&) { ++rows; });
  for (size_t k = 0; k < rows; ++k) {
    PrefixOptions changed = base;
    const char* key = nullptr;
    bool keyed = false;
    size_t i = 0;
    for_each_prefix_field(changed, [&](const Field& f, auto& value) {
      if (i++ != k) return;
      Mutate{}(value);
      key = f.key;
      keyed = f.in_cache_key;
    });
    EXPECT_EQ(changed.key() != base.key(), keyed) << key;
    PairOptions a, b;
    b.prefix = changed;
    EXPECT_EQ(a.config_key() != b.config_key(), keyed) << key;
  }
  // A copy of the table with one more row: the key follows its value.
  struct Extended {
    PrefixOptions prefix;
    int64_t new_field = 0;
  };
  const auto table = [](const Extended& e, auto&& visit) {
    for_each_prefix_field(e.prefix, visit);
    visit(Field("new_field", "a step's new option"), e.new_field);
  };
  Extended e;
  const std::string before = cache_key_text(e, table);
  e.new_field = 7;
  EXPECT_NE(cache_key_text(e, table), before);
  EXPECT_THAT(cache_key_text(e, table), HasSubstr("\"new_field\":7"));
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
  f.crop = {16};
  f.rand_shift = 0.2;
  f.rand_shift_prob = 0.5;
  f.noise_prob = 0.15;
  f.smooth_sigma_y = {0.5, 1.15};
  f.contrast_gamma = {0.7, 1.5};
  const std::string text = feed_to_json(f);
  const nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_EQ(j.size(), feed_keys().size());
  for (const std::string& key : feed_keys()) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["intensity"], "range");
  EXPECT_EQ(j["labels"], "decathlon_brats");
  EXPECT_EQ(j["pixdim"], nlohmann::json({1.5, 1.25, 2.0}));
  EXPECT_EQ(j["smooth_sigma_y"], nlohmann::json({0.5, 1.15}));
  EXPECT_EQ(j["contrast_gamma"], nlohmann::json({0.7, 1.5}));
  EXPECT_EQ(j["rand_shift_prob"], 0.5);
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
  EXPECT_EQ(feed_from_json(R"({"crop": 8.0, "a_min": "-57"})", "").crop, std::vector<int64_t>{8});
  // An enum by its name in any case, as its flag takes it.
  EXPECT_EQ(feed_from_json(R"({"intensity": "NORMALIZE"})", "").prefix.intensity,
            feed_from_json(R"({"intensity": "normalize"})", "").prefix.intensity);
}

TEST(FeedSchemaTest, AWrongValueIsNamedByItsKeyAndTheCallersName) {
  EXPECT_THAT(error_of(R"({"pixdim": "abc"})"),
              HasSubstr("Loader: pixdim='abc' is not a valid pixdim (a number)"));
  EXPECT_THAT(error_of(R"({"intensity": "zscore"})"),
              HasSubstr("intensity='zscore' must be one of none, scale, range, normalize"));
  EXPECT_THAT(error_of(R"({"intensity": "Normalise"})"),
              HasSubstr("intensity='Normalise' must be one of none, scale, range, normalize; did "
                        "you mean 'normalize'?"));
  EXPECT_THAT(error_of(R"({"crop": 9223372036854775808})"),
              HasSubstr("crop=9223372036854775808 is out of range"));
  EXPECT_THAT(error_of(R"({"clip": "yes"})"), HasSubstr("clip='yes' is not a valid clip"));
  EXPECT_THAT(error_of(R"({"pixdims": [1, 1, 1]})"), HasSubstr("unknown pipeline key 'pixdims'"));
  EXPECT_THAT(error_of("[1]"), HasSubstr("must be a JSON object"));
  EXPECT_THAT(error_of("{"), HasSubstr("not valid JSON"));
}

// The library names a field by its key, as the config and Python spell it; a
// command line shows its flag (FieldError::flag_text), each field it names.
TEST(FeedSchemaTest, TheSchemasBoundsNameTheFieldsAndACommandLineTheirFlags) {
  const auto flags_of = [](const std::string& json) {
    try {
      (void)feed_from_json(json, "Loader: ");
    } catch (const std::invalid_argument& e) {
      return flag_text(e);
    }
    return std::string("no error");
  };
  EXPECT_EQ(flags_of(R"({"num_samples": 5000})"),
            "Loader: --num-samples=5000 must be in [1, 4096]");
  EXPECT_THAT(flags_of(R"({"crop": [32, 32]})"),
              HasSubstr("Loader: --crop=32,32 must be one edge"));
  EXPECT_THAT(flags_of(R"({"affine_prob": 0.3, "elastic_prob": 0.2})"),
              HasSubstr("Loader: --affine-prob=0.3 and --elastic-prob=0.2: one of them"));
  EXPECT_THAT(flags_of(R"({"a_min": 5, "a_max": 1, "intensity": "range"})"),
              HasSubstr("--a-min=5 must be <= --a-max=1"));
  EXPECT_THAT(error_of(R"({"a_min": 5, "a_max": 1, "intensity": "range"})"),
              HasSubstr("a_min=5 must be <= a_max=1"));
  EXPECT_THAT(error_of(R"({"crop": 0})"),
              HasSubstr("Loader: crop=0 must be one edge (a cube) or three, x,y,z, each in [1, "
                        "4096]"));
  EXPECT_THAT(error_of(R"({"crop": [32, 32]})"),
              HasSubstr("Loader: crop=32,32 must be one edge"));
  EXPECT_THAT(error_of(R"({"crop": [40, 0, 40]})"), HasSubstr("crop=40,0,40 must be"));
  EXPECT_EQ(feed_from_json(R"({"crop": [40, 56, 40]})", "").crop_size(),
            (std::array<int64_t, 3>{40, 56, 40}));
  EXPECT_EQ(feed_from_json(R"({"crop": "40,56,40"})", "").crop_size(),
            (std::array<int64_t, 3>{40, 56, 40}));
  EXPECT_EQ(feed_from_json(R"({"crop": 24})", "").crop_size(),
            (std::array<int64_t, 3>{24, 24, 24}));
  EXPECT_THAT(error_of(R"({"num_samples": 5000})"),
              HasSubstr("num_samples=5000 must be in [1, 4096]"));
  EXPECT_THAT(error_of(R"({"rot90_prob": 1.5})"), HasSubstr("rot90_prob=1.5 must be in [0, 1]"));
  EXPECT_THAT(error_of(R"({"rand_scale": 1})"), HasSubstr("rand_scale=1 must be in [0, 1)"));
  EXPECT_THAT(error_of(R"({"rand_shift": "inf"})"), HasSubstr("rand_shift=inf must be >= 0"));
  EXPECT_THAT(error_of(R"({"rand_scale_prob": 1.5})"),
              HasSubstr("rand_scale_prob=1.5 must be in [0, 1]"));
  EXPECT_THAT(error_of(R"({"noise_prob": -0.1})"),
              HasSubstr("noise_prob=-0.1 must be in [0, 1]"));
  EXPECT_THAT(error_of(R"({"noise_std": "inf"})"), HasSubstr("noise_std=inf must be >= 0"));
  EXPECT_THAT(error_of(R"({"smooth_prob": 2})"), HasSubstr("smooth_prob=2 must be in [0, 1]"));
  EXPECT_THAT(
      error_of(R"({"smooth_sigma_x": [1.5, 0.25]})"),
      HasSubstr("smooth_sigma_x=1.5,0.25 must be two values lo,hi with 0 <= lo <= hi <= 100"));
  EXPECT_THAT(error_of(R"({"smooth_sigma_z": 0.5})"),
              HasSubstr("smooth_sigma_z=0.5 must be two"));
  EXPECT_THAT(error_of(R"({"smooth_sigma_y": [0.5, 200]})"), HasSubstr("smooth_sigma_y=0.5,200"));
  EXPECT_THAT(error_of(R"({"contrast_prob": 1.01})"),
              HasSubstr("contrast_prob=1.01 must be in [0, 1]"));
  EXPECT_THAT(error_of(R"({"contrast_gamma": [0, 1]})"),
              HasSubstr("contrast_gamma=0,1 must be two values lo,hi with 0 < lo"));
  EXPECT_THAT(error_of(R"({"contrast_gamma": 0.4})"),
              HasSubstr("contrast_gamma=0.4: one value must be > 0.5"));
  EXPECT_THAT(error_of(R"({"contrast_gamma": [0.5, 1, 2]})"),
              HasSubstr("contrast_gamma=0.5,1,2"));
  EXPECT_THAT(error_of(R"({"bias_prob": 1.5})"), HasSubstr("bias_prob=1.5 must be in [0, 1]"));
  EXPECT_THAT(error_of(R"({"bias_degree": 0})"), HasSubstr("bias_degree=0 must be in [1, 10]"));
  EXPECT_THAT(error_of(R"({"bias_coeff": [0.2, 0.1]})"),
              HasSubstr("bias_coeff=0.2,0.1 must be two finite values lo,hi with lo <= hi"));
  EXPECT_THAT(error_of(R"({"bias_coeff": 0.1})"), HasSubstr("bias_coeff=0.1 must be two"));
  EXPECT_EQ(feed_from_json(R"({"bias_coeff": [-0.2, 0.3]})", "").bias_coeff,
            (std::vector<double>{-0.2, 0.3}));
  EXPECT_THAT(error_of(R"({"foreground_margin": -1})"),
              HasSubstr("foreground_margin=-1 must be >= 0"));
  EXPECT_THAT(error_of(R"({"num_classes": -2})"), HasSubstr("num_classes=-2 must be >= 0"));
}

// A step that is off is not in the pipeline, so today's pipelines (and the
// streams their steps draw from) are unchanged.
TEST(FeedAugmentationTest, AnIntensityStepIsInThePipelineOnlyWhenItsProbabilityIsAboveZero) {
  FeedOptions f;
  f.crop = {4};
  f.num_samples = 1;
  f.rot90_prob = 0;
  EXPECT_EQ(feed_augmentation(f).size(), 1u) << "the crop alone";
  f.rand_scale = 0.1;
  f.rand_shift = 0.1;
  EXPECT_EQ(feed_augmentation(f).size(), 3u) << "the probabilities alone add no step";
  f.noise_prob = 0.5;
  f.smooth_prob = 0.5;
  f.contrast_prob = 0.5;
  EXPECT_EQ(feed_augmentation(f).size(), 6u);
  f.contrast_gamma = {2.0};  // MONAI's one number: (0.5, 2)
  EXPECT_EQ(feed_augmentation(f).size(), 6u);
  f.bias_coeff = {-0.1, 0.1};
  EXPECT_EQ(feed_augmentation(f).size(), 6u) << "a range alone adds no step";
  f.bias_prob = 0.3;
  EXPECT_EQ(feed_augmentation(f).size(), 7u);  // the last (the order: every_random_step_...)
}

TEST(FeedAugmentationTest, RandZoomAndRandAffineAreOneStepAfterTheCropWithTheirRangesChecked) {
  FeedOptions f;
  f.crop = {4};
  f.num_samples = 1;
  f.rot90_prob = 0;
  f.affine_rotate = {0.3};
  EXPECT_EQ(feed_augmentation(f).size(), 1u) << "a range alone adds no step";
  f.zoom_prob = 0.2;
  EXPECT_EQ(feed_augmentation(f).size(), 2u);
  f.affine_prob = 0.3;
  EXPECT_EQ(feed_augmentation(f).size(), 2u) << "zoom and affine: one resampling";
  const AffineOptions a = f.affine();
  EXPECT_EQ(a.rotate, (std::array<double, 3>{0.3, 0.3, 0.3})) << "one value: every axis";
  EXPECT_EQ(a.zoom, (std::array<double, 2>{0.9, 1.1})) << "MONAI's RandZoom defaults";
  EXPECT_EQ(a.padding, PaddingMode::kReflection) << "MONAI's RandAffine default";
  const FeedOptions g = feed_from_json(
      R"({"affine_shear": [0, 0.1, 0, 0, 0, 0.2], "affine_padding": "border", "zoom_range": "0.7,1.4"})",
      "Loader: ");
  EXPECT_EQ(g.affine().shear, (std::array<double, 6>{0, 0.1, 0, 0, 0, 0.2}));
  EXPECT_EQ(g.affine().padding, PaddingMode::kBorder);
  EXPECT_EQ(g.affine().zoom, (std::array<double, 2>{0.7, 1.4}));
  EXPECT_THAT(error_of(R"({"affine_rotate": [0.1, 0.2]})"),
              HasSubstr("affine_rotate=0.1,0.2 must be one value or 3, each in [0, 3.14"));
  EXPECT_THAT(error_of(R"({"affine_scale": 1.5})"),
              HasSubstr("affine_scale=1.5 must be one value or 3, each in [0, 1)"));
  EXPECT_THAT(error_of(R"({"affine_shear": [0.1, 0.1, 0.1]})"),
              HasSubstr("affine_shear=0.1,0.1,0.1 must be one value or 6"));
  EXPECT_THAT(error_of(R"({"affine_padding": "wrap"})"), HasSubstr("zeros, border, reflection"));
  EXPECT_THAT(error_of(R"({"zoom_range": [1.2, 0.8]})"), HasSubstr("zoom_range=1.2,0.8"));
  EXPECT_THAT(error_of(R"({"zoom_prob": 2})"), HasSubstr("zoom_prob=2 must be in [0, 1]"));
  // Rand3DElastic: RandAffine's step with the same ranges, in its place.
  FeedOptions e;
  e.crop = {4};
  e.num_samples = 1;
  e.rot90_prob = 0;
  e.elastic_prob = 0.4;
  EXPECT_EQ(feed_augmentation(e).size(), 2u);
  EXPECT_EQ(e.affine().elastic_prob, 0.4);
  EXPECT_EQ(e.affine().elastic_sigma, (std::array<double, 2>{5, 8})) << "MONAI's tutorials' range";
  EXPECT_EQ(e.affine().elastic_magnitude, (std::array<double, 2>{100, 200}));
  EXPECT_THAT(error_of(R"({"elastic_prob": 0.2, "affine_prob": 0.3})"),
              HasSubstr("affine_prob=0.3 and elastic_prob=0.2: one of them"));
  EXPECT_THAT(error_of(R"({"elastic_sigma": [0, 2]})"), HasSubstr("elastic_sigma=0,2"));
  EXPECT_THAT(error_of(R"({"elastic_magnitude": [300, 200]})"),
              HasSubstr("elastic_magnitude=300,200"));
}

// Volume i: a 1 x 12 x 10 x 8 image of noise seeded by i, label = image > 0.7.
Sample noise_volume(int64_t index) {
  at::Tensor image = at::empty({1, 12, 10, 8});
  StreamRng rng(static_cast<uint64_t>(index) * 7919 + 1);
  float* p = image.data_ptr<float>();
  for (int64_t k = 0; k < image.numel(); ++k) p[k] = static_cast<float>(rng.uniform_double());
  Sample s;
  s.image = image;
  s.label = (image > 0.7).to(at::kByte);
  return s;
}

std::vector<Batch> epoch_of(DataLoader& loader, const std::vector<int64_t>& indices) {
  loader.start_epoch(indices, 3);
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

// Every random step of the feed, the new intensity steps with probabilities
// below 1 among them: the same seed gives the same batches (and the same
// recorded draws) with 0, 1, 2 and 4 workers, on the host path and on the
// device path run on the CPU (the GPU cache's code); with RandAffine, and
// with Rand3DElastic in its place.
void every_random_step_gives_the_same_batches_at_any_worker_count(bool elastic) {
  SCOPED_TRACE(elastic ? "Rand3DElastic" : "RandAffine");
  FeedOptions feed;
  feed.crop = {4};
  feed.num_samples = 3;
  feed.rot90_prob = 0.5;
  feed.flip_prob = 0.5;
  feed.rand_scale = 0.1;
  feed.rand_shift = 0.1;
  feed.rand_scale_prob = 0.5;
  feed.rand_shift_prob = 0.7;
  feed.noise_prob = 0.5;
  feed.smooth_prob = 0.5;
  feed.contrast_prob = 0.5;
  feed.bias_prob = 0.5;
  feed.bias_degree = 2;
  (elastic ? feed.elastic_prob : feed.affine_prob) = 0.5;
  feed.elastic_sigma = {1.0, 2.0};
  feed.elastic_magnitude = {2.0, 6.0};
  feed.affine_rotate = {0.3, 0.2, 0.1};
  feed.affine_scale = {0.1};
  feed.affine_padding = PaddingMode::kZeros;
  feed.zoom_prob = 0.5;
  feed.prefix.intensity = IntensityKind::kNormalize;
  const Compose pipeline = feed_augmentation(feed);
  const std::vector<int64_t> indices{7, 3, 9, 1, 4, 2};
  LoaderOptions o;
  o.batch_size = 2;
  o.seed = 11;
  o.pin_memory = PinMemory::kOff;
  o.workers = 0;
  DataLoader reference_loader(noise_volume, pipeline, o);
  const auto reference = epoch_of(reference_loader, indices);
  ASSERT_EQ(reference.size(), 3u);
  // The documented order (docs/reproducibility.md): each crop lists the
  // steps it took in it.
  const std::vector<std::string> order{"RandGaussianNoise",  "RandGaussianSmooth",
                                       "RandScaleIntensity", "RandShiftIntensity",
                                       "RandAdjustContrast", "RandBiasField"};
  std::map<std::string, int> applied;
  for (const Batch& b : reference) {
    for (const SampleMeta& m : b.meta) {
      size_t next = 0;
      for (const auto& [step, drawn] : m.intensity) {
        ++applied[step];
        while (next < order.size() && order[next] != step) ++next;
        EXPECT_LT(next, order.size()) << step << " out of order";
        EXPECT_EQ(drawn.size(), step == "RandGaussianSmooth" ? 3u
                                : step == "RandBiasField"    ? 10u
                                                             : 1u)
            << step;
      }
    }
  }
  for (const Batch& b : reference) {
    for (const SampleMeta& m : b.meta) {
      for (const auto& [step, drawn] : m.spatial) {
        ++applied[step];
        EXPECT_EQ(drawn.size(), step == "RandAffine"      ? 15u
                                : step == "Rand3DElastic" ? 2u
                                                          : 1u)
            << step;
      }
    }
  }
  EXPECT_EQ(applied["Rand3DElastic"] > 0, elastic);
  if (elastic) {
    EXPECT_EQ(applied["Rand3DElastic"], applied["RandAffine"]) << "one coin";
  }
  for (const std::string step : {"RandZoom", elastic ? "Rand3DElastic" : "RandAffine"}) {
    EXPECT_GT(applied[step], 0) << step << " never applied in 18 crops";
    EXPECT_LT(applied[step], 18) << step << " applied to every crop at prob < 1";
  }
  for (const std::string& step : order) {
    EXPECT_GT(applied[step], 0) << step << " never applied in 18 crops";
    EXPECT_LT(applied[step], 18) << step << " applied to every crop at prob < 1";
  }
  for (const bool on_device : {false, true}) {
    if (on_device) o.device = c10::Device(c10::kCPU);
    for (const int64_t workers : {0, 1, 2, 4}) {
      o.workers = workers;
      DataLoader loader(noise_volume, pipeline, o);
      const auto batches = epoch_of(loader, indices);
      ASSERT_EQ(batches.size(), reference.size());
      for (size_t b = 0; b < batches.size(); ++b) {
        EXPECT_TRUE(at::equal(batches[b].image, reference[b].image))
            << workers << " workers, device path " << on_device << ", batch " << b;
        ASSERT_EQ(batches[b].meta.size(), reference[b].meta.size());
        for (size_t m = 0; m < batches[b].meta.size(); ++m) {
          EXPECT_EQ(batches[b].meta[m].intensity, reference[b].meta[m].intensity);
          EXPECT_EQ(batches[b].meta[m].spatial, reference[b].meta[m].spatial);
        }
      }
    }
  }
}

TEST(FeedAugmentationTest, EveryRandomStepGivesTheSameBatchesAtAnyWorkerCount) {
  every_random_step_gives_the_same_batches_at_any_worker_count(/*elastic=*/false);
  every_random_step_gives_the_same_batches_at_any_worker_count(/*elastic=*/true);
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
  EXPECT_EQ(feed.crop, std::vector<int64_t>{32});
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
