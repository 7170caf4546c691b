#pragma once
// MONAI's tutorial augmentations, each a pure function of a per-sample seed:
// random transforms first sample their parameters, then apply them.
//
//   StreamRng rng = SeedStreams(seed).sample(index, epoch);
//   auto crops = sample_pos_neg_crops(shape, indices, options, rng);  // parameters
//   Sample patch = apply_crop(sample, crops[0], 0);                   // pixels

// The families, one header each (as torch/data/transforms.h gathers its own):
#include "volshard/transforms/compose.h"  // Transform, Compose, the steps' factories
#include "volshard/transforms/crop.h"     // RandCropByPosNegLabel, RandSpatialCrop, CropForeground
#include "volshard/transforms/intensity.h"  // ScaleIntensity(Range), NormalizeIntensity, Rand*Intensity
#include "volshard/transforms/labels.h"   // BraTS channels, one-hot
#include "volshard/transforms/sample.h"   // Sample, SpatialMap, SpatialImage
#include "volshard/transforms/spatial.h"  // Orientation, Spacing, RandRotate90, RandFlip
#include "volshard/transforms/view.h"     // pending views: materialize
