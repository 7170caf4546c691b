#include "volshard/datasets/image2d.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "volshard/datasets/cache.h"
#include "volshard/datasets/datalist.h"
#include "volshard/datasets/loader.h"
#include "volshard/transforms/transforms.h"
#include "volume_io/nifti_test_util.h"

namespace volshard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace volshard::testing;

std::string written(const std::string& path, const cv::Mat& m) {
  if (!cv::imwrite(path, m)) throw std::runtime_error("cv::imwrite failed for " + path);
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

std::vector<int64_t> shape_of(const at::Tensor& t) { return t.sizes().vec(); }

TEST(ReadImage2DTest, GrayscaleIsOneChannelIndexedRowThenColumn) {
  const std::string dir = test_dir();
  cv::Mat m(5, 7, CV_8U);
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 7; ++c) m.at<uint8_t>(r, c) = static_cast<uint8_t>((r * 7 + c) * 7);
  const at::Tensor t = read_image_2d(written(dir + "/g.png", m));
  ASSERT_EQ(shape_of(t), (std::vector<int64_t>{1, 5, 7, 1}));
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_TRUE(t.is_contiguous());
  const auto a = t.accessor<float, 4>();
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 7; ++c)
      ASSERT_EQ(a[0][r][c][0], static_cast<float>((r * 7 + c) * 7)) << r << "," << c;
}

TEST(ReadImage2DTest, SixteenBitValuesArePreservedExactly) {
  const std::string dir = test_dir();
  cv::Mat m(4, 6, CV_16U);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c)
      m.at<uint16_t>(r, c) = static_cast<uint16_t>(60000 + r * 1000 + c * 7);
  m.at<uint16_t>(3, 5) = 65535;
  const at::Tensor t = read_image_2d(written(dir + "/g16.png", m));
  ASSERT_EQ(shape_of(t), (std::vector<int64_t>{1, 4, 6, 1}));
  const auto a = t.accessor<float, 4>();
  EXPECT_EQ(a[0][0][0][0], 60000.0f);
  EXPECT_EQ(a[0][2][3][0], 62021.0f);
  EXPECT_EQ(a[0][3][5][0], 65535.0f);
}

TEST(ReadImage2DTest, ColourIsThreeChannelsInRgbOrder) {
  const std::string dir = test_dir();
  for (const int depth : {CV_8U, CV_16U}) {
    SCOPED_TRACE(depth == CV_8U ? "8-bit" : "16-bit");
    const double scale = depth == CV_8U ? 1 : 250;
    cv::Mat m(3, 4, CV_MAKETYPE(depth, 3));
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 4; ++c) {
        const cv::Scalar bgr((10 + r) * scale, (100 + c) * scale, (200 + r * 4 + c) * scale);
        m.row(r).col(c).setTo(bgr);
      }
    }
    const at::Tensor t = read_image_2d(written(dir + "/rgb" + std::to_string(depth) + ".png", m));
    ASSERT_EQ(shape_of(t), (std::vector<int64_t>{3, 3, 4, 1}));
    const auto a = t.accessor<float, 4>();
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 4; ++c) {
        EXPECT_EQ(a[0][r][c][0], static_cast<float>((200 + r * 4 + c) * scale));  // red
        EXPECT_EQ(a[1][r][c][0], static_cast<float>((100 + c) * scale));          // green
        EXPECT_EQ(a[2][r][c][0], static_cast<float>((10 + r) * scale));           // blue
      }
    }
  }
}

TEST(ReadImage2DTest, DropsAlphaAndCanConvertColourToGray) {
  const std::string dir = test_dir();
  cv::Mat bgra(2, 3, CV_8UC4, cv::Scalar(30, 60, 90, 128));
  const std::string path = written(dir + "/rgba.png", bgra);
  const at::Tensor rgb = read_image_2d(path);
  ASSERT_EQ(shape_of(rgb), (std::vector<int64_t>{3, 2, 3, 1}));
  EXPECT_EQ(rgb[0][1][2][0].item<float>(), 90.0f);
  EXPECT_EQ(rgb[2][1][2][0].item<float>(), 30.0f);
  Read2DOptions gray;
  gray.image_grayscale = true;
  const at::Tensor g = read_image_2d(path, gray);
  ASSERT_EQ(shape_of(g), (std::vector<int64_t>{1, 2, 3, 1}));
  EXPECT_NEAR(g[0][0][0][0].item<float>(), 0.299 * 90 + 0.587 * 60 + 0.114 * 30, 1.0);
}

TEST(ReadImage2DTest, ReadsJpegInRgbOrder) {
  const std::string dir = test_dir();
  const cv::Mat m(16, 24, CV_8UC3, cv::Scalar(50, 100, 200));  // BGR
  const std::string path = dir + "/c.jpg";
  ASSERT_TRUE(cv::imwrite(path, m, {cv::IMWRITE_JPEG_QUALITY, 100}));
  const at::Tensor t = read_image_2d(path);
  ASSERT_EQ(shape_of(t), (std::vector<int64_t>{3, 16, 24, 1}));
  EXPECT_NEAR(t[0].mean().item<float>(), 200.0f, 3.0f);
  EXPECT_NEAR(t[1].mean().item<float>(), 100.0f, 3.0f);
  EXPECT_NEAR(t[2].mean().item<float>(), 50.0f, 3.0f);
}

TEST(ReadMask2DTest, KeepsMaskValuesAsStored) {
  const std::string dir = test_dir();
  cv::Mat classes(3, 3, CV_8U, cv::Scalar(0));
  classes.at<uint8_t>(1, 1) = 2;
  classes.at<uint8_t>(2, 0) = 1;
  const at::Tensor a = read_mask_2d(written(dir + "/classes.png", classes));
  ASSERT_EQ(shape_of(a), (std::vector<int64_t>{1, 3, 3, 1}));
  EXPECT_EQ(a[0][1][1][0].item<float>(), 2.0f);
  EXPECT_EQ(a[0][2][0][0].item<float>(), 1.0f);
  EXPECT_EQ(a.sum().item<float>(), 3.0f);
  cv::Mat binary(2, 2, CV_8U, cv::Scalar(255));
  EXPECT_EQ(read_mask_2d(written(dir + "/binary.png", binary))[0][0][0][0].item<float>(), 255.0f);
  cv::Mat wide(2, 2, CV_16U, cv::Scalar(300));
  EXPECT_EQ(read_mask_2d(written(dir + "/wide.png", wide))[0][1][1][0].item<float>(), 300.0f);
  // Gray saved as RGB is still one channel.
  cv::Mat grey_rgb(2, 2, CV_8UC3, cv::Scalar(4, 4, 4));
  EXPECT_EQ(shape_of(read_mask_2d(written(dir + "/grey_rgb.png", grey_rgb))),
            (std::vector<int64_t>{1, 2, 2, 1}));
}

TEST(ReadMask2DTest, RefusesAColourMaskNamingIt) {
  const std::string dir = test_dir();
  cv::Mat colour(2, 2, CV_8UC3, cv::Scalar(0, 0, 0));
  colour.at<cv::Vec3b>(1, 0) = cv::Vec3b(0, 0, 128);
  const std::string path = written(dir + "/voc_style.png", colour);
  const std::string e = error_of([&] { (void)read_mask_2d(path); });
  EXPECT_THAT(e, HasSubstr(path + ": a mask needs one channel"));
  EXPECT_THAT(e, HasSubstr("row 1, column 0"));
}

TEST(ReadImage2DTest, NamesFilesItCannotRead) {
  const std::string dir = test_dir();
  EXPECT_THAT(error_of([&] { (void)read_image_2d(dir + "/missing.png"); }),
              HasSubstr(dir + "/missing.png: cannot open: No such file"));
  write_bytes(dir + "/notes.png", {'h', 'e', 'l', 'l', 'o'});
  EXPECT_THAT(error_of([&] { (void)read_image_2d(dir + "/notes.png"); }),
              HasSubstr(dir + "/notes.png: not an image OpenCV can decode"));
  write_bytes(dir + "/empty.png", {});
  EXPECT_THAT(error_of([&] { (void)read_mask_2d(dir + "/empty.png"); }),
              HasSubstr(dir + "/empty.png: empty file"));
  EXPECT_THAT(error_of([&] { (void)read_image_2d(dir); }), HasSubstr(dir + ": not a regular file"));
  // A PNG cut short.
  const cv::Mat m(32, 32, CV_8U, cv::Scalar(7));
  std::vector<uint8_t> png;
  cv::imencode(".png", m, png);
  png.resize(png.size() / 2);
  write_bytes(dir + "/cut.png", png);
  EXPECT_THAT(error_of([&] { (void)read_image_2d(dir + "/cut.png"); }),
              HasSubstr(dir + "/cut.png: "));
}

TEST(ReadImagePair2DTest, PairsImageAndMaskFromAFolderWithGlobs) {
  const std::string dir = test_dir();
  for (int i : {0, 1, 10, 2}) {
    const std::string n = std::to_string(i);
    written(dir + "/img" + n + ".png", cv::Mat(4, 5, CV_8UC3, cv::Scalar(i, 2 * i, 3 * i)));
    written(dir + "/mask" + n + ".png", cv::Mat(4, 5, CV_8U, cv::Scalar(i % 2)));
  }
  written(dir + "/img_preview.jpg", cv::Mat(4, 5, CV_8UC3, cv::Scalar(0, 0, 0)));  // not a *.png
  const auto pairs = pairs_from_folder(dir, "img*.png", "mask*.png");
  ASSERT_EQ(pairs.size(), 4u);
  EXPECT_THAT(pairs[3].image, HasSubstr("img10.png"));
  const Sample s = read_image_pair_2d(pairs[3].image, pairs[3].label);
  EXPECT_EQ(shape_of(s.image), (std::vector<int64_t>{3, 4, 5, 1}));
  EXPECT_EQ(shape_of(s.label), (std::vector<int64_t>{1, 4, 5, 1}));
  EXPECT_EQ(s.image[0][0][0][0].item<float>(), 30.0f);  // red = 3 * i
  EXPECT_EQ(s.label.sum().item<float>(), 0.0f);
  EXPECT_EQ(s.meta.source, pairs[3].image);
}

TEST(ReadImagePair2DTest, ShapeMismatchNamesBothFilesAndShapes) {
  const std::string dir = test_dir();
  const std::string image = written(dir + "/img0.png", cv::Mat(5, 7, CV_8U, cv::Scalar(1)));
  const std::string mask = written(dir + "/mask0.png", cv::Mat(5, 6, CV_8U, cv::Scalar(1)));
  const std::string e = error_of([&] { (void)read_image_pair_2d(image, mask); });
  EXPECT_THAT(e, HasSubstr("image " + image + " is 5 x 7 (rows x columns)"));
  EXPECT_THAT(e, HasSubstr("mask " + mask + " is 5 x 6 (rows x columns)"));
}

// A 12 x 10 image whose pixel (r, c) is r * 10 + c, with a foreground block.
std::pair<std::string, std::string> block_pair(const std::string& dir, int i) {
  cv::Mat image(12, 10, CV_8U), mask(12, 10, CV_8U, cv::Scalar(0));
  for (int r = 0; r < 12; ++r)
    for (int c = 0; c < 10; ++c) image.at<uint8_t>(r, c) = static_cast<uint8_t>(r * 10 + c + i);
  mask(cv::Rect(/*x=*/6, /*y=*/3, /*w=*/3, /*h=*/2)).setTo(1);  // rows 3-4, columns 6-8
  return {written(dir + "/img" + std::to_string(i) + ".png", image),
          written(dir + "/mask" + std::to_string(i) + ".png", mask)};
}

TEST(Image2DTransformsTest, CropsRunOnTwoDimensionalSamples) {
  const std::string dir = test_dir();
  const auto [image, mask] = block_pair(dir, 0);
  Sample s = read_image_pair_2d(image, mask);
  s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
  EXPECT_EQ(s.indices->foreground.size(), 6u);

  PosNegCropOptions pos_only;
  pos_only.spatial_size = {4, 4, 1};
  pos_only.neg = 0;
  pos_only.num_samples = 3;
  const Compose crops({make_rand_crop_by_pos_neg_label(pos_only)});
  const Compose spatial({make_rand_spatial_crop({5, 3, 1})});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto patches = crops(s, seed);
    ASSERT_EQ(patches.size(), 3u);
    for (const Sample& p : patches) {
      ASSERT_EQ(shape_of(p.image), (std::vector<int64_t>{1, 4, 4, 1}));
      ASSERT_EQ(shape_of(p.label), (std::vector<int64_t>{1, 4, 4, 1}));
      EXPECT_TRUE(p.meta.foreground_centre);
      EXPECT_GT(p.label.sum().item<float>(), 0.0f);  // a foreground centre lies inside its crop
      const auto [r0, c0, z0] = p.meta.crop_start;
      EXPECT_EQ(z0, 0);
      EXPECT_EQ(p.image[0][0][0][0].item<float>(), static_cast<float>(r0 * 10 + c0));
      EXPECT_EQ(p.image[0][3][2][0].item<float>(), static_cast<float>((r0 + 3) * 10 + c0 + 2));
    }
    const auto window = spatial(s, seed);
    ASSERT_EQ(window.size(), 1u);
    ASSERT_EQ(shape_of(window[0].image), (std::vector<int64_t>{1, 5, 3, 1}));
    const auto [r0, c0, z0] = window[0].meta.crop_start;
    EXPECT_TRUE(at::equal(window[0].image, s.image.slice(1, r0, r0 + 5).slice(2, c0, c0 + 3)));
    EXPECT_TRUE(at::equal(window[0].label, s.label.slice(1, r0, r0 + 5).slice(2, c0, c0 + 3)));
    EXPECT_EQ(z0, 0);
  }
}

TEST(Image2DTransformsTest, TheLoaderBatchesTwoDimensionalCropsFromAPersistentCache) {
  const std::string dir = test_dir();
  for (int i = 0; i < 4; ++i) block_pair(dir, i);
  const auto pairs = pairs_from_folder(dir, "img*.png", "mask*.png");
  int calls = 0;
  const SampleSource prepare = [&](int64_t i) {
    ++calls;
    Sample s = read_image_pair_2d(pairs[static_cast<size_t>(i)].image,
                                  pairs[static_cast<size_t>(i)].label);
    s.image = scale_intensity(s.image);
    s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
    return s;
  };
  CacheOptions o;
  o.threads = 1;
  o.cache_dir = dir + "/cache";
  o.config_key = "png scale_intensity label_indices";
  o.item_files = files_of(pairs);
  const SampleCache cold(prepare, 4, o);
  const SampleCache warm(prepare, 4, o);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(warm.loaded_from_disk(), 4);

  LoaderOptions lo;
  lo.workers = 2;
  // The tutorial's rot90 turns axes (0, 2); a 2D sample turns (0, 1), in its plane.
  PosNegCropOptions crop;
  crop.spatial_size = {4, 4, 1};
  crop.num_samples = 2;
  Rotate90Options rot;
  rot.prob = 0.5;
  rot.spatial_axes = {0, 1};
  const Compose pipeline({make_rand_crop_by_pos_neg_label(crop), make_rand_rotate90(rot)});
  DataLoader a(cold.source(), pipeline, lo), b(warm.source(), pipeline, lo);
  a.start_epoch({2, 0, 3, 1}, 0);
  b.start_epoch({2, 0, 3, 1}, 0);
  int batches = 0;
  while (auto x = a.next()) {
    auto y = b.next();
    ASSERT_TRUE(y.has_value());
    EXPECT_EQ(shape_of(x->image), (std::vector<int64_t>{4, 1, 4, 4, 1}));
    EXPECT_TRUE(at::equal(x->image, y->image));
    EXPECT_TRUE(at::equal(x->label, y->label));
    ++batches;
  }
  EXPECT_EQ(batches, 2);
}

}  // namespace
}  // namespace volshard
