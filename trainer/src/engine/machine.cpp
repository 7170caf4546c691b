#include "engine/machine.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace volshard {

void set_up_machine(const TrainOptions& o, const RankPlan& plan) {
  at::set_num_threads(static_cast<int>(plan.threads));
  // cuDNN's autotuner picks by timing, so its choice may differ between runs:
  // only where determinism is not asked.
  at::globalContext().setBenchmarkCuDNN(!o.deterministic && o.cudnn_benchmark);
  if (o.deterministic) {
    // cuBLAS is deterministic only with a fixed workspace, read when its first
    // handle is made (torch's recipe); a value the user set is kept.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, false);
    // oneDNN's bfloat16 convolutions give other gradients from run to run at
    // the same inputs (torch 2.11, on one thread too, now and then a NaN; its
    // mkldnn.deterministic flag does not help): --amp bf16 on the CPU runs
    // them without oneDNN, as torch.backends.mkldnn.enabled = False.
    if (o.amp == Amp::kBf16 && plan.device.is_cpu())
      at::globalContext().setUserEnabledMkldnn(false);
  }
}

std::string loaded_blas() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string name = std::filesystem::path(path).filename().string();
    if (name.find("openblas") != std::string::npos || name.find("libblas") != std::string::npos ||
        name.find("mkl_core") != std::string::npos || name.find("libblis") != std::string::npos) {
      std::string kind = "unknown BLAS";
      if (path.find("openblas-openmp") != std::string::npos)
        kind = "OpenBLAS (OpenMP)";
      else if (path.find("openblas-pthread") != std::string::npos)
        kind = "OpenBLAS (pthreads)";
      else if (path.find("openblas") != std::string::npos)
        kind = "OpenBLAS";
      else if (path.find("mkl") != std::string::npos)
        kind = "MKL";
      else if (path.find("blis") != std::string::npos)
        kind = "BLIS";
      else if (path.find("/blas/") != std::string::npos)
        kind = "reference BLAS (slow: apt install libopenblas0-openmp)";
      return kind + " " + path;
    }
  }
  // PyPI's LibTorch links MKL statically: no BLAS library is mapped, and
  // its build settings say which one it carries.
  const std::string config = at::show_config();
  const size_t at_info = config.find("BLAS_INFO=");
  if (at_info != std::string::npos) {
    const size_t end = config.find_first_of(", \n", at_info);
    return config.substr(at_info + 10, end - at_info - 10) + " (linked into LibTorch)";
  }
  return "none found in /proc/self/maps";
}

}  // namespace volshard
