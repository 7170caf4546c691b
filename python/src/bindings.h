#pragma once
// The parts of the _volshard extension, each binding one library.

#include <pybind11/pybind11.h>

namespace volshard::python {

/// DistributedSampler, SamplerState (as JSON) and the seed streams: std only.
void bind_sampler(pybind11::module_& m);

/// The keys of `volshard train`'s config files, read from the trainer's
/// options table (its header alone: the module does not link the trainer).
void bind_trainer_keys(pybind11::module_& m);

}  // namespace volshard::python
