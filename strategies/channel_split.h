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
// pairing "megatron": the layers the model marks as split by INPUT (Model's SplitMode::kInput:
// a linear layer whose rows of W read the previous layer's channels on this device) are paired
// with the output-split layer before them, as Megatron-LM pairs a column-parallel with a
// row-parallel layer: the partial outputs are summed by one allreduce forward, the layer's own
// input gradient needs no communication, and the next output-split layer's input gradient is
// summed by one allreduce in backward. For the default model that replaces two all-gathers and
// two reduce-scatters (conv2's output and fc1's) with two allreduces of fc1's 128 units.
// Parameterless per-channel layers (pooling, dropout) run on whatever channel shard they get;
// the input resize runs whole on every device. The collectives and their byte counts follow
// from the per-layer modes (channel_split.cpp, plan()).
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
