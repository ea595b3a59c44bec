// Seeded random numbers whose output is fixed by ParaLab itself, not by the standard library:
// std::normal_distribution and std::shuffle differ between implementations, and initial weights,
// minibatch order and dropout masks must not depend on the platform, the backend or the device
// count.
//
// Also compiled by nvcc (dropout_uniform runs in CUDA kernels), whose C++ dialect here is C++17:
// nothing below may need C++20.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace paralab {

// splitmix64's output function (Steele, Lea & Flood): a bijection of 64-bit words in which every
// input bit changes about half the output bits.
PARALAB_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The uniform number behind dropout's mask: a pure function of (seed, global example, global
// feature), so that a batch computed at once, split by examples (data parallel) or split by
// channels (channel split) drops exactly the same units, on any backend. Counter-based: three
// chained splitmix64 rounds, the seed first, each coordinate xor-ed in before a round. Returns
// the top 24 bits as k / 2^24 in [0, 1), exact in float.
PARALAB_HOST_DEVICE inline float dropout_uniform(uint64_t seed, int64_t example, int64_t feature) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<uint64_t>(example));
  h = splitmix64(h ^ static_cast<uint64_t>(feature));
  return static_cast<float>(h >> 40) * 0x1.0p-24f;
}

// xoshiro256** seeded through splitmix64 (Blackman & Vigna).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      s = z ^ (z >> 31);
    }
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), unbiased (Lemire's method with rejection).
  uint64_t below(uint64_t n) {
    for (;;) {
      const unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
      const uint64_t low = static_cast<uint64_t>(m);
      if (low >= n || low >= (0 - n) % n) return static_cast<uint64_t>(m >> 64);
    }
  }

  // Standard normal by Box-Muller (both values used).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = 0.0;
    while (u1 == 0.0) u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return r * std::cos(kTwoPi * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  // 2 * std::numbers::pi (C++20) to the bit: doubling the double nearest pi is exact.
  static constexpr double kTwoPi = 6.283185307179586;
  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// Fisher-Yates permutation of 0..n-1.
inline std::vector<int32_t> random_permutation(int64_t n, Rng& rng) {
  std::vector<int32_t> p(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

}  // namespace paralab
