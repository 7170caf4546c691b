#include "volshard/core/png.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <string>
#include <vector>

namespace volshard {
namespace {

uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// Walks the chunks, checks every CRC, and inflates IDAT back to the rows.
std::vector<uint8_t> decode_rows(const std::vector<uint8_t>& png, uint32_t* width,
                                 uint32_t* height) {
  EXPECT_EQ(std::memcmp(png.data(), "\x89PNG\r\n\x1a\n", 8), 0);
  std::vector<uint8_t> idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t length = be32(&png[at]);
    const std::string type(reinterpret_cast<const char*>(&png[at + 4]), 4);
    const uint32_t crc = be32(&png[at + 8 + length]);
    EXPECT_EQ(crc, crc32(0, &png[at + 4], length + 4)) << type;
    if (type == "IHDR") {
      *width = be32(&png[at + 8]);
      *height = be32(&png[at + 12]);
    }
    if (type == "IDAT") idat.insert(idat.end(), &png[at + 8], &png[at + 8 + length]);
    at += 12 + length;
  }
  std::vector<uint8_t> raw(static_cast<size_t>(*height) * (*width * 3 + 1));
  uLongf raw_size = raw.size();
  EXPECT_EQ(uncompress(raw.data(), &raw_size, idat.data(), idat.size()), Z_OK);
  EXPECT_EQ(raw_size, raw.size());
  return raw;
}

TEST(PngTest, EncodesEveryPixelAsRgbRowsWithValidChunks) {
  Canvas c(3, 2, {10, 20, 30});
  c.set(2, 1, {200, 100, 50});
  uint32_t w = 0, h = 0;
  const std::vector<uint8_t> raw = decode_rows(encode_png(c), &w, &h);
  ASSERT_EQ(w, 3u);
  ASSERT_EQ(h, 2u);
  EXPECT_EQ(raw[0], 0);  // filter byte
  EXPECT_EQ(raw[1], 10);
  EXPECT_EQ(raw[2], 20);
  EXPECT_EQ(raw[3], 30);
  const size_t last = 10 + 1 + 2 * 3;  // second row, third pixel
  EXPECT_EQ(raw[last], 200);
  EXPECT_EQ(raw[last + 1], 100);
  EXPECT_EQ(raw[last + 2], 50);
}

TEST(CanvasTest, DrawsClippedShapesAndTextWithoutThrowing) {
  Canvas c(20, 10);
  c.fill_rect(-5, -5, 8, 8, {0, 0, 0});
  EXPECT_EQ(c.at(2, 2).r, 0);
  EXPECT_EQ(c.at(3, 3).r, 255);
  c.line(0, 9, 19, 9, {1, 2, 3});
  EXPECT_EQ(c.at(19, 9).b, 3);
  c.fill_circle(100, 100, 5, {0, 0, 0});  // entirely outside
  EXPECT_THROW(c.at(20, 0), std::out_of_range);
}

TEST(CanvasTest, TextDrawsTheGlyphsOfTheFont) {
  Canvas c(12, 8);
  EXPECT_EQ(c.text(0, 0, "I", {0, 0, 0}), 6);
  // 'I' is a vertical bar in column 2 with serifs in columns 1 and 3.
  for (int y = 0; y < 7; ++y) EXPECT_EQ(c.at(2, y).r, 0) << y;
  EXPECT_EQ(c.at(1, 0).r, 0);
  EXPECT_EQ(c.at(1, 3).r, 255);
  EXPECT_EQ(c.at(0, 3).r, 255);
  EXPECT_EQ(Canvas::text_width("abc", 2), 36);
}

}  // namespace
}  // namespace volshard
