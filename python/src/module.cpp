// The _volshard extension: NIfTI volumes, datalists and the C++ loader as
// torch tensors, and C++ exceptions as Python ones. Bindings only: the
// Python-facing classes (Sampler, Loader) are in volshard/*.py.

#include <torch/extension.h>

#include <pybind11/stl.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "bindings.h"
#include "volshard/core/large_blocks.h"
#include "volshard/core/log.h"
#include "volshard/core/nearest_name.h"
#include "volshard/datasets/batches_ahead.h"
#include "volshard/datasets/cache.h"
#include "volshard/datasets/content_hash.h"
#include "volshard/datasets/datalist.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/loader.h"
#include "volshard/datasets/rank_pipeline.h"
#include "volshard/datasets/volume.h"
#include "volshard/transforms/inference.h"

namespace py = pybind11;

namespace volshard::python {
namespace {

// Errors keep their message; a file's errno picks the OSError subclass
// (std::invalid_argument -> ValueError, std::out_of_range -> IndexError and
// std::runtime_error -> RuntimeError are pybind11's own translations).
void translate_system_error(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const std::system_error& e) {
    const int err = e.code().value();
    PyObject* type = err == ENOENT                     ? PyExc_FileNotFoundError
                     : (err == EACCES || err == EPERM) ? PyExc_PermissionError
                     : err == EISDIR                   ? PyExc_IsADirectoryError
                                                       : PyExc_OSError;
    PyErr_SetString(type, e.what());
  }
}

// volshard::warn from any thread (sampler, cache) as a Python UserWarning.
void warn_in_python(const std::string& message) {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) != 0) PyErr_Clear();
}

// Each pair as a dict under `keys` (the datalist's own: {"img", "seg"} reads
// back as it was written).
py::list pairs_to_list(const std::vector<ImageLabelPair>& pairs, const PairKeys& keys = {}) {
  py::list out;
  for (const ImageLabelPair& p : pairs) {
    py::dict d;
    d[py::str(keys.image)] = p.image;
    d[py::str(keys.label)] = p.label;
    out.append(d);
  }
  return out;
}

PairKeys pair_keys(const std::string& image_key, const std::string& label_key) {
  PairKeys keys;
  keys.image = image_key;
  keys.label = label_key;
  return keys;
}

// A batch as the Python Loader hands it out: image and label as torch tensors
// (no copy), and per row the metadata `volshard train --trace-samples` records.
// The one place a batch's entries are named (_batch_entries reads them here).
py::dict batch_dict(const Batch& b) {
  py::dict d;
  d["image"] = b.image;
  d["label"] = b.label;
  py::list index, patch, source, crop_start, rot90_k, flipped;
  for (const SampleMeta& m : b.meta) {
    index.append(m.index);
    patch.append(m.patch_index);
    source.append(m.source);
    crop_start.append(py::make_tuple(m.crop_start[0], m.crop_start[1], m.crop_start[2]));
    rot90_k.append(m.rot90_k);
    flipped.append(py::make_tuple(m.flipped[0], m.flipped[1], m.flipped[2]));
  }
  d["index"] = index;
  d["patch_index"] = patch;
  d["source"] = source;
  d["crop_start"] = crop_start;
  d["rot90_k"] = rot90_k;
  d["flipped"] = flipped;
  d["step"] = b.step;
  d["wait_seconds"] = b.wait_seconds;
  return d;
}

at::Tensor affine_tensor(const Affine& a) {
  at::Tensor t = at::empty({4, 4}, at::kDouble);
  auto acc = t.accessor<double, 2>();
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) acc[i][j] = a[static_cast<size_t>(i)][static_cast<size_t>(j)];
  }
  return t;
}

py::dict header_dict(const NiftiHeader& h) {
  py::dict d;
  d["version"] = h.version;
  d["big_endian"] = h.big_endian;
  d["dim"] = h.dim;
  d["shape"] = h.shape;
  d["datatype"] = to_string(h.datatype);
  d["bitpix"] = h.bitpix;
  d["vox_offset"] = h.vox_offset;
  d["pixdim"] = h.pixdim;
  d["scl_slope"] = h.scl_slope;
  d["scl_inter"] = h.scl_inter;
  d["qform_code"] = h.qform_code;
  d["sform_code"] = h.sform_code;
  d["intent_code"] = h.intent_code;
  d["descrip"] = h.descrip;
  d["xyzt_units"] = h.xyzt_units;
  return d;
}

// One rank's pipeline (RankPipeline) for Python: its calls without the GIL,
// its batches as dicts, and close(). With a device (to_device), its batches go
// there one step ahead through BatchesAhead (as the trainer's engine takes
// them), the user's transform (Python) applied on the host first.
class LoaderCore {
 public:
  LoaderCore(std::vector<ImageLabelPair> pairs, const FeedOptions& feed, const LoaderOptions& lo,
             const CacheOptions& co) {
    py::gil_scoped_release nogil;
    pipeline_ = std::make_unique<RankPipeline>(std::move(pairs), feed, lo, co);
  }

  /// From now on next() hands out batches on `device`, one taken ahead and
  /// copied while the caller computes; `on_host` (None, or a callable taking
  /// and returning a batch dict) replaces each batch's image and label first.
  void to_device(const std::string& device, py::object on_host) {
    on_host_ = std::move(on_host);
    BatchesAhead::HostStep step;
    if (!on_host_.is_none()) {
      // on_host_ owns the callable and outlives ahead_, which holds no Python reference.
      step = [fn = py::handle(on_host_)](Batch& b) {
        py::gil_scoped_acquire gil;
        const py::object out = fn(batch_dict(b));
        b.image = out["image"].cast<at::Tensor>();
        b.label = out["label"].cast<at::Tensor>();
      };
    }
    ahead_ = std::make_unique<BatchesAhead>(live(), c10::Device(device), false, std::move(step));
  }

  void start_epoch(std::vector<int64_t> indices, int64_t epoch) {
    py::gil_scoped_release nogil;
    if (ahead_) {
      ahead_->start_epoch(std::move(indices), epoch);
    } else {
      live().start_epoch(std::move(indices), epoch);
    }
  }

  /// The epoch's batches taken and dropped in C++, the GIL released: the
  /// loader alone, for the benchmark's Python-overhead figure.
  int64_t drain() {
    py::gil_scoped_release nogil;
    int64_t batches = 0;
    while (live().next()) ++batches;
    return batches;
  }

  py::object next() {
    if (ahead_) {
      std::optional<DeviceBatch> b;
      {
        py::gil_scoped_release nogil;
        b = ahead_->next();
      }
      if (!b) return py::none();
      py::dict d = batch_dict(b->host);
      d["image"] = b->image;
      d["label"] = b->label;
      return d;
    }
    std::optional<Batch> b;
    {
      py::gil_scoped_release nogil;
      b = live().next();
    }
    if (!b) return py::none();
    return batch_dict(*b);
  }

  int64_t num_batches() const { return pipeline_ ? pipeline_->loader().num_batches() : 0; }
  int64_t cached_items() const { return pipeline_ ? pipeline_->cache().cached_items() : 0; }
  int64_t cached_bytes() const { return pipeline_ ? pipeline_->cache().cached_bytes() : 0; }
  bool pinned() const { return pipeline_ && pipeline_->loader().pinned(); }

  /// Stops the worker threads (without the GIL: they may be warning).
  void close() {
    py::gil_scoped_release nogil;
    ahead_.reset();
    pipeline_.reset();
  }

 private:
  DataLoader& live() {
    if (!pipeline_) throw std::runtime_error("Loader: used after close()");
    return pipeline_->loader();
  }

  std::unique_ptr<RankPipeline> pipeline_;
  py::object on_host_ = py::none();
  std::unique_ptr<BatchesAhead> ahead_;  ///< after pipeline_: goes first
};

PinMemory parse_pin_memory(const std::optional<bool>& pin) {
  if (!pin) return PinMemory::kAuto;
  return *pin ? PinMemory::kOn : PinMemory::kOff;
}

// NIfTI volumes as read_volume gives them, write_volume, the fingerprints' hash.
void bind_volumes(py::module_& m) {
  py::class_<Volume>(m, "Volume", "A NIfTI volume as read_volume returns it.")
      .def_readonly("data", &Volume::data,
                    "C x X x Y x Z tensor, data[c, i, j, k] == nibabel's [i, j, k, c]")
      .def_property_readonly(
          "affine", [](const Volume& v) { return affine_tensor(v.affine); },
          "4 x 4 float64 tensor, nibabel's img.affine")
      .def_readonly("spacing_mm", &Volume::spacing_mm)
      .def_property_readonly("disk_dtype", [](const Volume& v) { return to_string(v.disk_dtype); })
      .def_readonly("path", &Volume::path)
      .def_readonly("nonfinite_voxels", &Volume::nonfinite_voxels)
      .def_property_readonly("header", [](const Volume& v) { return header_dict(v.header); })
      .def("__repr__", [](const Volume& v) {
        return "Volume(path='" + v.path +
               "', shape=" + py::repr(py::cast(v.data.sizes().vec())).cast<std::string>() +
               ", disk_dtype=" + to_string(v.disk_dtype) + ")";
      });

  m.def(
      "read_volume",
      [](const std::string& path, bool as_float, bool apply_scaling, int64_t max_voxels) {
        ReadOptions o;
        o.as_float = as_float;
        o.apply_scaling = apply_scaling;
        o.max_voxels = max_voxels;
        py::gil_scoped_release nogil;
        return read_volume(path, o);
      },
      py::arg("path"), py::arg("as_float") = false, py::arg("apply_scaling") = true,
      py::arg("max_voxels") = ReadOptions{}.max_voxels,
      "Reads a .nii or .nii.gz as nibabel does, channel-first.");

  m.def(
      "write_volume",
      [](const std::string& path, const at::Tensor& data, const Affine& affine, int gzip_level,
         int nifti_version, std::vector<double> spacing_mm, std::string descrip) {
        WriteOptions o;
        o.gzip_level = gzip_level;
        o.nifti_version = nifti_version;
        o.spacing_mm = std::move(spacing_mm);
        o.descrip = std::move(descrip);
        py::gil_scoped_release nogil;
        write_volume(path, data, affine, o);
      },
      py::arg("path"), py::arg("data"), py::arg("affine"), py::arg("gzip_level") = -1,
      py::arg("nifti_version") = 0, py::arg("spacing_mm") = std::vector<double>{},
      py::arg("descrip") = "", "Writes X x Y x Z or C x X x Y x Z data atomically.");

  m.def(
      "_xxh64",
      [](const at::Tensor& t, uint64_t seed) {
        const at::Tensor c = t.detach().to(at::kCPU).contiguous();
        return xxh64(c.data_ptr(), static_cast<size_t>(c.nbytes()), seed);
      },
      py::arg("tensor"), py::arg("seed") = 0,
      "XXH64 of a tensor's bytes (C order, on the CPU): the hash of fingerprints.jsonl.");
}

// Datalists and folders, the train/validation split, a validation volume and
// the sliding window as volshard train uses them.
void bind_data(py::module_& m) {
  m.def(
      "pairs_from_folder",
      [](const std::string& folder, const std::string& image_glob, const std::string& label_glob) {
        return pairs_to_list(pairs_from_folder(folder, image_glob, label_glob));
      },
      py::arg("folder"), py::arg("image_glob") = "img*", py::arg("label_glob") = "seg*");
  // volshard.pairs_from_datalist (loader.py) reads its keys= into the two names.
  m.def(
      "_pairs_from_datalist",
      [](const std::string& path, const std::string& section, const std::string& image_key,
         const std::string& label_key) {
        const PairKeys keys = pair_keys(image_key, label_key);
        return pairs_to_list(pairs_from_datalist(path, section, keys), keys);
      },
      py::arg("path"), py::arg("section"), py::arg("image_key"), py::arg("label_key"));
  m.def(
      "_hold_out_tail",
      [](const std::vector<std::pair<std::string, std::string>>& files, double val_fraction,
         const std::string& source) {
        std::vector<ImageLabelPair> pairs;
        for (const auto& [image, label] : files) pairs.push_back({image, label});
        const PairSplit s = hold_out_tail(std::move(pairs), val_fraction, source);
        return py::make_tuple(pairs_to_list(s.train), pairs_to_list(s.val));
      },
      py::arg("files"), py::arg("val_fraction"), py::arg("source"));
  m.def(
      "_split_datalist",
      [](const std::string& path, double val_fraction, const std::string& image_key,
         const std::string& label_key) {
        const PairSplit s = split_datalist(path, val_fraction, pair_keys(image_key, label_key));
        return py::make_tuple(pairs_to_list(s.train), pairs_to_list(s.val));
      },
      py::arg("path"), py::arg("val_fraction"), py::arg("image_key"), py::arg("label_key"));
  // One validation volume as `volshard train` validates it: the prefix
  // without the training-only steps, the whole volume.
  m.def(
      "_load_whole_volume",
      [](const std::string& image, const std::string& label, int64_t index,
         const FeedOptions& feed) {
        Sample s;
        {
          py::gil_scoped_release nogil;
          s = load_pair({image, label}, index, whole_volume_prefix(feed.prefix));
        }
        py::dict d;
        d["image"] = s.image;
        d["label"] = s.label.to(at::kFloat);
        d["affine"] = affine_tensor(s.meta.affine);
        return d;
      },
      py::arg("image"), py::arg("label"), py::arg("index"), py::arg("feed"));
  // MONAI's sliding_window_inference on one 1 x C x X x Y x Z image, the
  // trainer's own (volshard/transforms/inference.h); `predictor` is Python.
  m.def(
      "_sliding_window_inference",
      [](const at::Tensor& image, const std::vector<int64_t>& roi, int64_t sw_batch_size,
         const py::function& predictor, double overlap, const std::string& mode,
         const std::vector<double>& sigma_scale, const std::vector<int64_t>& tta_flips) {
        SlidingWindowOptions o;
        if (roi.size() != 3) throw std::invalid_argument("roi_size must hold 3 edges");
        if (sigma_scale.size() != 3) throw std::invalid_argument("sigma_scale must hold 3 values");
        if (mode != "constant" && mode != "gaussian")
          throw std::invalid_argument("mode='" + printable(mode) +
                                      "' must be 'constant' or 'gaussian' (MONAI's BlendMode)");
        o.roi = {roi[0], roi[1], roi[2]};
        o.sw_batch_size = sw_batch_size;
        o.overlap = overlap;
        o.blend = mode == "gaussian" ? BlendMode::kGaussian : BlendMode::kConstant;
        o.sigma_scale = {sigma_scale[0], sigma_scale[1], sigma_scale[2]};
        return sliding_window_inference(
            image, o,
            mirrored([&predictor](const at::Tensor& x) { return predictor(x).cast<at::Tensor>(); },
                     tta_flips));
      },
      py::arg("image"), py::arg("roi"), py::arg("sw_batch_size"), py::arg("predictor"),
      py::arg("overlap"), py::arg("mode"), py::arg("sigma_scale"), py::arg("tta_flips"));
  m.def(
      "_keep_largest_components",
      [](const at::Tensor& labels) { return keep_largest_components(labels); }, py::arg("labels"));
}

// One rank's pipeline: its schema, its options, the loader, the allocator.
void bind_pipeline(py::module_& m) {
  m.def("tune_allocator_for_volumes", &tune_allocator_for_volumes,
        "glibc malloc settings that keep multi-MB batch buffers mapped, and torch's CPU tensors of "
        "16 MiB and more (this process's, Python's included) through volshard's large-block cache "
        "(see loader.h); call once at start-up, before a Loader starts its threads. False where "
        "mallopt is unavailable.");
  m.def(
      "large_block_stats",
      [] {
        const LargeBlockStats s = large_block_stats();
        py::dict d;
        d["in_use_bytes"] = s.in_use_bytes;
        d["free_bytes"] = s.free_bytes;
        d["peak_in_use_bytes"] = s.peak_in_use_bytes;
        d["mapped"] = s.mapped;
        d["reused"] = s.reused;
        d["unmapped"] = s.unmapped;
        return d;
      },
      "The large-block cache's counters (volshard/core/large_blocks.h) as a dict.");

  // The pipeline, read through its schema (volshard/datasets/feed.h) from
  // the JSON of the Loader's pipeline and arguments: no field is named here.
  py::class_<FeedOptions>(m, "_FeedOptions")
      .def("to_json", &feed_to_json, "every field, as RUN/config.json names it");
  m.def(
      "_feed_options",
      [](const std::string& json_object, const std::string& who) {
        return feed_from_json(json_object, who);
      },
      py::arg("json_object"), py::arg("who"),
      "The pipeline a JSON object of pipeline keys sets over the defaults (validated).");
  m.def("_feed_keys", &feed_keys, "The pipeline's keys, in the schema's order.");
  m.def("_nearest_key", &nearest_key, py::arg("key"), py::arg("keys"),
        "The key of `keys` the command line would name for a misspelt `key` ('' for none).");
  m.def(
      "_batch_entries", [] { return py::list(batch_dict(Batch{})); },
      "The names of a batch's entries, in order.");
  py::class_<LoaderOptions>(m, "_LoaderOptions")
      .def(py::init<>())
      .def_readwrite("batch_size", &LoaderOptions::batch_size)
      .def_readwrite("drop_last_batch", &LoaderOptions::drop_last_batch)
      .def_readwrite("workers", &LoaderOptions::workers)
      .def_readwrite("prefetch_batches", &LoaderOptions::prefetch_batches)
      .def_readwrite("seed", &LoaderOptions::seed)
      .def_property(
          "pin_memory",
          [](const LoaderOptions& o) -> std::optional<bool> {
            if (o.pin_memory == PinMemory::kAuto) return std::nullopt;
            return o.pin_memory == PinMemory::kOn;
          },
          [](LoaderOptions& o, std::optional<bool> pin) { o.pin_memory = parse_pin_memory(pin); })
      .def_readwrite("device", &LoaderOptions::device);
  py::class_<CacheOptions>(m, "_CacheOptions")
      .def(py::init<>())
      .def_readwrite("cache_rate", &CacheOptions::cache_rate)
      .def_readwrite("max_bytes", &CacheOptions::max_bytes)
      .def_readwrite("threads", &CacheOptions::threads)
      .def_readwrite("cache_dir", &CacheOptions::cache_dir)
      .def_readwrite("device", &CacheOptions::device);

  py::class_<LoaderCore>(m, "_LoaderCore")
      .def(py::init([](const std::vector<std::pair<std::string, std::string>>& files,
                       const FeedOptions& feed, const LoaderOptions& loader,
                       const CacheOptions& cache) {
             std::vector<ImageLabelPair> pairs;
             for (const auto& [image, label] : files) pairs.push_back({image, label});
             return std::make_unique<LoaderCore>(std::move(pairs), feed, loader, cache);
           }),
           py::arg("files"), py::arg("feed"), py::arg("loader"), py::arg("cache"))
      .def("to_device", &LoaderCore::to_device, py::arg("device"), py::arg("on_host"))
      .def("start_epoch", &LoaderCore::start_epoch, py::arg("indices"), py::arg("epoch"))
      .def("next", &LoaderCore::next)
      .def("drain", &LoaderCore::drain)
      .def_property_readonly("num_batches", &LoaderCore::num_batches)
      .def_property_readonly("cached_items", &LoaderCore::cached_items)
      .def_property_readonly("cached_bytes", &LoaderCore::cached_bytes)
      .def_property_readonly("pinned", &LoaderCore::pinned)
      .def("close", &LoaderCore::close);
}

}  // namespace
}  // namespace volshard::python

PYBIND11_MODULE(_volshard, m) {
  using namespace volshard;
  using namespace volshard::python;
  m.doc() = "volshard's C++ core (see volshard/__init__.py for the Python API)";
  py::register_exception_translator(&translate_system_error);
  set_warning_handler(&warn_in_python);
  // Back to stderr before the interpreter goes away.
  py::module_::import("atexit").attr("register")(
      py::cpp_function([] { set_warning_handler(nullptr); }));

  bind_sampler(m);
  bind_volumes(m);
  bind_data(m);
  bind_pipeline(m);
  bind_trainer_keys(m);
}
