#include "volshard/sampler/weighted_sampler.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

namespace volshard {
namespace {

[[noreturn]] void fail(const char* who, const std::string& message) {
  throw std::invalid_argument(std::string(who) + ": " + message);
}

// The shortest decimal that reads back as the same double, so that an error
// names the exact weight without 17 digits of noise ("0.1", not "0.10000000000000001").
std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

// Per-weight checks shared by the options and the free function; `name` is
// how the caller spells the vector in its messages.
void check_weights(const char* who, const char* name, const std::vector<double>& weights) {
  for (size_t j = 0; j < weights.size(); ++j) {
    const double w = weights[j];
    const std::string entry = std::string(name) + "[" + std::to_string(j) + "]=" + format_double(w);
    if (!std::isfinite(w)) fail(who, entry + " must be finite");
    if (w < 0) fail(who, entry + " must be >= 0");
  }
}

// Sequential running sum in double, exactly the order torch accumulates in.
double running_sum(const std::vector<double>& weights) {
  double sum = 0;
  for (const double w : weights) sum += w;
  return sum;
}

}  // namespace

double uniform_double(Mt19937& gen) {
  // at::uniform_real_distribution<double>(0, 1) on CPUGeneratorImpl::random64().
  const uint64_t bits = gen.next_u64() & ((uint64_t{1} << 53) - 1);
  return static_cast<double>(bits) * 0x1p-53;
}

std::vector<int64_t> multinomial_with_replacement(const std::vector<double>& weights,
                                                  int64_t num_samples, Mt19937& gen) {
  constexpr const char* kWho = "multinomial_with_replacement";
  if (num_samples < 0) fail(kWho, "num_samples=" + std::to_string(num_samples) + " must be >= 0");
  check_weights(kWho, "weights", weights);

  // multinomial_with_replacement_apply (aten/src/ATen/native/cpu/MultinomialKernel.cpp,
  // PyTorch 1.13): running sum, normalised by dividing every entry by the
  // total, the last entry forced to 1, then a lower-bound binary search per
  // uniform draw. Every step matches torch's rounding, so the same positions come out.
  const auto n = static_cast<int64_t>(weights.size());
  std::vector<double> cum(weights.size());
  double sum = 0;
  for (size_t j = 0; j < weights.size(); ++j) {
    sum += weights[j];
    cum[j] = sum;
  }
  if (!(sum > 0)) {
    fail(kWho, "all " + std::to_string(n) + " weights are zero: nothing can be drawn");
  }
  // torch does not check this; its draws would be meaningless (cum / inf).
  if (!std::isfinite(sum)) fail(kWho, "weights sum to inf (overflow): scale them down");
  for (double& c : cum) c /= sum;
  cum.back() = 1;  // torch sets this before every draw; it never changes in between

  std::vector<int64_t> out(static_cast<size_t>(num_samples));
  for (int64_t& pick : out) {
    const double u = uniform_double(gen);
    int64_t left = 0;
    int64_t right = n;
    while (right - left > 0) {
      const int64_t mid = left + (right - left) / 2;
      if (cum[static_cast<size_t>(mid)] < u) {
        left = mid + 1;
      } else {
        right = mid;
      }
    }
    pick = left;
  }
  return out;
}

DistributedWeightedSampler::DistributedWeightedSampler(DistributedWeightedSamplerOptions options)
    : options_(std::move(options)), shard_(options_.sampler) {
  constexpr const char* kWho = "DistributedWeightedSampler";
  const int64_t n = options_.sampler.dataset_size;
  if (static_cast<int64_t>(options_.weights.size()) != n) {
    fail(kWho, "weights.size()=" + std::to_string(options_.weights.size()) +
                   " must equal dataset_size=" + std::to_string(n) + " (one weight per index)");
  }
  check_weights(kWho, "weights", options_.weights);
  if (n > 0) {
    const double sum = running_sum(options_.weights);
    if (sum == 0) {
      fail(kWho, "all " + std::to_string(n) + " weights are zero: nothing can be drawn");
    }
    if (!std::isfinite(sum)) fail(kWho, "weights sum to inf (overflow): scale them down");
  }
  if (options_.num_samples_per_rank < -1) {
    fail(kWho, "num_samples_per_rank=" + std::to_string(options_.num_samples_per_rank) +
                   " must be >= 0, or -1 for the rank's num_samples");
  }
  num_samples_ =
      options_.num_samples_per_rank == -1 ? shard_.num_samples() : options_.num_samples_per_rank;
  if (num_samples_ > 0 && shard_.num_samples() == 0) {
    fail(kWho, "num_samples_per_rank=" + std::to_string(num_samples_) +
                   " but rank=" + std::to_string(options_.sampler.rank) +
                   " reads no samples (its shard is empty): nothing to draw from");
  }
}

void DistributedWeightedSampler::set_epoch(int64_t epoch) { shard_.set_epoch(epoch); }

std::vector<int64_t> DistributedWeightedSampler::indices() const {
  if (num_samples_ == 0) return {};
  const IndexSpan shard = shard_.indices();
  std::vector<double> weights(static_cast<size_t>(shard.size()));
  for (int64_t k = 0; k < shard.size(); ++k) {
    weights[static_cast<size_t>(k)] = options_.weights[static_cast<size_t>(shard[k])];
  }
  // Which shard a rank gets changes with the epoch when shuffling, so a shard
  // of only zero weights can only be caught here; say where, as torch cannot.
  const double sum = running_sum(weights);
  const std::string where =
      "rank=" + std::to_string(options_.sampler.rank) + " epoch=" + std::to_string(epoch()) + ": ";
  if (sum == 0) {
    fail("DistributedWeightedSampler",
         where + "all " + std::to_string(shard.size()) +
             " weights of this rank's shard are zero: nothing can be drawn");
  }
  if (!std::isfinite(sum)) {
    fail("DistributedWeightedSampler", where + "this rank's shard weights sum to inf (overflow)");
  }

  Mt19937 gen(epoch_seed(options_.generator_seed, epoch()));
  std::vector<int64_t> picks = multinomial_with_replacement(weights, num_samples_, gen);
  for (int64_t& pick : picks) pick = shard[pick];
  return picks;
}

}  // namespace volshard
