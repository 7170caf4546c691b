// The part of a RankPlan that validation reads (its rank, world and window), for tests that
// score validation without the rest of a run's options (RankPlan::make validates them all).
#pragma once

#include "volshard/trainer/comm.h"
#include "volshard/trainer/options.h"
#include "volshard/trainer/rank_plan.h"

namespace volshard::testing {

inline RankPlan validation_plan(const TrainOptions& o, const Communicator& comm) {
  RankPlan plan;
  plan.rank = comm.rank();
  plan.world = comm.world_size();
  plan.val_window = o.val_window();
  return plan;
}

}  // namespace volshard::testing
