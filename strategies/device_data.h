// The dataset as one device holds it: both splits uploaded once, labels as int32, and the test
// set's identity order (evaluation gathers its batches in order with the op training uses).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/fashion_mnist.h"
#include "core/model.h"
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

// Where a strategy's step is a CUDA graph, one capture serves the run: its passes run in slots of
// their own (of the model, of its inputs), so that nothing the graph points to moves. The
// graphed steps' slot (the first step's too, which sizes it), evaluations', and eager steps of
// another batch size (an epoch's shorter last batch). Elsewhere every pass runs in the first.
enum PassSlot : int { kGraphSlot = 0, kEvalSlot = 1, kOtherSlot = 2, kPassSlots = 3 };

// A pass's input batch in each slot: images x and labels y, made anew when the slot's batch size
// changes (never in the graphed steps' slot once their size is set).
struct SlotInputs {
  std::array<Tensor, kPassSlots> x, y;
  // x[slot], sized for n examples of `model`'s input (y[slot] with it).
  Tensor& sized(Device& device, const Model& model, int64_t n, int slot) {
    Tensor& t = x[static_cast<std::size_t>(slot)];
    if (!t.defined() || t.dim(0) != n) {
      t = Tensor::empty(device, model.activation_shape(0, n));
      y[static_cast<std::size_t>(slot)] = Tensor::empty(device, {n}, DType::I32);
    }
    return t;
  }
};

}  // namespace paralab
