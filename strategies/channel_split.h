// channel_split: model parallelism within layers, the book's second way to split training (as
// the original AlexNet did on two GPUs). Every device sees the whole minibatch; each conv and FC
// layer's output channels / units are divided across the k devices (uneven splits allowed: 20
// channels over 3 devices are 7/7/6), and each device holds only its share of the parameters.
//
// pairing "none": after every layer the devices all-gather its output, since the next layer
// needs every input channel; in backward each device's input gradient covers every channel, and
// a reduce-scatter sums those partial gradients, leaving each device the sum for the channels
// it owns.
//
// pairing "megatron": conv2 (output channels split) is paired with fc1 split by its INPUT
// features (the rows of W3 that read conv2's channels on this device), as Megatron-LM pairs a
// column-parallel with a row-parallel layer: fc1's partial outputs are summed by one allreduce
// forward and fc1's own input gradient needs no communication; fc2's output gradient is summed
// by one allreduce in backward. That replaces two all-gathers and two reduce-scatters (conv2's
// output and fc1's) with two allreduces of fc1's 128 units. conv1 -> conv2 cannot be paired so:
// conv2 fuses its ReLU and pooling, which must see the complete pre-activation (50x9x9 per image,
// more than the 20x13x13 gathered instead).
//
// Options (descriptor run keys):
//   "pairing": "none"     none | megatron
//   "allreduce": "ring"   the allreduce that megatron pairing uses: naive | ring | tree
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "strategies/strategy.h"

namespace paralab {

std::unique_ptr<Strategy> make_channel_split(const nlohmann::json& options,
                                             const std::string& path);

}  // namespace paralab
