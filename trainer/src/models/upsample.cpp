#include "models/upsample.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace volshard::detail {

at::Tensor linear_interpolation_matrix(int64_t in_size, int64_t out_size, double scale) {
  if (in_size < 1 || out_size < 1)
    throw std::invalid_argument("linear_interpolation_matrix: sizes " + std::to_string(in_size) +
                                " -> " + std::to_string(out_size) + " must be >= 1");
  // area_pixel_compute_scale and _source_index (aten/src/ATen/native/UpSample.h):
  // the ratio 1 / scale where a scale is given, the source clamped at 0.
  const double ratio = scale > 0 ? 1.0 / scale : static_cast<double>(in_size) / out_size;
  at::Tensor m = at::zeros({out_size, in_size}, at::kDouble);
  auto w = m.accessor<double, 2>();
  for (int64_t o = 0; o < out_size; ++o) {
    const double src = std::max(0.0, ratio * (static_cast<double>(o) + 0.5) - 0.5);
    const auto i0 = std::min(static_cast<int64_t>(src), in_size - 1);
    const int64_t i1 = i0 + (i0 < in_size - 1 ? 1 : 0);
    const double lambda1 = std::min(src - static_cast<double>(i0), 1.0);
    w[o][i0] += 1.0 - lambda1;
    w[o][i1] += lambda1;
  }
  return m;
}

namespace {

struct UpsampleTrilinear : torch::autograd::Function<UpsampleTrilinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double sd,
                            double sh, double sw) {
    const std::vector<int64_t> out{static_cast<int64_t>(std::floor(x.size(2) * sd)),
                                   static_cast<int64_t>(std::floor(x.size(3) * sh)),
                                   static_cast<int64_t>(std::floor(x.size(4) * sw))};
    ctx->saved_data["in"] = std::vector<int64_t>{x.size(2), x.size(3), x.size(4)};
    ctx->saved_data["scale"] = std::vector<double>{sd, sh, sw};
    return at::upsample_trilinear3d(x, out, /*align_corners=*/false, sd, sh, sw);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<int64_t> in = ctx->saved_data["in"].toIntVector();
    const std::vector<double> scale = ctx->saved_data["scale"].toDoubleVector();
    at::Tensor g = grads[0];
    // Axis by axis (W, H, D): g's axis moved last, times M (out x in), moved back.
    for (int64_t axis = 4; axis >= 2; --axis) {
      const auto k = static_cast<size_t>(axis - 2);
      const at::Tensor m =
          linear_interpolation_matrix(in[k], g.size(axis), scale[k]).to(g.options());
      g = at::matmul(g.transpose(axis, 4), m).transpose(axis, 4);
    }
    return {g.contiguous(grads[0].suggest_memory_format()), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor upsample_trilinear_deterministic(const at::Tensor& x,
                                            const std::array<double, 3>& scale) {
  if (x.dim() != 5)
    throw std::invalid_argument(
        "upsample_trilinear_deterministic: input must be N x C x D x H x W");
  return UpsampleTrilinear::apply(x, scale[0], scale[1], scale[2]);
}

}  // namespace volshard::detail
