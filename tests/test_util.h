// Helpers shared by the test suites: tolerance checks that report the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace paralab::testing {

// Checks |got - ref| <= atol + rtol * |ref| element-wise; on failure names the worst element
// (largest excess over its bound), its index and both values.
template <typename Got, typename Ref>
::testing::AssertionResult all_close(const Got& got, const Ref& ref, double atol, double rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != reference size " << ref.size();
  std::size_t worst = 0;
  double worst_excess = -1e300;
  bool ok = true;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
    const double excess = std::abs(g - r) - (atol + rtol * std::abs(r));
    if (!(excess <= 0)) ok = false;
    if (excess > worst_excess || std::isnan(excess)) {
      worst_excess = std::isnan(excess) ? 1e300 : excess;
      worst = i;
    }
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "worst element " << worst << ": got " << static_cast<double>(got[worst])
         << ", reference " << static_cast<double>(ref[worst]) << " (atol " << atol << ", rtol "
         << rtol << ")";
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace paralab::testing
