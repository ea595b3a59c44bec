// Where an output pixel of Resize reads its input (the conventions are stated at Resize in
// core/ops.h): one definition for the CPU loops, the CUDA kernel and the reference's checks.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace paralab {

// Nearest: floor((i + 0.5) * in / out) for output index i, in integers (exact for any sizes).
PARALAB_HOST_DEVICE inline int64_t resize_nearest_index(int64_t i, int64_t in, int64_t out) {
  return ((2 * i + 1) * in) / (2 * out);
}

// Bilinear along one dimension: y = (1 - frac) * x[lo] + frac * x[hi].
struct ResizeTap {
  int64_t lo, hi;
  float frac;
};

// The half-pixel source coordinate (i + 0.5) * in / out - 0.5 in float as PyTorch computes it
// (scale = in / out rounded once), clamped below at 0; hi repeats the last pixel at the far edge.
PARALAB_HOST_DEVICE inline ResizeTap resize_linear_tap(int64_t i, int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  float src = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
  if (src < 0.0f) src = 0.0f;
  int64_t lo = static_cast<int64_t>(src);  // floor, src >= 0
  if (lo > in - 1) lo = in - 1;
  const int64_t hi = lo < in - 1 ? lo + 1 : lo;
  return {lo, hi, src - static_cast<float>(lo)};
}

}  // namespace paralab
