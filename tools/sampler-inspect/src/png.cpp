#include "volshard/inspect/png.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace volshard::inspect {
namespace {

constexpr int64_t kMaxColumns = 4096;
constexpr int kLabelWidth = 80;
constexpr int kRowHeight = 26;
constexpr int kLegendHeight = 30;
constexpr int kMargin = 6;

// BGR; the first ten are the familiar "tab10" colours, more ranks cycle hues.
cv::Scalar rank_colour(int64_t rank) {
  static const cv::Scalar kTab10[] = {
      {180, 119, 31}, {14, 127, 255},  {44, 160, 44},   {40, 39, 214},  {189, 103, 148},
      {75, 86, 140},  {194, 119, 227}, {127, 127, 127}, {34, 189, 188}, {207, 190, 23}};
  if (rank < 10) return kTab10[rank];
  cv::Mat hsv(1, 1, CV_8UC3, cv::Scalar(static_cast<double>((rank * 37) % 180), 200, 220)), bgr;
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
  const auto px = bgr.at<cv::Vec3b>(0, 0);
  return {static_cast<double>(px[0]), static_cast<double>(px[1]), static_cast<double>(px[2])};
}

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

void put_chunk(std::string& out, const char* type, const std::string& body) {
  put_u32(out, static_cast<uint32_t>(body.size()));
  const std::string typed = std::string(type, 4) + body;
  out += typed;
  put_u32(out, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(typed.data()),
                                           static_cast<uInt>(typed.size()))));
}

void text(cv::Mat& img, const std::string& s, int x, int y, double scale = 0.45) {
  cv::putText(img, s, {x, y}, cv::FONT_HERSHEY_SIMPLEX, scale, {30, 30, 30}, 1, cv::LINE_AA);
}

}  // namespace

// An 8-bit RGB PNG (no filtering, zlib level 9). Written here rather than with
// cv::imwrite: opencv_imgcodecs drags ~120 shared libraries into every start of
// the tool (0.19 s instead of a few ms), for one PNG.
void write_png(const std::string& path, const cv::Mat& bgr) {
  if (bgr.type() != CV_8UC3)
    throw std::invalid_argument("write_png: '" + path + "': expected an 8-bit BGR image");
  std::string raw;
  raw.reserve(static_cast<size_t>(bgr.rows) * (static_cast<size_t>(bgr.cols) * 3 + 1));
  for (int y = 0; y < bgr.rows; ++y) {
    raw.push_back(0);  // filter: none
    const auto* row = bgr.ptr<cv::Vec3b>(y);
    for (int x = 0; x < bgr.cols; ++x) {
      raw.push_back(static_cast<char>(row[x][2]));
      raw.push_back(static_cast<char>(row[x][1]));
      raw.push_back(static_cast<char>(row[x][0]));
    }
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()),
                9) != Z_OK) {
    throw std::runtime_error("cannot write PNG '" + path + "': compression failed");
  }
  packed.resize(packed_size);
  std::string header;
  put_u32(header, static_cast<uint32_t>(bgr.cols));
  put_u32(header, static_cast<uint32_t>(bgr.rows));
  header += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, RGB, deflate, no filter, no interlace
  std::string png("\x89PNG\r\n\x1a\n", 8);
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", packed);
  put_chunk(png, "IEND", "");

  const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file || std::fwrite(png.data(), 1, png.size(), file.get()) != png.size()) {
    throw std::runtime_error("cannot write PNG '" + path + "'");
  }
}

void write_assignment_png(const std::string& path, int64_t n, int64_t world_size,
                          const std::vector<PngRow>& rows,
                          const std::vector<int64_t>& consumed_before) {
  if (n < 1 || n > kMaxColumns) {
    throw std::invalid_argument("--png: size=" + std::to_string(n) + " must be in [1, " +
                                std::to_string(kMaxColumns) + "] to draw one cell per sample");
  }
  const int cell = static_cast<int>(std::clamp<int64_t>(1400 / n, 3, 28));
  const int width = kLabelWidth + static_cast<int>(n) * cell + kMargin;
  const int height = kLegendHeight + static_cast<int>(rows.size()) * kRowHeight + kMargin;
  cv::Mat img(height, width, CV_8UC3, cv::Scalar(255, 255, 255));

  // Legend: rank colours (up to 16 shown) and the markers.
  int x = kMargin;
  for (int64_t r = 0; r < std::min<int64_t>(world_size, 16); ++r) {
    cv::rectangle(img, cv::Rect(x, 8, 14, 14), rank_colour(r), cv::FILLED);
    text(img, "r" + std::to_string(r), x + 17, 20);
    x += 48;
  }
  if (world_size > 16) {
    text(img, "...", x, 20);
    x += 30;
  }
  cv::circle(img, {x + 7, 15}, 3, {0, 0, 0}, cv::FILLED);
  text(img, "read twice (pad)", x + 14, 20);
  x += 140;
  cv::rectangle(img, cv::Rect(x, 8, 14, 14), {220, 220, 220}, cv::FILLED);
  text(img, "dropped", x + 17, 20);
  x += 80;
  if (!consumed_before.empty()) {
    cv::rectangle(img, cv::Rect(x, 8, 14, 14), {90, 90, 90}, cv::FILLED);
    text(img, "read before resume", x + 17, 20);
  }

  std::vector<bool> before(static_cast<size_t>(n), false);
  for (int64_t i : consumed_before) before[static_cast<size_t>(i)] = true;
  for (size_t row = 0; row < rows.size(); ++row) {
    const int y = kLegendHeight + static_cast<int>(row) * kRowHeight;
    text(img, "epoch " + std::to_string(rows[row].epoch), kMargin, y + kRowHeight / 2 + 5);
    std::vector<int64_t> owner(static_cast<size_t>(n), -1), reads(static_cast<size_t>(n), 0);
    const auto& shards = rows[row].shards;
    for (size_t r = shards.size(); r-- > 0;) {
      for (int64_t i : shards[r]) {
        owner[static_cast<size_t>(i)] = static_cast<int64_t>(r);
        ++reads[static_cast<size_t>(i)];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      const cv::Rect box(kLabelWidth + static_cast<int>(i) * cell, y + 2, std::max(cell - 1, 1),
                         kRowHeight - 4);
      if (before[k]) {
        cv::rectangle(img, box, {90, 90, 90}, cv::FILLED);
      } else if (owner[k] < 0) {
        cv::rectangle(img, box, {220, 220, 220}, cv::FILLED);
        cv::line(img, box.tl(), box.br(), {120, 120, 120});
      } else {
        cv::rectangle(img, box, rank_colour(owner[k]), cv::FILLED);
      }
      if (reads[k] + (before[k] ? 1 : 0) > 1) {
        cv::circle(img, {box.x + box.width / 2, box.y + box.height / 2},
                   std::max(1, std::min(cell / 4, 4)), {255, 255, 255}, cv::FILLED);
      }
    }
  }
  write_png(path, img);
}

}  // namespace volshard::inspect
