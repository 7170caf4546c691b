#include "parallel/ddp.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>
#include <stdexcept>
#include <string>

namespace volshard {

void broadcast_tensors(const std::vector<at::Tensor>& tensors, Communicator& comm, int64_t root) {
  if (comm.world_size() == 1) return;
  // One flat buffer per dtype: a handful of broadcasts instead of one per tensor.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_type;
  for (const auto& t : tensors) by_type[t.scalar_type()].push_back(t);
  c10::NoGradGuard no_grad;
  for (auto& [type, group] : by_type) {
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : group) flat_parts.push_back(t.detach().reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    comm.broadcast(flat, root);
    int64_t offset = 0;
    for (const auto& t : group) {
      t.detach().view({-1}).copy_(flat.narrow(0, offset, t.numel()));
      offset += t.numel();
    }
  }
}

void GradientReducerOptions::validate() const {
  if (bucket_bytes < 1 || first_bucket_bytes < 1)
    throw std::invalid_argument("GradientReducer: bucket_bytes=" + std::to_string(bucket_bytes) +
                                " and first_bucket_bytes=" + std::to_string(first_bucket_bytes) +
                                " must be >= 1");
}

struct GradientReducer::Impl {
  struct Bucket {
    std::vector<int64_t> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in flat
    at::Tensor flat;
    int64_t pending = 0;  // gradients still missing this step
    std::unique_ptr<PendingReduce> reduce;
  };
  std::vector<at::Tensor> params;
  Communicator* comm = nullptr;
  std::vector<Bucket> buckets;
  std::vector<std::vector<int64_t>> layout;
  std::vector<std::pair<int64_t, int64_t>> where;  // param -> (bucket, slot)
  std::vector<bool> ready;
  std::vector<unsigned> hooks;
  size_t next_launch = 0;
  int64_t launched_early = 0;
  int64_t launched_total = 0;
  bool in_step = false;

  void on_grad(int64_t p, const at::Tensor& grad) {
    if (!in_step) return;  // backward outside a prepare()/finish() pair: plain local gradients
    const auto [b, slot] = where[static_cast<size_t>(p)];
    Bucket& bucket = buckets[static_cast<size_t>(b)];
    if (ready[static_cast<size_t>(p)])
      throw std::logic_error(
          "GradientReducer: parameter " + std::to_string(p) +
          " received a second gradient in one backward (used twice in forward?)");
    ready[static_cast<size_t>(p)] = true;
    const at::Tensor& param = params[static_cast<size_t>(p)];
    at::Tensor slice =
        bucket.flat.narrow(0, bucket.offsets[static_cast<size_t>(slot)], param.numel());
    if (param.grad().defined()) {  // micro-steps before this one (no_sync) summed into grad
      at::add_out(slice, param.grad().reshape({-1}), grad.reshape({-1}));
    } else {
      slice.copy_(grad.reshape({-1}));
    }
    --bucket.pending;
    launch_ready();
  }

  // Launches full buckets in bucket order, so every rank issues the same
  // sequence of collectives whatever order the hooks fire in.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      buckets[next_launch].reduce = comm->allreduce_sum_async(buckets[next_launch].flat);
      ++next_launch;
      ++launched_total;
      if (in_step) ++launched_early;
    }
  }
};

GradientReducer::GradientReducer(std::vector<at::Tensor> parameters, Communicator& comm,
                                 GradientReducerOptions options)
    : impl_(std::make_unique<Impl>()) {
  options.validate();
  auto& m = *impl_;
  m.params = std::move(parameters);
  m.comm = &comm;
  m.where.resize(m.params.size());
  m.ready.assign(m.params.size(), false);
  // Reverse order, DDP's bucket caps; a bucket holds one dtype.
  int64_t cap = options.first_bucket_bytes;
  Impl::Bucket current;
  int64_t bytes = 0, elements = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    current.flat =
        at::zeros({elements}, m.params[static_cast<size_t>(current.params[0])].options());
    m.layout.push_back(current.params);
    m.buckets.push_back(std::move(current));
    current = Impl::Bucket();
    bytes = elements = 0;
    cap = options.bucket_bytes;
  };
  for (int64_t p = static_cast<int64_t>(m.params.size()) - 1; p >= 0; --p) {
    const at::Tensor& t = m.params[static_cast<size_t>(p)];
    if (!t.requires_grad())
      throw std::invalid_argument("GradientReducer: parameter " + std::to_string(p) +
                                  " does not require a gradient");
    if (!current.params.empty() &&
        t.scalar_type() != m.params[static_cast<size_t>(current.params[0])].scalar_type())
      close();
    m.where[static_cast<size_t>(p)] = {static_cast<int64_t>(m.buckets.size()),
                                       static_cast<int64_t>(current.params.size())};
    current.params.push_back(p);
    current.offsets.push_back(elements);
    elements += t.numel();
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
    if (bytes >= cap) close();
  }
  close();
  Impl* impl = impl_.get();
  for (size_t p = 0; p < m.params.size(); ++p) {
    const auto index = static_cast<int64_t>(p);
    m.hooks.push_back(m.params[p].register_hook(
        [impl, index](const at::Tensor& grad) { impl->on_grad(index, grad); }));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t p = 0; p < impl_->params.size(); ++p) {
    try {
      impl_->params[p].remove_hook(impl_->hooks[p]);
    } catch (...) {  // a tensor that no longer has autograd metadata: nothing to remove
    }
  }
}

void GradientReducer::prepare() {
  auto& m = *impl_;
  for (auto& b : m.buckets) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.reduce.reset();
  }
  std::fill(m.ready.begin(), m.ready.end(), false);
  m.next_launch = 0;
  m.launched_early = 0;
  m.in_step = true;
}

void GradientReducer::finish() {
  auto& m = *impl_;
  if (!m.in_step) throw std::logic_error("GradientReducer::finish() without prepare()");
  m.in_step = false;
  for (size_t p = 0; p < m.params.size(); ++p) {
    if (!m.ready[p])
      throw std::logic_error("GradientReducer: parameter " + std::to_string(p) +
                             " received no gradient this step (unused in forward?)");
  }
  const double scale = 1.0 / static_cast<double>(m.comm->world_size());
  c10::NoGradGuard no_grad;
  for (auto& b : m.buckets) {
    b.reduce->wait();
    b.reduce.reset();
    if (m.comm->world_size() > 1) b.flat.mul_(scale);
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      at::Tensor& param = m.params[static_cast<size_t>(b.params[slot])];
      const at::Tensor avg = b.flat.narrow(0, b.offsets[slot], param.numel()).view(param.sizes());
      if (param.grad().defined()) {
        param.mutable_grad().copy_(avg);
      } else {
        param.mutable_grad() = avg.clone();
      }
    }
  }
}

const std::vector<std::vector<int64_t>>& GradientReducer::buckets() const { return impl_->layout; }

int64_t GradientReducer::launched_during_backward() const { return impl_->launched_early; }

int64_t GradientReducer::allreduces() const { return impl_->launched_total; }

at::Tensor flat_gradients(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> parts;
  for (const at::Tensor& p : parameters)
    parts.push_back(p.grad().defined() ? p.grad().reshape({-1})
                                       : at::zeros({p.numel()}, p.options()));
  return at::cat(parts).to(at::kFloat);
}

int exact_gradient_mean(const std::vector<at::Tensor>& samples, int64_t count,
                        const std::vector<at::Tensor>& parameters, Communicator& comm) {
  int64_t numel = 0;
  for (const at::Tensor& p : parameters) numel += p.numel();
  c10::NoGradGuard no_grad;
  double local = 0;
  for (const at::Tensor& s : samples) local = std::max(local, s.abs().max().item<double>());
  at::Tensor most = at::tensor({local}, at::kDouble);
  comm.allreduce_max(most);
  int e = 0;
  if (most.item<double>() > 0) {
    int exponent = 0;  // count * most < 2^exponent
    std::frexp(most.item<double>() * static_cast<double>(std::max<int64_t>(count, 1)), &exponent);
    e = 62 - exponent;
  }
  const double scale = std::ldexp(1.0, e);
  at::Tensor sum = at::zeros({numel}, at::kLong);
  for (const at::Tensor& s : samples) sum.add_(at::round(s.to(at::kDouble) * scale).to(at::kLong));
  comm.allreduce_sum(sum);
  const at::Tensor mean =
      (sum.to(at::kDouble) / (scale * static_cast<double>(std::max<int64_t>(count, 1))))
          .to(at::kFloat);
  int64_t offset = 0;
  for (const at::Tensor& p : parameters) {
    at::Tensor g = mean.narrow(0, offset, p.numel()).view(p.sizes()).to(p.scalar_type());
    offset += p.numel();
    if (p.grad().defined()) {
      p.mutable_grad().copy_(g);
    } else {
      p.mutable_grad() = g.clone();
    }
  }
  return e;
}

}  // namespace volshard
