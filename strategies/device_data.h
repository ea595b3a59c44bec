// The dataset as one device holds it: both splits uploaded once, labels as int32, and the test
// set's identity order (evaluation gathers its batches in order with the op training uses).
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/fashion_mnist.h"
#include "core/tensor.h"

namespace paralab {

struct DeviceData {
  Tensor train_x, train_y, test_x, test_y, test_order;

  DeviceData() = default;
  DeviceData(Device& device, const Dataset& train, const Dataset& test)
      : train_x(Tensor::from_host(device, {train.count, 1, train.rows, train.cols}, train.images)),
        train_y(Tensor::from_host(device, {train.count}, train.labels)),
        test_x(Tensor::from_host(device, {test.count, 1, test.rows, test.cols}, test.images)),
        test_y(Tensor::from_host(device, {test.count}, test.labels)),
        test_order(Tensor::from_host(device, {test.count}, identity(test.count))) {}

  static std::vector<int32_t> identity(int64_t n) {
    std::vector<int32_t> v(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i);
    return v;
  }
};

}  // namespace paralab
