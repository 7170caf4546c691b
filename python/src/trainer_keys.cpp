// The keys a `volshard train` config file may hold (configs/spleen.json,
// RUN/config.json): a Python pipeline file holds them too, and the Loader
// takes its pipeline keys and refuses any other key, as the CLI does. Read
// from the trainer's options table itself, through its header: for_each_field
// is a template that visits a default TrainOptions, so nothing of the
// trainer's library is linked (a table row that calls into it would fail to
// link here, and then this file would have to change).

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "volshard/trainer/options.h"

namespace py = pybind11;

namespace volshard::python {

void bind_trainer_keys(py::module_& m) {
  m.def(
      "_train_config_keys",
      [] {
        std::vector<std::string> keys;
        const TrainOptions defaults;
        // What `volshard train --config` accepts: the fields saved in
        // RUN/config.json (tools/volshard/option_flags.cpp reads the same rows).
        TrainOptions::for_each_field(defaults, [&keys](const Field& f, const auto&) {
          if (f.in_json && !f.set_by_network) keys.emplace_back(f.key);
        });
        return keys;
      },
      "The keys of a `volshard train` config file, in the table's order.");
}

}  // namespace volshard::python
