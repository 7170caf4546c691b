// run_folder.cpp: curves.png drawn from metrics.jsonl.
#include <gtest/gtest.h>

#include <string>

#include "engine/run_folder.h"
#include "volshard/core/png.h"

namespace volshard {
namespace {

// A loss that became NaN is written as null in metrics.jsonl: the curves
// leave those points out instead of stopping the run at its epoch's end (a
// JSON type error did).
TEST(CurvesTest, LeavesOutTheStepsWhoseLossIsNull) {
  const std::string metrics =
      "{\"type\":\"step\",\"epoch\":0,\"step\":1,\"loss\":0.6}\n"
      "{\"type\":\"step\",\"epoch\":0,\"step\":2,\"loss\":null}\n"
      "{\"type\":\"epoch\",\"epoch\":0,\"step\":2,\"loss\":null}\n";
  Canvas img(1, 1);
  EXPECT_NO_THROW(img = draw_curves(metrics));
  EXPECT_GT(img.width(), 1);
}

TEST(CurvesTest, DrawsEveryStepsLossAndTicksOnBothAxes) {
  std::string metrics;
  for (int step = 1; step <= 40; ++step) {
    metrics += "{\"type\":\"step\",\"epoch\":" + std::to_string((step - 1) / 10) +
               ",\"step\":" + std::to_string(step) +
               ",\"loss\":" + std::to_string(0.9 - step * 0.01) + "}\n";
    if (step % 10 == 0)
      metrics += "{\"type\":\"epoch\",\"epoch\":" + std::to_string(step / 10 - 1) +
                 ",\"step\":" + std::to_string(step) + ",\"loss\":0.5,\"val_dice\":0.7}\n";
  }
  const Canvas img = draw_curves(metrics);
  auto count = [&](Rgb c, int x0, int y0, int x1, int y1) {
    int n = 0;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        const Rgb p = img.at(x, y);
        n += p.r == c.r && p.g == c.g && p.b == c.b;
      }
    return n;
  };
  const int plot_top = 60, plot_bottom = img.height() - 70;
  // The per-step curve (light blue) inside the plot, besides the epoch means.
  EXPECT_GT(count({150, 180, 235}, 61, plot_top, img.width(), plot_bottom), 200);
  EXPECT_GT(count({0, 80, 200}, 61, plot_top, img.width(), plot_bottom), 50);
  // Tick labels under the x axis (several separate labels: 0, 5, 10, ...).
  const int axis = img.height() - 62;
  int runs = 0;
  bool inked = false;
  for (int x = 40; x < img.width(); ++x) {
    bool any = false;
    for (int y = axis + 8; y < axis + 16; ++y) any |= img.at(x, y).r == 0 && img.at(x, y).g == 0;
    if (any && !inked) ++runs;
    inked = any;
  }
  EXPECT_GE(runs, 5);
}

TEST(CurvesTest, DrawsEachClassesDiceWhenTheMetricsHaveClasses) {
  auto metrics_with = [](bool classes) {
    std::string m;
    for (int epoch = 0; epoch < 4; ++epoch) {
      m += "{\"type\":\"epoch\",\"epoch\":" + std::to_string(epoch) +
           ",\"step\":" + std::to_string(10 * (epoch + 1)) + ",\"loss\":0.5,\"val_dice\":0.6";
      if (classes)
        m += ",\"val_dice_per_class\":[0.3,0.8,null],\"val_classes\":[\"TC\",\"WT\",\"ET\"]";
      m += "}\n";
    }
    return m;
  };
  auto count = [](const Canvas& img, Rgb c) {
    int n = 0;
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x) {
        const Rgb p = img.at(x, y);
        n += p.r == c.r && p.g == c.g && p.b == c.b;
      }
    return n;
  };
  const Canvas with = draw_curves(metrics_with(true)), without = draw_curves(metrics_with(false));
  const Rgb first{230, 120, 0}, second{170, 0, 170}, third{0, 170, 170};
  EXPECT_GT(count(with, first), 50) << "class TC's line and name";
  EXPECT_GT(count(with, second), 50);
  EXPECT_GT(count(with, third), 0) << "ET's name, though its Dice is null";
  EXPECT_EQ(count(without, first), 0);
  EXPECT_EQ(count(without, second), 0);
}

}  // namespace
}  // namespace volshard
