// The CT/MRI deterministic prefix (load_pair with PrefixOptions): each step
// as the transform alone computes it, the label taking the image's grid, the
// checks on label values, and the way back (invert_prefix) for predictions.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "volshard/core/limits.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/loader.h"
#include "volshard/datasets/volume.h"
#include "volshard/transforms/transforms.h"
#include "volume_io/nifti_test_util.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;
using testing::test_dir;

// An LPS CT-like volume at 0.8 x 0.8 x 5 mm: air around a body, a bright organ labelled 1.
struct CtPair {
  ImageLabelPair pair;
  at::Tensor hu, label;
  Affine affine{};
};

CtPair write_ct(const std::string& dir) {
  CtPair ct;
  ct.affine = identity_affine();
  ct.affine[0][0] = -0.8;
  ct.affine[1][1] = -0.8;
  ct.affine[2][2] = 5.0;
  ct.affine[0][3] = 20;
  ct.affine[1][3] = -10;
  at::manual_seed(3);
  ct.hu = at::full({1, 23, 19, 6}, -1000.0);
  ct.hu.slice(1, 3, 20).slice(2, 2, 17).fill_(40.0);
  ct.hu += at::randn(ct.hu.sizes()) * 5;
  ct.label = at::zeros({1, 23, 19, 6}, at::kInt);
  ct.label.slice(1, 8, 14).slice(2, 6, 11).slice(3, 2, 5).fill_(1);
  ct.hu.masked_fill_(ct.label.to(at::kBool), 130.0);
  ct.pair = {dir + "/ct.nii.gz", dir + "/ct_seg.nii.gz"};
  write_volume(ct.pair.image, ct.hu.to(at::kShort), ct.affine);
  write_volume(ct.pair.label, ct.label, ct.affine);
  ct.hu = ct.hu.to(at::kShort).to(at::kFloat);  // as stored
  return ct;
}

PrefixOptions spleen_prefix() {
  PrefixOptions p;
  p.orientation = "RAS";
  p.pixdim = {1.5, 1.5, 2.0};
  p.intensity = IntensityKind::kRange;
  p.range = {-57, 164, 0, 1, true};
  p.crop_foreground = true;
  p.num_classes = 2;
  return p;
}

TEST(PrefixTest, SpleenPrefixEqualsItsTransformsOneByOne) {
  const CtPair ct = write_ct(test_dir());
  PairOptions o;
  o.prefix = spleen_prefix();
  const Sample s = load_pair(ct.pair, 2, o);
  // The same steps by hand, on the files as read (NIfTI-1 holds the affine in float32).
  const Volume image = read_volume_as_float(ct.pair.image);
  const Volume label = read_volume_as_float(ct.pair.label);
  ASSERT_TRUE(at::equal(image.data, ct.hu));
  SpatialImage img = orient({image.data, image.affine}, "RAS");
  SpatialImage lab = orient({label.data, image.affine}, "RAS");
  img = spacing(img, {1.5, 1.5, 2.0}, Interpolation::kBilinear);
  lab = spacing(lab, {1.5, 1.5, 2.0}, Interpolation::kNearest);
  img.data = scale_intensity_range(img.data, o.prefix.range);
  const VoxelBox box = foreground_box(img.data);
  img = crop_box(img, box);
  lab = crop_box(lab, box);
  ASSERT_EQ(s.image.sizes(), img.data.sizes());
  EXPECT_TRUE(at::equal(s.image, img.data));
  EXPECT_TRUE(at::equal(s.label.to(at::kFloat), lab.data));
  EXPECT_EQ(s.meta.affine, img.affine);
  EXPECT_EQ(axcodes(s.meta.affine), "RAS");
  EXPECT_NEAR(s.meta.affine[2][2], 2.0, 1e-12);
  EXPECT_GT(s.label.sum().item<double>(), 0);  // the organ survives the resampling
  ASSERT_NE(s.indices, nullptr);
  // Every step changes the cache key.
  PairOptions plain;
  EXPECT_NE(o.config_key(), plain.config_key());
  PairOptions other = o;
  other.prefix.pixdim = {1.5, 1.5, 2.5};
  EXPECT_NE(other.config_key(), o.config_key());
  other.prefix.pixdim = {1.5, 1.5, 2.0000001};  // past six digits: still another key
  EXPECT_NE(other.config_key(), o.config_key());
}

// prefix_order as MONAI's spleen notebook runs it (window and crop first,
// then Orientation and Spacing): the same steps by hand in that order, the
// label following each move; another volume than the default order's; the
// trace's moves in the order they ran; the cache key names the order.
TEST(PrefixTest, TheNotebooksOrderCropsFirstAndEqualsItsTransformsInThatOrder) {
  const CtPair ct = write_ct(test_dir());
  PairOptions o;
  o.prefix = spleen_prefix();
  o.prefix.order = {"intensity", "crop_foreground", "orientation", "spacing"};
  const Sample s = load_pair(ct.pair, 2, o);
  const Volume image = read_volume_as_float(ct.pair.image);
  const Volume label = read_volume_as_float(ct.pair.label);
  SpatialImage img{scale_intensity_range(image.data, o.prefix.range), image.affine};
  SpatialImage lab{label.data, image.affine};
  const VoxelBox box = foreground_box(img.data);
  img = crop_box(img, box);
  lab = crop_box(lab, box);
  img = spacing(orient(img, "RAS"), {1.5, 1.5, 2.0}, Interpolation::kBilinear);
  lab = spacing(orient(lab, "RAS"), {1.5, 1.5, 2.0}, Interpolation::kNearest);
  ASSERT_EQ(s.image.sizes(), img.data.sizes());
  EXPECT_TRUE(at::equal(s.image, img.data));
  EXPECT_TRUE(at::equal(s.label.to(at::kFloat), lab.data));
  EXPECT_EQ(s.meta.affine, img.affine);
  PairOptions tutorial_order = o;
  tutorial_order.prefix.order = PrefixOptions().order;
  const Sample t = load_pair(ct.pair, 2, tutorial_order);
  EXPECT_TRUE(s.image.sizes() != t.image.sizes() || !at::equal(s.image, t.image));
  EXPECT_NE(o.config_key(), tutorial_order.config_key());
  EXPECT_THAT(o.config_key(), HasSubstr("\"prefix_order\":[\"intensity\",\"crop_foreground\","
                                        "\"orientation\",\"spacing\"]"));
  EXPECT_THAT(o.config_key(), HasSubstr("\"a_min\":-57.0"));
  PrefixTrace trace;
  (void)prepare_image(image, o, &trace);
  ASSERT_EQ(trace.moves.size(), 3u);
  EXPECT_EQ(trace.moves[0].kind, PrefixStep::kCropForeground);
  EXPECT_EQ(trace.moves[1].kind, PrefixStep::kOrientation);
  EXPECT_EQ(trace.moves[2].kind, PrefixStep::kSpacing);
  EXPECT_EQ(trace.moves[0].box.start, box.start);
  EXPECT_EQ(trace.prepared().shape,
            (std::array<int64_t, 3>{img.data.size(1), img.data.size(2), img.data.size(3)}));
  // Back onto the file's grid: nearest there and back keeps the organ (90
  // voxels at 5 mm; MONAI's Invertd of its own notebook transforms scores the
  // same 0.769 on this case, 0.889 in the other order).
  const at::Tensor back = invert_prefix(s.label.to(at::kFloat), trace, Interpolation::kNearest);
  ASSERT_EQ(back.sizes(), ct.label.sizes());
  const at::Tensor truth = ct.label.to(at::kFloat);
  const double dice = 2 * (back * truth).sum().item<double>() /
                      (back.sum().item<double>() + truth.sum().item<double>());
  EXPECT_GT(dice, 0.75);
  EXPECT_EQ(back.slice(1, 0, box.start[0]).abs().sum().item<double>(), 0)
      << "zeros where the crop cut";
}

TEST(PrefixTest, InvertPrefixBringsAPredictionBackOntoTheFilesGrid) {
  const CtPair ct = write_ct(test_dir());
  PairOptions o;
  o.prefix = spleen_prefix();
  PrefixTrace trace;
  const Volume v = read_volume_as_float(ct.pair.image);
  const SpatialImage prepared = prepare_image(v, o, &trace);
  EXPECT_EQ(trace.stored.shape, (std::array<int64_t, 3>{23, 19, 6}));
  EXPECT_EQ(trace.stored.affine, v.affine);
  EXPECT_NE(trace.prepared().shape, trace.stored.shape);
  // The label, prepared, then inverted with nearest: the organ lands where it was.
  const Sample s = load_pair(ct.pair, 0, o);
  ASSERT_EQ(s.label.sizes(), prepared.data.sizes());
  const at::Tensor back = invert_prefix(s.label.to(at::kFloat), trace, Interpolation::kNearest);
  ASSERT_EQ(back.sizes(), ct.label.sizes());
  const at::Tensor truth = ct.label.to(at::kFloat);
  const double inter = (back * truth).sum().item<double>();
  const double dice = 2 * inter / (back.sum().item<double>() + truth.sum().item<double>());
  EXPECT_GT(dice, 0.8) << "nearest there and back keeps the organ";
  // Without a prefix that moves the grid, the prediction comes back unchanged.
  PairOptions identity;
  PrefixTrace same;
  const SpatialImage p2 = prepare_image(v, identity, &same);
  const at::Tensor x = at::rand(p2.data.sizes());
  EXPECT_TRUE(at::equal(invert_prefix(x, same, Interpolation::kBilinear), x));
}

// Spacing to a grid that passes the up-front check (the machine's memory)
// but not what the process can have: the error names the file, the step and
// its grid, and the size asked (it was "DataLoader: dataset index 1:
// std::bad_alloc"), from volshard's allocator as the command-line tools run,
// and from c10's own where it is not installed (a Python user who did not call
// tune_allocator_for_volumes, or an allocation below the large blocks: that
// was c10's "DefaultCPUAllocator: can't allocate memory" with a C++ backtrace,
// naming neither the file nor the step).
TEST(PrefixTest, AnAllocationThatFailsNamesTheFileTheStepAndTheSizeWhicheverAllocatorRefused) {
  const std::string dir = test_dir();
  const CtPair ct = write_ct(dir);
  PairOptions o;
  o.prefix = spleen_prefix();
  o.prefix.pixdim = {0.01, 0.01,
                     0.05};  // 1761 x 1441 x 501 (after CropForeground): 5.1 GB of float32
  for (const bool tuned : {true, false}) {
    SCOPED_TRACE(tuned ? "volshard's allocator" : "c10's allocator");
    const std::string text = testing::out_of_memory_in_child(dir, [&] {
      at::set_num_threads(1);  // no OpenMP pool in a forked child
      if (tuned) tune_allocator_for_volumes();
      (void)load_pair(ct.pair, 0, o);
    });
    EXPECT_THAT(text, HasSubstr(ct.pair.image +
                                ": Spacing to a 1761x1441x501 grid: could not allocate 5.1 GB "));
    EXPECT_THAT(text, ::testing::Not(HasSubstr("DefaultCPUAllocator")));
  }
}

// read_volume names the file and the header's volume once (read_nifti had
// named them, and read_volume named them again).
TEST(PrefixTest, AVolumeTooLargeToReadIsNamedOnce) {
  const std::string dir = test_dir();
  const std::string path = dir + "/big.nii.gz";
  testing::write_huge_nifti_gz(path);
  const std::string text = testing::out_of_memory_in_child(dir, [&] { (void)read_volume(path); });
  const std::string named = path + ": its header gives 2000 x 1000 x 1000 int16 voxels (4.0 GB): ";
  EXPECT_THAT(text, ::testing::StartsWith(named + "could not allocate 4.0 GB (4000000352 bytes)"));
  EXPECT_EQ(text.find(named, 1), std::string::npos) << text;
}

TEST(PrefixTest, LabelValuesOutsideTheClassesAreRefusedNamingFileAndValue) {
  const std::string dir = test_dir();
  write_volume(dir + "/img.nii.gz", at::rand({1, 6, 5, 4}), identity_affine());
  at::Tensor label = at::zeros({1, 6, 5, 4}, at::kInt);
  label[0][1][2][3] = 7;
  write_volume(dir + "/seg.nii.gz", label, identity_affine());
  PairOptions o;
  o.prefix.num_classes = 3;
  try {
    load_pair({dir + "/img.nii.gz", dir + "/seg.nii.gz"}, 0, o);
    FAIL() << "label value 7 accepted with 3 classes";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir + "/seg.nii.gz"));
    EXPECT_THAT(e.what(), HasSubstr("label value 7"));
    EXPECT_THAT(e.what(), HasSubstr("[0, 3)"));
  }
  o.prefix.num_classes = 8;
  EXPECT_NO_THROW(load_pair({dir + "/img.nii.gz", dir + "/seg.nii.gz"}, 0, o));
  // Float labels must hold integers.
  write_volume(dir + "/half.nii.gz", label.to(at::kFloat) * 0.25, identity_affine());
  EXPECT_THROW(load_pair({dir + "/img.nii.gz", dir + "/half.nii.gz"}, 0, o), std::runtime_error);
}

TEST(PrefixTest, BratsPrefixGivesThreeRegionChannelsAndDefersNormalisationToTheCrops) {
  const std::string dir = test_dir();
  at::manual_seed(5);
  const at::Tensor image = at::rand({4, 10, 9, 8}) + 1;
  image.slice(1, 0, 2).zero_();
  at::Tensor label = at::zeros({1, 10, 9, 8}, at::kByte);
  label.slice(1, 3, 7).slice(2, 3, 7).fill_(1);  // edema
  label.slice(1, 4, 6).slice(2, 4, 6).fill_(2);  // non-enhancing
  label.slice(1, 5, 6).slice(2, 5, 6).fill_(3);  // enhancing
  write_volume(dir + "/mri.nii.gz", image, identity_affine());
  write_volume(dir + "/mri_seg.nii.gz", label, identity_affine());
  FeedOptions feed;
  feed.prefix.labels = LabelMap::kDecathlonBrats;
  feed.prefix.intensity = IntensityKind::kNormalize;
  feed.prefix.normalize.nonzero = true;
  feed.prefix.normalize.channel_wise = true;
  feed.prefix.num_classes = 4;
  feed.crop_kind = CropKind::kSpatial;
  feed.crop = {4};
  feed.num_samples = 2;
  feed.flip_prob = 0.5;
  feed.rand_scale = 0.1;
  feed.rand_shift = 0.1;
  const ImageLabelPair pair{dir + "/mri.nii.gz", dir + "/mri_seg.nii.gz"};
  const Sample cached = load_pair(pair, 0, feed_prefix(feed));
  ASSERT_EQ(cached.label.size(0), 3);
  EXPECT_TRUE(at::equal(cached.label, brats_channels(label, BratsLabels::kDecathlon)));
  EXPECT_TRUE(at::allclose(cached.image, image)) << "normalisation waits for the crop";
  EXPECT_EQ(cached.indices, nullptr) << "RandSpatialCrop needs no label scan";
  const Sample whole = load_pair(pair, 0, whole_volume_prefix(feed.prefix));
  EXPECT_TRUE(at::allclose(whole.image, normalize_intensity(image, feed.prefix.normalize)));
  // The augmentation: two crops of 4^3, each normalised on its own.
  const auto crops = feed_augmentation(feed)(cached, 99);
  ASSERT_EQ(crops.size(), 2u);
  for (const Sample& c : crops) {
    EXPECT_EQ(c.image.sizes(), (at::IntArrayRef{4, 4, 4, 4}));
    EXPECT_EQ(c.label.sizes(), (at::IntArrayRef{3, 4, 4, 4}));
  }
  EXPECT_TRUE(at::equal(feed_augmentation(feed)(cached, 99)[1].image, crops[1].image));
}

// What the Decathlon's Hippocampus files hold (uint8 images, float32 labels
// of class indices, a different shape per case) through its config's prefix:
// normalised over the whole volume once (normalize_on volume), then padded
// symmetrically with zeros (SpatialPad) so that every crop batches; the
// augmentation then normalises nothing, and validation's whole-volume
// prefix keeps the volume unpadded.
TEST(PrefixTest, VolumeNormalisationAndSpatialPadAsTheHippocampusConfigRunsThem) {
  const std::string dir = test_dir();
  at::manual_seed(9);
  const at::Tensor image = at::randint(2, 140, {1, 5, 7, 3}, at::kByte);
  at::Tensor label = at::zeros({1, 5, 7, 3});
  label.slice(1, 1, 3).slice(2, 2, 5).fill_(1);
  label.slice(1, 3, 4).slice(2, 2, 5).fill_(2);
  write_volume(dir + "/hippocampus_001.nii.gz", image, identity_affine());
  write_volume(dir + "/hippocampus_001_seg.nii.gz", label, identity_affine());  // float32
  const ImageLabelPair pair{dir + "/hippocampus_001.nii.gz", dir + "/hippocampus_001_seg.nii.gz"};
  FeedOptions feed;
  feed.prefix.intensity = IntensityKind::kNormalize;
  feed.prefix.normalize_on = NormalizeOn::kVolume;
  feed.prefix.spatial_pad = {8};
  feed.prefix.num_classes = 3;
  feed.crop = {8};
  feed.num_samples = 2;
  feed.rot90_prob = 0;
  const Sample cached = load_pair(pair, 0, feed_prefix(feed));
  ASSERT_EQ(cached.image.sizes(), (at::IntArrayRef{1, 8, 8, 8}));
  ASSERT_EQ(cached.label.sizes(), (at::IntArrayRef{1, 8, 8, 8}));
  // MONAI's symmetric widths: x 3 -> 1 before, y 1 -> 0, z 5 -> 2.
  const at::Tensor normalised = normalize_intensity(image.to(at::kFloat), {});
  const auto inner = [](const at::Tensor& t) {
    return t.slice(1, 1, 6).slice(2, 0, 7).slice(3, 2, 5);
  };
  EXPECT_TRUE(at::allclose(inner(cached.image), normalised, 1e-6, 1e-6));
  at::Tensor outside = cached.image.clone();
  inner(outside).zero_();
  EXPECT_EQ(outside.abs().max().item<double>(), 0.0) << "zeros outside";
  EXPECT_TRUE(at::equal(inner(cached.label).to(at::kFloat), label));
  EXPECT_EQ(cached.label.sum().item<double>(), label.sum().item<double>());
  EXPECT_EQ(cached.meta.affine[0][3], -1.0);  // the world stays where it was
  EXPECT_EQ(cached.meta.affine[2][3], -2.0);
  // Crops of the padded volume, not normalised again.
  for (const Sample& c : feed_augmentation(feed)(cached, 4)) {
    EXPECT_TRUE(at::equal(c.image, cached.image));
    EXPECT_TRUE(at::equal(c.label, cached.label));
  }
  // Validation and prediction: the volume as it is, normalised the same way.
  const Sample whole = load_pair(pair, 0, whole_volume_prefix(feed.prefix));
  EXPECT_EQ(whole.image.sizes(), (at::IntArrayRef{1, 5, 7, 3}));
  EXPECT_TRUE(at::allclose(whole.image, normalised, 1e-6, 1e-6));
  // The cache key tells the two normalisations and the pad apart.
  FeedOptions per_crop = feed;
  per_crop.prefix.normalize_on = NormalizeOn::kCrop;
  EXPECT_NE(feed_prefix(feed).config_key(), feed_prefix(per_crop).config_key());
  per_crop.prefix.spatial_pad.clear();
  EXPECT_THAT(feed_prefix(feed).config_key(), HasSubstr("spatial_pad"));
}

TEST(PrefixTest, BadOptionsNameTheField) {
  PrefixOptions p;
  p.pixdim = {1.5, 0, 2};
  EXPECT_THAT([&] { p.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("pixdim=1.5,0,2")));
  p.pixdim = {1, 1};
  EXPECT_THROW(p.validate(), std::invalid_argument);
  p.pixdim.clear();
  p.orientation = "RAR";
  EXPECT_THAT([&] { p.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("orientation=RAR")));
  // One rule with Orientation's (nibabel's): upper case only. The prefix
  // refused "ras" while orient() took it.
  p.orientation = "ras";
  EXPECT_THAT([&] { p.validate(); }, ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr(
                                         "orientation=ras has 'r', not one of L R P A I S")));
  p.orientation = "LPS";
  EXPECT_NO_THROW(p.validate());
  p.spatial_pad = {40, 56};
  EXPECT_THAT([&] { p.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("spatial_pad=40,56")));
  p.spatial_pad = {40, -1, 40};
  EXPECT_THROW(p.validate(), std::invalid_argument);
  p.spatial_pad = {40, 0, 40};
  EXPECT_NO_THROW(p.validate());
  p.order = {"intensity", "crop_foreground", "orientation"};
  EXPECT_THAT([&] { p.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("prefix_order=intensity,crop_foreground,orientation: name each of "
                            "orientation, spacing, intensity, crop_foreground once")));
  p.order = {"intensity", "spacing", "orientation", "spacing"};
  EXPECT_THAT([&] { p.validate(); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                         HasSubstr("'spacing' is named twice")));
  p.order = {"intensity", "crop", "orientation", "spacing"};
  EXPECT_THAT([&] { p.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("'crop' is not a step")));
}

}  // namespace
}  // namespace volshard
