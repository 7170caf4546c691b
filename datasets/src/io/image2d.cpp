#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include "volshard/datasets/image2d.h"
#include "volshard/core/error.h"
#include "volshard/core/file_io.h"

#include <ATen/ops/empty.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#ifdef VOLSHARD_HAVE_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#endif
#include <stdexcept>
#include <vector>

namespace volshard {
namespace {

std::string shape_text(const at::Tensor& t) {
  return std::to_string(t.size(1)) + " x " + std::to_string(t.size(2)) + " (rows x columns)";
}

}  // namespace

#ifdef VOLSHARD_HAVE_OPENCV
namespace {

// Read ourselves rather than through cv::imread, which reports a missing
// file, a directory and a corrupt image alike as an empty Mat.
std::vector<uint8_t> read_image_file(const std::string& path) {
  int64_t size = 0;
  const Fd fd = open_for_reading(path, &size);
  if (size > INT_MAX) fail_file(path, "larger than the 2 GiB OpenCV decodes from memory");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  read_exactly(fd.get(), bytes.data(), bytes.size(), 0, path);
  return bytes;
}

cv::Mat decode(const std::string& path, int flags) {
  std::vector<uint8_t> bytes = read_image_file(path);
  if (bytes.empty()) fail_file(path, "empty file, not an image");
  cv::Mat image;
  try {
    image = cv::imdecode(cv::Mat(1, static_cast<int>(bytes.size()), CV_8U, bytes.data()), flags);
  } catch (const cv::Exception& e) {
    fail_file(path, std::string("OpenCV cannot decode it: ") + e.what());
  }
  if (image.empty()) fail_file(path, "not an image OpenCV can decode (PNG, JPEG, TIFF, BMP, ...)");
  return image;
}

// Pixels as stored (no EXIF rotation), 16-bit kept, alpha dropped.
constexpr int kAsStored = cv::IMREAD_ANYDEPTH | cv::IMREAD_ANYCOLOR | cv::IMREAD_IGNORE_ORIENTATION;

// Interleaved H x W x C (BGR order for colour) to planar C x H x W x 1 float32, RGB.
at::Tensor to_channel_first(const cv::Mat& image, int64_t channels) {
  cv::Mat f;
  image.convertTo(f, CV_32F);
  const int C = f.channels();
  const int64_t H = f.rows, W = f.cols;
  at::Tensor out = at::empty({channels, H, W, 1}, at::TensorOptions().dtype(at::kFloat));
  float* o = out.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t src = C >= 3 && c < 3 ? 2 - c : c;  // BGR(A) -> RGB(A)
    for (int64_t r = 0; r < H; ++r) {
      const float* row = f.ptr<float>(static_cast<int>(r));
      float* dst = o + (c * H + r) * W;
      for (int64_t x = 0; x < W; ++x) dst[x] = row[x * C + src];
    }
  }
  return out;
}


}  // namespace

at::Tensor read_image_2d(const std::string& path, const Read2DOptions& options) {
  const int flags = options.image_grayscale
                        ? cv::IMREAD_GRAYSCALE | cv::IMREAD_ANYDEPTH | cv::IMREAD_IGNORE_ORIENTATION
                        : kAsStored;
  const cv::Mat image = decode(path, flags);
  return to_channel_first(image, image.channels() >= 3 ? 3 : image.channels());
}

at::Tensor read_mask_2d(const std::string& path) {
  const cv::Mat mask = decode(path, kAsStored);
  if (mask.channels() > 1) {
    // Gray stored as RGB is fine; real colours are not class indices.
    cv::Mat f;
    mask.convertTo(f, CV_32F);
    const int C = f.channels();
    for (int r = 0; r < f.rows; ++r) {
      const float* row = f.ptr<float>(r);
      for (int x = 0; x < f.cols; ++x) {
        for (int c = 1; c < C; ++c) {
          if (row[x * C + c] != row[x * C]) {
            fail_file(path, "a mask needs one channel; this one has " + std::to_string(C) +
                                " whose values differ (row " + std::to_string(r) + ", column " +
                                std::to_string(x) +
                                "): a colour or palette image? Store class indices as grayscale");
          }
        }
      }
    }
  }
  return to_channel_first(mask, 1);
}

#else
// A build without OpenCV (the GPU machine's, scripts/gpu/): 2D files are named
// and refused; volumes are unaffected.
namespace {
[[noreturn]] void no_opencv(const std::string& path) {
  fail_file(path, "this volshard was built without OpenCV, so it reads no 2D images; rebuild with "
                  "OpenCV (libopencv-dev) for PNG/JPEG datasets");
}
}  // namespace

at::Tensor read_image_2d(const std::string& path, const Read2DOptions&) { no_opencv(path); }
at::Tensor read_mask_2d(const std::string& path) { no_opencv(path); }
#endif

Sample read_image_pair_2d(const std::string& image_path, const std::string& mask_path,
                          const Read2DOptions& options) {
  Sample s;
  s.image = read_image_2d(image_path, options);
  s.label = read_mask_2d(mask_path);
  if (s.image.size(1) != s.label.size(1) || s.image.size(2) != s.label.size(2)) {
    throw std::runtime_error("read_image_pair_2d: image " + image_path + " is " +
                             shape_text(s.image) + " but mask " + mask_path + " is " +
                             shape_text(s.label));
  }
  s.meta.source = image_path;
  return s;
}

}  // namespace volshard
