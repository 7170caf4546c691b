#include "batch_rows.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <utility>

#include "volshard/core/error.h"
#include "volshard/core/field.h"
#include "volshard/core/large_blocks.h"
#include "volshard/core/limits.h"

namespace volshard {
namespace detail {


namespace {

// The row shape a sample takes in a batch: C x its (view's) spatial shape.
std::vector<int64_t> row_shape(const at::Tensor& t, const std::array<int64_t, 3>& spatial) {
  return {t.size(0), spatial[0], spatial[1], spatial[2]};
}

}  // namespace

RowShapes row_shapes(const Sample& first, int64_t n, std::optional<at::ScalarType> label_dtype) {
  const auto spatial = view_shape(first);
  RowShapes r{{n}, {n}, label_dtype.value_or(first.label.scalar_type())};
  for (int64_t d : row_shape(first.image, spatial)) r.image.push_back(d);
  for (int64_t d : row_shape(first.label, spatial)) r.label.push_back(d);
  return r;
}

namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

// A pooled batch buffer holds the image rows, then the label rows from the
// next multiple of 64 bytes.
size_t label_offset_of(const RowShapes& r, const Sample& first) {
  const auto image_bytes = static_cast<size_t>(numel(r.image)) * first.image.element_size();
  return (image_bytes + 63) / 64 * 64;
}

size_t buffer_bytes(const RowShapes& r, const Sample& first) {
  return label_offset_of(r, first) +
         static_cast<size_t>(numel(r.label)) * c10::elementSize(r.label_dtype);
}

// Uninitialised batch tensors of n rows shaped (and typed) as `first`, the
// label typed label_dtype when given; pinned: in page-locked memory, which
// the workers then write the crops into directly (no second copy to pin).
void allocate_rows(const Sample& first, int64_t n, std::optional<at::ScalarType> label_dtype,
                   bool pinned, at::Tensor& image, at::Tensor& label) {
  const RowShapes r = row_shapes(first, n, label_dtype);
  check_fits_in_memory(static_cast<double>(buffer_bytes(r, first)),
                       "DataLoader: a batch of " + std::to_string(n) + " crops of " +
                           shape_text(r.image.data() + 1, r.image.size() - 1) +
                           " (batch_size x num_samples rows)");
  image = at::empty(r.image, first.image.options().pinned_memory(pinned));
  label = at::empty(r.label, first.label.options().dtype(r.label_dtype).pinned_memory(pinned));
}

// A contiguous tensor of `shape` over `storage` from byte `offset` (a multiple
// of the dtype's size).
at::Tensor tensor_over(const c10::Storage& storage, size_t offset,
                       const std::vector<int64_t>& shape, at::TensorOptions options) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  const auto itemsize = static_cast<size_t>(c10::elementSize(options.dtype().toScalarType()));
  return at::empty({0}, options)
      .set_(storage, static_cast<int64_t>(offset / itemsize), shape, strides);
}

// Whether s goes into these rows: same shapes and image dtype; the label's
// dtype too unless labels are converted to label_dtype.
bool fits(const Sample& s, const at::Tensor& image_rows, const at::Tensor& label_rows,
          std::optional<at::ScalarType> label_dtype) {
  const auto spatial = view_shape(s);
  return image_rows.sizes().slice(1) == at::IntArrayRef(row_shape(s.image, spatial)) &&
         label_rows.sizes().slice(1) == at::IntArrayRef(row_shape(s.label, spatial)) &&
         s.image.scalar_type() == image_rows.scalar_type() &&
         (label_dtype || s.label.scalar_type() == label_rows.scalar_type());
}

// `bytes` of zero-filled memory, its pages already faulted in (map_populated;
// `written`: written once too, for reserve()), owned by the returned storage
// (unmapped when the last reference goes).
c10::Storage prefaulted_storage(size_t bytes, bool written) {
  struct Mapping {
    void* address;
    size_t bytes;
  };
  void* p = map_populated(bytes, written);
  if (p == nullptr) return at::empty({static_cast<int64_t>(bytes)}, at::kByte).storage();
  auto* mapping = new Mapping{p, bytes};
  const auto release = [](void* ctx) {
    auto* m = static_cast<Mapping*>(ctx);
    unmap(m->address, m->bytes);
    delete m;
  };
  return c10::Storage(c10::Storage::use_byte_size_t(), bytes,
                      c10::DataPtr(p, mapping, release, c10::Device(c10::kCPU)), nullptr, false);
}

// "image 1x32x32x32 Float, label 1x32x32x32 Byte": what a sample brings to
// a batch.
std::string rows_text(const Sample& s) {
  const auto spatial = view_shape(s);
  return "image " + shape_text(row_shape(s.image, spatial)) + " " +
         std::string(c10::toString(s.image.scalar_type())) + ", label " +
         shape_text(row_shape(s.label, spatial)) + " " + c10::toString(s.label.scalar_type());
}

}  // namespace detail

using namespace detail;

Batch collate(std::vector<Sample> samples, std::optional<at::ScalarType> label_dtype, bool pinned,
              Gather how) {
  Batch batch;
  if (samples.empty()) return batch;
  allocate_rows(samples[0], static_cast<int64_t>(samples.size()), label_dtype, pinned, batch.image,
                batch.label);
  for (size_t k = 0; k < samples.size(); ++k) {
    if (!fits(samples[k], batch.image, batch.label, label_dtype)) {
      // As MONAI's list_data_collate, crops are stacked, not padded: a crop
      // that allow_smaller shrank to a smaller volume does not stack.
      throw FieldError("collate: sample " + std::to_string(k) + " (dataset index " +
                       std::to_string(samples[k].meta.index) + ": " + rows_text(samples[k]) +
                       ") has another shape or dtype than sample 0 (dataset index " +
                       std::to_string(samples[0].meta.index) + ": " + rows_text(samples[0]) +
                       "); a batch stacks equal crops: with " + field_ref("allow_smaller") +
                       " use a " + field_ref("crop") + " that fits every volume, or " +
                       field_ref("batch_size") + "=1 with " + field_ref("num_samples") + "=1");
    }
  }
  for (size_t k = 0; k < samples.size(); ++k) {
    at::Tensor image = batch.image[static_cast<int64_t>(k)],
               label = batch.label[static_cast<int64_t>(k)];
    materialize_into(samples[k], image, label, how);  // the crop, turn and flip happen here, once
    batch.meta.push_back(std::move(samples[k].meta));
  }
  return batch;
}

}  // namespace volshard
