#include "volshard/inspect/inspect.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace volshard::inspect {
namespace {

using ::testing::HasSubstr;

TEST(InspectTest, FingerprintIsFnv1a64OverLittleEndianInt64) {
  EXPECT_EQ(fingerprint({}), 0xcbf29ce484222325ULL);
  // Python: h=0xcbf29ce484222325; for b in (1).to_bytes(8,'little'): h=((h^b)*0x100000001b3)%2**64
  EXPECT_EQ(fingerprint({1}), 0x89cd31291d2aefa4ULL);
  EXPECT_NE(fingerprint({1, 2}), fingerprint({2, 1}));
}

TEST(InspectTest, ParsesEpochRangesAndRejectsBadOnesNamingTheText) {
  const auto r = parse_epoch_range("2:5");
  EXPECT_EQ(r.first, 2);
  EXPECT_EQ(r.last, 5);
  for (const char* bad : {"5:2", "x:3", "3", "1:2x", "-1:2"}) {
    try {
      parse_epoch_range(bad);
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("--epochs=") + bad));
    }
  }
}

TEST(InspectTest, JsonHasTheDocumentedShape) {
  InspectOptions o;
  o.sampler.dataset_size = 5;
  o.sampler.num_replicas = 2;
  o.sampler.shuffle = false;
  o.format = Format::kJson;
  std::ostringstream out, verdicts;
  EXPECT_EQ(run(o, out, verdicts), 0);
  EXPECT_EQ(
      out.str(),
      "{\"size\":5,\"world_size\":2,\"seed\":0,\"shuffle\":false,\"mode\":\"pad\",\"epochs\":[{"
      "\"epoch\":0,"
      "\"ranks\":[{\"rank\":0,\"num_samples\":3,\"indices\":[0,2,4]},{\"rank\":1,\"num_samples\":3,"
      "\"indices\":[1,3,0]}]}]}\n");
}

TEST(InspectTest, VerifyWritesOneVerdictPerEpochToTheVerdictStreamForJson) {
  InspectOptions o;
  o.sampler.dataset_size = 21;
  o.sampler.num_replicas = 2;
  o.epochs = {0, 2};
  o.verify = true;
  o.format = Format::kJson;
  std::ostringstream out, verdicts;
  EXPECT_EQ(run(o, out, verdicts), 0);
  EXPECT_THAT(verdicts.str(), HasSubstr("verify epoch 0: OK"));
  EXPECT_THAT(verdicts.str(), HasSubstr("verify epoch 2: OK"));
  EXPECT_THAT(verdicts.str(), HasSubstr("changed rank since epoch 1"));
  EXPECT_THAT(out.str(), ::testing::Not(HasSubstr("verify")));
}

}  // namespace
}  // namespace volshard::inspect
