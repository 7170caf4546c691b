// options.cpp: the train table's rows carry the options' roles; predict's checks name its rows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "refusal_text.h"
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

// predict's refusals name its rows as the library's messages do: by key in
// what() (as a config and Python spell them), by flag through flag_text
// (model_path's flag is --model), and never a flag in the key form.
TEST(PredictOptionsTest, RefusalsNameEachFieldByKeyAndOnACommandLineByFlag) {
  const auto refusal = [](const std::function<void(PredictOptions&)>& set) {
    PredictOptions o;
    o.model_path = "model.pt";
    o.image_path = "image.nii.gz";
    o.out_path = "prediction.nii.gz";
    o.device = DeviceKind::kCpu;
    set(o);
    return testing::refusal_text(o);
  };
  using ::testing::HasSubstr;
  EXPECT_EQ(refusal([](PredictOptions&) {}).first, "accepted");
  const auto [required, required_flags] = refusal([](PredictOptions& o) { o.model_path.clear(); });
  EXPECT_EQ(required, "predict: model_path, image and out are required");
  EXPECT_EQ(required_flags, "predict: --model, --image and --out are required");
  const auto [nii, nii_flags] = refusal([](PredictOptions& o) { o.out_path = "p.png"; });
  EXPECT_THAT(nii, HasSubstr("predict: out=p.png must end in .nii or .nii.gz"));
  EXPECT_THAT(nii_flags, HasSubstr("predict: --out=p.png must end in .nii or .nii.gz"));
  const auto [same, same_flags] =
      refusal([](PredictOptions& o) { o.out_path = o.image_path = "a.nii"; });
  EXPECT_THAT(same, HasSubstr("predict: out=a.nii is image's file"));
  EXPECT_THAT(same_flags, HasSubstr("predict: --out=a.nii is --image's file"));
  const auto [component, component_flags] = refusal([](PredictOptions& o) {
    o.inference.largest_component = true;
    o.output = PredictOutput::kProb;
  });
  EXPECT_THAT(component, HasSubstr("largest_component keeps components of labels: it needs "
                                   "output=label"));
  EXPECT_THAT(component_flags, HasSubstr("--largest-component keeps components of labels: it "
                                         "needs --output=label"));
  const auto [roi, roi_flags] = refusal([](PredictOptions& o) { o.roi = {30}; });
  EXPECT_THAT(roi, HasSubstr("predict: roi 30x30x30: every side must be a positive multiple of"));
  EXPECT_THAT(roi_flags, HasSubstr("predict: --roi 30x30x30: every side"));
  const auto [crop, crop_flags] = refusal([](PredictOptions& o) { o.crop = {30, 32, 32}; });
  EXPECT_THAT(crop, HasSubstr("predict: crop (the run's, as roi) 30x32x32: every side"));
  EXPECT_THAT(crop_flags, HasSubstr("predict: --crop (the run's, as --roi) 30x32x32"));
  const auto [edges, edges_flags] = refusal([](PredictOptions& o) { o.roi = {32, 32}; });
  EXPECT_THAT(edges, HasSubstr("predict: roi=32,32 must be one edge (a cube) or three"));
  EXPECT_THAT(edges_flags, HasSubstr("predict: --roi=32,32 must be one edge"));
  for (const auto& said : {required, nii, same, component, roi, crop, edges}) {
    EXPECT_EQ(said.find('\x1f'), std::string::npos) << said;
    EXPECT_EQ(said.find("--"), std::string::npos) << said;
  }
}

}  // namespace
}  // namespace volshard
