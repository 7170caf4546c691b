#pragma once
// 2D image/mask datasets (PNG, JPEG, and whatever else OpenCV's imgcodecs
// decodes) as the same channel-first Sample the 3D pipeline uses, with a
// trailing spatial axis of size 1, so the crops and the loader run unchanged.
//
// Axes: image[c][row][column][0], i.e. X = row (image height, top to bottom),
// Y = column (width, left to right), Z = 1. This is numpy's img[row, col]
// (PIL, imageio, OpenCV, and MONAI's PILReader with reverse_indexing=False),
// not MONAI's default PILReader order, which transposes to [col, row]. A crop
// of spatial size {h, w, 1} is h rows by w columns.
//
//   auto pairs = pairs_from_folder("data", "img*.png", "mask*.png");
//   Sample s = read_image_pair_2d(pairs[i].image, pairs[i].label);
//   // s.image: C x H x W x 1 float32; s.label: 1 x H x W x 1 float32

#include <ATen/core/Tensor.h>

#include <string>

#include "volshard/transforms/sample.h"

namespace volshard {

struct Read2DOptions {
  /// Decode colour images to one channel (OpenCV's IMREAD_GRAYSCALE:
  /// 0.299 R + 0.587 G + 0.114 B, rounded to the file's bit depth).
  bool image_grayscale = false;
};

/// The file's pixels as float32 C x H x W x 1 with the stored values (0..255
/// for 8-bit, 0..65535 for 16-bit; no scaling, as MONAI's LoadImage):
/// grayscale C = 1, colour C = 3 in RGB order (OpenCV decodes BGR; we
/// reorder). An alpha channel is dropped. EXIF orientation is ignored: pixels
/// as stored, as PIL reads them. Throws std::runtime_error naming the path if
/// the file cannot be read or is not an image OpenCV can decode. Thread-safe.
at::Tensor read_image_2d(const std::string& path, const Read2DOptions& options = {});

/// A mask's values as float32 1 x H x W x 1, unchanged (class indices stay
/// 0, 1, 2, ...; a 0/255 mask stays 0/255), 8- or 16-bit. A mask stored as
/// colour with equal channels is read as one channel; one whose channels
/// differ (a colour or palette PNG) throws std::runtime_error naming the path.
at::Tensor read_mask_2d(const std::string& path);

/// image = read_image_2d(image_path), label = read_mask_2d(mask_path),
/// meta.source = image_path. Throws std::runtime_error naming both paths and
/// both shapes if image and mask differ in height or width.
Sample read_image_pair_2d(const std::string& image_path, const std::string& mask_path,
                          const Read2DOptions& options = {});

}  // namespace volshard
