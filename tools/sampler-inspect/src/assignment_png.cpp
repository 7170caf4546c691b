#include "volshard/inspect/assignment_png.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "volshard/core/png.h"

namespace volshard::inspect {
namespace {

constexpr int64_t kMaxColumns = 4096;
constexpr int kLabelWidth = 80;
constexpr int kRowHeight = 26;
constexpr int kLegendHeight = 30;
constexpr int kMargin = 6;

// The first ten are the familiar "tab10" colours; more ranks cycle hues.
Rgb rank_colour(int64_t rank) {
  static const Rgb kTab10[] = {{31, 119, 180},  {255, 127, 14}, {44, 160, 44},   {214, 39, 40},
                               {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {127, 127, 127},
                               {188, 189, 34},  {23, 190, 207}};
  if (rank < 10) return kTab10[rank];
  // HSV (hue (rank * 74) mod 360 degrees, saturation 0.78, value 0.86) to RGB.
  const double h = static_cast<double>((rank * 74) % 360) / 60.0, v = 220, c = v * 200 / 255;
  const double x = c * (1 - std::abs(std::fmod(h, 2.0) - 1)), m = v - c;
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(h)) {
    case 0:
      r = c, g = x;
      break;
    case 1:
      r = x, g = c;
      break;
    case 2:
      g = c, b = x;
      break;
    case 3:
      g = x, b = c;
      break;
    case 4:
      r = x, b = c;
      break;
    default:
      r = c, b = x;
      break;
  }
  return {static_cast<uint8_t>(r + m), static_cast<uint8_t>(g + m), static_cast<uint8_t>(b + m)};
}

// Text whose baseline is at y, in dark grey.
void text(Canvas& img, const std::string& s, int x, int y) { img.text(x, y - 7, s, {30, 30, 30}); }

}  // namespace

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
  Canvas img(width, height);

  // Legend: rank colours (up to 16 shown) and the markers.
  int x = kMargin;
  for (int64_t r = 0; r < std::min<int64_t>(world_size, 16); ++r) {
    img.fill_rect(x, 8, 14, 14, rank_colour(r));
    text(img, "r" + std::to_string(r), x + 17, 20);
    x += 48;
  }
  if (world_size > 16) {
    text(img, "...", x, 20);
    x += 30;
  }
  img.fill_circle(x + 7, 15, 3, {0, 0, 0});
  text(img, "read twice (pad)", x + 14, 20);
  x += 140;
  img.fill_rect(x, 8, 14, 14, {220, 220, 220});
  text(img, "dropped", x + 17, 20);
  x += 80;
  if (!consumed_before.empty()) {
    img.fill_rect(x, 8, 14, 14, {90, 90, 90});
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
      const int bx = kLabelWidth + static_cast<int>(i) * cell, by = y + 2;
      const int bw = std::max(cell - 1, 1), bh = kRowHeight - 4;
      if (before[k]) {
        img.fill_rect(bx, by, bw, bh, {90, 90, 90});
      } else if (owner[k] < 0) {
        img.fill_rect(bx, by, bw, bh, {220, 220, 220});
        img.line(bx, by, bx + bw - 1, by + bh - 1, {120, 120, 120});
      } else {
        img.fill_rect(bx, by, bw, bh, rank_colour(owner[k]));
      }
      if (reads[k] + (before[k] ? 1 : 0) > 1)
        img.fill_circle(bx + bw / 2, by + bh / 2, std::max(1, std::min(cell / 4, 4)),
                        {255, 255, 255});
    }
  }
  write_png(path, img);
}

}  // namespace volshard::inspect
