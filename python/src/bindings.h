#pragma once
// The parts of the _volshard extension, each binding one library.

#include <pybind11/pybind11.h>

namespace volshard::python {

/// DistributedSampler, SamplerState (as JSON) and the seed streams: std only.
void bind_sampler(pybind11::module_& m);

}  // namespace volshard::python
