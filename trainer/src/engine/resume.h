#pragma once
// Where a training run stands: what a checkpoint records besides weights and
// optimizer state, read back when a run resumes.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "engine/grad_scaler.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/options.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace volshard {

struct ResumeState {
  int64_t global_step = 0;       ///< optimizer steps done
  double epoch_loss_sum = 0;     ///< the epoch's mean step losses so far, summed
  int64_t epoch_loss_steps = 0;  ///< and counted
  /// The best validation so far (best_model.pt): mean Dice, its epoch (0-based)
  /// and step; best_epoch -1: none yet.
  double best_metric = 0;
  int64_t best_epoch = -1;
  int64_t best_step = 0;
  /// --amp fp16: the GradScaler's scale and growth tracker.
  std::optional<GradScalerState> grad_scaler;
  /// The sampler's epoch and positions consumed; empty: a fresh run.
  std::optional<SamplerState> sampler;

  int64_t first_epoch() const { return sampler ? sampler->epoch : 0; }
  /// Whether `epoch` continues mid-way where the checkpoint stopped.
  bool continues(int64_t epoch) const {
    return sampler && epoch == sampler->epoch && sampler->consumed > 0;
  }
};

/// options.resume names a RUN folder (its checkpoint.pt) or a checkpoint file.
std::string resume_checkpoint_path(const TrainOptions& options);

/// A fresh start, or with options.resume the checkpoint's state, its weights
/// loaded into `net` and its state into `optimizer`. Every rank then takes
/// rank 0's weights (one broadcast; optimizer state is equal by construction).
/// Throws std::runtime_error naming the checkpoint when it is unreadable or
/// its training set is not `train_size` volumes.
ResumeState start_state(const TrainOptions& options, Model& net, torch::optim::Optimizer& optimizer,
                        int64_t train_size, Communicator& comm);

/// Writes checkpoint `path` (atomically): `state` (sampler set), options.seed,
/// `world_size`, `config_json` and `data_files` (data_files_stamp's JSON) as
/// its meta, then net's weights and the optimizer's state.
void write_checkpoint(const std::string& path, const ResumeState& state,
                      const TrainOptions& options, int64_t world_size,
                      const std::string& config_json, const std::string& data_files,
                      const Model& net, torch::optim::Optimizer& optimizer);

/// "--flag A there, B here; ..." for each key of the config.json text `now`
/// that `counted` takes and whose value differs from `saved`'s (keys `saved`
/// lacks are not compared): resume's refusal and changed-options line, and
/// `volshard diff`'s configs.
std::string option_differences(const std::string& saved_json, const std::string& now_json,
                               const std::function<bool(const std::string&)>& counted);

}  // namespace volshard
