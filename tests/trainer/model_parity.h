#pragma once
// What the model parity tests share: the key and shape listings MONAI's
// state_dicts are compared with (fixtures/monai_*_state_dict.txt:
// "key<TAB>(a, b, ...)<TAB>dtype<TAB>numel"), and a MONAI-made fixture
// (fixtures/*_parity_small/, make_model_parity.py) run through a Model.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "volshard/trainer/loss.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/serialize.h"

namespace volshard::test_support {

using KeysAndShapes = std::vector<std::pair<std::string, std::string>>;

/// "(4, 1, 3, 3, 3)", "(8,)": as Python prints a shape.
inline std::string shape_text(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t d = 0; d < t.dim(); ++d)
    s += std::to_string(t.size(d)) + (t.dim() == 1 ? ",)" : d + 1 < t.dim() ? ", " : ")");
  return s;
}

/// key -> shape in MONAI's state_dict order, from a listing file.
inline KeysAndShapes read_listing(const std::string& path) {
  std::ifstream in(path);
  KeysAndShapes out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, shape;
    std::getline(fields, key, '\t');
    std::getline(fields, shape, '\t');
    out.emplace_back(key, shape);
  }
  return out;
}

inline KeysAndShapes keys_and_shapes(const Model& net) {
  KeysAndShapes out;
  for (const auto& kv : net.state_dict()) out.emplace_back(kv.first, shape_text(kv.second));
  return out;
}

struct Parity {
  Model net;
  at::Tensor input, label, output, loss;
  NamedTensors grads;
};

/// The fixture in `dir` through a Model of `options` with MONAI's weights:
/// forward, the Dice loss of `loss`, backward.
inline Parity run_parity(const std::string& dir, const ModelOptions& options,
                         const DiceLossOptions& loss) {
  Parity p{Model(options, 123),
           load_tensor(dir + "/input.pt"),
           load_tensor(dir + "/label.pt"),
           {},
           {},
           {}};
  p.net.load_state_dict(load_tensor_dict(dir + "/state_dict.pt"));
  p.output = p.net.forward(p.input);
  p.loss = dice_loss(p.output, p.label, loss);
  p.loss.backward();
  for (const auto& kv : p.net.named_parameters()) p.grads.emplace_back(kv.first, kv.second.grad());
  return p;
}

/// Output and every gradient within rtol 1e-4, atol 1e-5 of MONAI's, the loss
/// within 1e-5 of `monai_loss`.
inline void expect_parity(const std::string& dir, const Parity& p, double monai_loss) {
  const at::Tensor expected_output = load_tensor(dir + "/output.pt");
  ASSERT_EQ(p.output.sizes(), expected_output.sizes());
  EXPECT_TRUE(at::allclose(p.output, expected_output, 1e-4, 1e-5))
      << "max abs diff " << (p.output - expected_output).abs().max().item<double>();
  EXPECT_NEAR(p.loss.item<double>(), monai_loss, 1e-5);
  std::map<std::string, at::Tensor> expected_grads;
  for (const auto& kv : load_tensor_dict(dir + "/grads.pt")) expected_grads[kv.first] = kv.second;
  ASSERT_EQ(expected_grads.size(), p.grads.size());
  for (const auto& kv : p.grads) {
    ASSERT_TRUE(expected_grads.count(kv.first)) << kv.first;
    ASSERT_TRUE(kv.second.defined()) << kv.first;
    EXPECT_TRUE(at::allclose(kv.second, expected_grads[kv.first], 1e-4, 1e-5))
        << kv.first << " max abs diff "
        << (kv.second - expected_grads[kv.first]).abs().max().item<double>();
  }
}

}  // namespace volshard::test_support
