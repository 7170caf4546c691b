#pragma once
// The saved sampler state `sampler-inspect --state FILE` shows, from either
// file that holds one, read with the standard library only.

#include <string>

#include "volshard/sampler/distributed_sampler.h"

namespace volshard::inspect {

/// The state in `bytes` (the content of `path`): the JSON that
/// DistributedSampler::state().to_json() writes, or a volshard checkpoint.pt
/// (a PyTorch zip archive; the "sampler" of the JSON in its pickled "meta"
/// entry). Throws std::invalid_argument naming `path` and what is wrong.
SamplerState read_sampler_state(const std::string& bytes, const std::string& path);

}  // namespace volshard::inspect
