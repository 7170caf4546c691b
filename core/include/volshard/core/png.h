#pragma once
// Pictures without a graphics library: an RGB canvas with the few shapes our
// plots and previews draw (rectangles, lines, discs, text in a 5x7 bitmap
// font) and a PNG writer. Std only (zlib behind the .cpp).

#include <cstdint>
#include <string>
#include <vector>

namespace volshard {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

/// width x height RGB pixels, row-major, origin top-left. Drawing outside the
/// canvas is clipped, never an error.
class Canvas {
 public:
  Canvas(int width, int height, Rgb background = {255, 255, 255});
  int width() const { return width_; }
  int height() const { return height_; }
  /// The pixels: 3 bytes (R, G, B) each, rows top to bottom.
  const std::vector<uint8_t>& rgb() const { return rgb_; }

  void set(int x, int y, Rgb colour);
  Rgb at(int x, int y) const;  ///< throws std::out_of_range outside the canvas
  void fill_rect(int x, int y, int w, int h, Rgb colour);
  /// A straight line from (x0, y0) to (x1, y1), `thickness` pixels wide.
  void line(int x0, int y0, int x1, int y1, Rgb colour, int thickness = 1);
  void fill_circle(int cx, int cy, int radius, Rgb colour);
  /// Text with its top-left corner at (x, y), 5x7 glyphs (descenders one row
  /// lower) scaled by `scale` (advance 6 * scale pixels, line height 9 * scale). Characters outside
  /// printable ASCII draw as '?'. Returns the width drawn.
  int text(int x, int y, const std::string& s, Rgb colour, int scale = 1);
  static int text_width(const std::string& s, int scale = 1) {
    return static_cast<int>(s.size()) * 6 * scale;
  }
  /// Copies `src` with its top-left corner at (x, y), clipped.
  void paste(const Canvas& src, int x, int y);

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;
};

/// The canvas as an 8-bit RGB PNG (no filtering, zlib level 9).
std::vector<uint8_t> encode_png(const Canvas& image);
/// encode_png written atomically; throws std::runtime_error naming the path.
void write_png(const std::string& path, const Canvas& image);

}  // namespace volshard
