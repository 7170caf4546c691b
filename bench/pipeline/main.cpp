// bench_pipeline: the MONAI DDP tutorial's data pipeline (LoadImage,
// ScaleIntensity, RandCropByPosNegLabel 96^3 x 4, RandRotate90 p=0.5 axes
// (0,2), batch 2) on synthetic 128^3 .nii.gz volumes, one rank, from files and
// cached, for 1 and 2 loader threads, against a numpy + torch DataLoader
// version of the same pipeline measured in the same run; then where one
// volume's time goes, stage by stage. --pipeline spleen|brats and --size/--ct
// measure the CT/MRI pipelines and large volumes instead (pipeline_bench.h).
#include <ATen/Parallel.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "pipeline_bench.h"
#include "volshard/datasets/loader.h"

int main(int argc, char** argv) {
  using namespace volshard;
  using namespace volshard::bench;
  std::string script = "bench/pipeline_baseline.py";
  LargeArgs large;
  std::string pipeline;  // spleen | brats
  int64_t pipeline_size = 0;
  for (int k = 1; k < argc; ++k) {
    const std::string a = argv[k];
    const auto value = [&]() -> std::string {
      if (k + 1 >= argc) throw std::invalid_argument("bench_pipeline: " + a + " needs a value");
      return argv[++k];
    };
    if (a == "--size") {
      large.size = std::stoll(value());
    } else if (a == "--crop") {
      large.crop = std::stoll(value());
    } else if (a == "--ct") {
      large.ct = true;
    } else if (a == "--pipeline") {
      pipeline = value();
      if (pipeline != "spleen" && pipeline != "brats")
        throw std::invalid_argument("bench_pipeline: --pipeline=" + pipeline +
                                    " must be spleen or brats");
    } else if (a == "--pipeline-size") {
      pipeline_size = std::stoll(value());
    } else if (a == "--volumes") {
      large.volumes = std::stoll(value());
    } else if (a == "--epochs") {
      large.epochs = std::stoi(value());
    } else if (a == "--source") {
      large.source = value();
      if (large.source != "files" && large.source != "cached" && large.source != "both")
        throw std::invalid_argument("bench_pipeline: --source=" + large.source +
                                    " must be files, cached or both");
    } else if (a.rfind("--", 0) == 0) {
      throw std::invalid_argument("bench_pipeline: unknown option " + a);
    } else {
      script = a;
    }
  }
  at::set_num_threads(1);
  const bool tuned =
      std::getenv("VOLSHARD_BENCH_UNTUNED_MALLOC") == nullptr && tune_allocator_for_volumes();
  const bool quick = std::getenv("VOLSHARD_BENCH_QUICK") != nullptr;
  const int64_t volumes = quick ? 8 : 24;
  const int epochs = 2;
  const auto root = std::filesystem::temp_directory_path() /
                    ("volshard_bench_pipeline_" + std::to_string(::getpid()));
  if (!pipeline.empty()) {
    const int64_t size = pipeline_size > 0 ? pipeline_size : (pipeline == "spleen" ? 384 : 128);
    run_pipeline(pipeline, size, large.crop, quick ? 4 : large.volumes, large.epochs, root);
    std::filesystem::remove_all(root);
    return 0;
  }
  if (large.size > 0 || large.ct) {
    std::printf("malloc tuned: %s\n", tuned ? "yes" : "no");
    run_large(large, root);
    std::filesystem::remove_all(root);
    return 0;
  }

  run_tutorial(script, volumes, epochs, tuned, root);
  std::filesystem::remove_all(root);
  std::printf("peak RSS of this run: %.0f MB\n", status_mb("VmHWM:"));
}
