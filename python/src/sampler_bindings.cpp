// Bindings of the std-only sampler and seed streams. The torch.utils.data
// Sampler subclass around them is Python (volshard/sampler.py).

#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "volshard/core/seed_streams.h"
#include "volshard/sampler/distributed_sampler.h"

namespace py = pybind11;

namespace volshard::python {
namespace {

py::list to_list(IndexSpan span) {
  py::list out(static_cast<size_t>(span.size()));
  for (int64_t i = 0; i < span.size(); ++i) out[static_cast<size_t>(i)] = py::int_(span[i]);
  return out;
}

}  // namespace

void bind_sampler(py::module_& m) {
  py::class_<DistributedSamplerOptions>(m, "_DistributedSamplerOptions")
      .def(py::init<>())
      .def_readwrite("dataset_size", &DistributedSamplerOptions::dataset_size)
      .def_readwrite("num_replicas", &DistributedSamplerOptions::num_replicas)
      .def_readwrite("rank", &DistributedSamplerOptions::rank)
      .def_readwrite("shuffle", &DistributedSamplerOptions::shuffle)
      .def_readwrite("seed", &DistributedSamplerOptions::seed)
      .def_readwrite("auto_advance_epoch", &DistributedSamplerOptions::auto_advance_epoch)
      .def_property(
          "mode", [](const DistributedSamplerOptions& o) { return to_string(o.mode); },
          [](DistributedSamplerOptions& o, const std::string& mode) {
            o.mode = parse_partition_mode(mode);
          });

  py::class_<DistributedSampler>(m, "_DistributedSampler")
      .def(py::init<const DistributedSamplerOptions&>(), py::arg("options"))
      .def_static(
          "restore",
          [](const std::string& state_json, int64_t rank, int64_t num_replicas) {
            return DistributedSampler::restore(SamplerState::from_json(state_json), rank,
                                               num_replicas);
          },
          py::arg("state_json"), py::arg("rank"), py::arg("num_replicas"))
      .def("set_epoch", &DistributedSampler::set_epoch, py::arg("epoch"))
      .def_property_readonly("epoch", &DistributedSampler::epoch)
      .def_property_readonly("num_samples", &DistributedSampler::num_samples)
      .def_property_readonly("total_size", &DistributedSampler::total_size)
      .def_property_readonly("num_replicas",
                             [](const DistributedSampler& s) { return s.options().num_replicas; })
      .def_property_readonly("rank", [](const DistributedSampler& s) { return s.options().rank; })
      .def_property_readonly(
          "mode", [](const DistributedSampler& s) { return to_string(s.options().mode); })
      .def("iterate", [](DistributedSampler& s) { return to_list(s.iterate()); })
      .def("indices", [](const DistributedSampler& s) { return to_list(s.indices()); })
      .def("set_position", &DistributedSampler::set_position, py::arg("rank_samples"))
      .def_property_readonly("position", &DistributedSampler::position)
      .def("state_json", [](const DistributedSampler& s) { return s.state().to_json(); });

  py::class_<SeedStreams>(m, "SeedStreams",
                          "One base seed split into named, reproducible streams "
                          "(core/include/volshard/core/seed_streams.h).")
      .def(py::init<uint64_t>(), py::arg("base_seed"))
      .def_property_readonly("base_seed", &SeedStreams::base_seed)
      .def("permutation_seed", &SeedStreams::permutation_seed, py::arg("epoch"),
           "The sampler's shuffle seed, as PyTorch's: (seed + epoch) mod 2**32.")
      .def("shared_seed", &SeedStreams::shared_seed, py::arg("purpose"), py::arg("epoch") = 0,
           "Same on every rank (purpose 0: model initialisation).")
      .def("rank_seed", &SeedStreams::rank_seed, py::arg("rank"), py::arg("epoch"),
           "Distinct per rank, reproducible.")
      .def("sample_seed", &SeedStreams::sample_seed, py::arg("index"), py::arg("epoch"),
           "The augmentation seed of dataset index `index` in `epoch`.")
      .def("worker_seed", &SeedStreams::worker_seed, py::arg("rank"), py::arg("worker"),
           py::arg("epoch"), "Distinct per (rank, data loader worker), reproducible.");
}

}  // namespace volshard::python
