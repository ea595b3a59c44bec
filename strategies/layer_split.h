// layer_split: model parallelism across layers, the book's first way to split training. The
// model's layers are cut into k contiguous stages, one per device; each device holds only its
// stage's parameters; activations go forward and their gradients back between neighbouring
// stages over the collectives' Transport.
//
// With m micro-batches the global minibatch is cut into m equal parts that flow through the
// stages one after another, so that stage s works on micro-batch j while stage s+1 works on j-1
// (GPipe). Gradients accumulate over the micro-batches, so the update equals the full-batch
// update. m = 1 is the plain split: one device busy at a time.
//
// Options (descriptor run keys):
//   "split": "auto"         stage boundaries: an array of k-1 increasing layer indices in
//                           1..layers-1 ([1] = the first layer | the rest), or "auto": each
//                           layer's forward and backward timed at the micro-batch size on
//                           device 0 (a short profiling pass in setup, as graph replays where
//                           the step will be one graph: profile_layers) and the boundaries
//                           that minimise the slowest stage chosen
//   "microbatches": 1       m, dividing every global minibatch
//   "schedule": "gpipe"     gpipe (all forwards, then all backwards) | 1f1b (PipeDream-Flush:
//                           the same bubble, at most k micro-batches in flight)
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/model.h"
#include "strategies/strategy.h"

namespace paralab {

std::unique_ptr<Strategy> make_layer_split(const nlohmann::json& options, const std::string& path);

// The boundaries (k+1 of them, 0 first and the layer count last) that minimise the slowest
// stage's summed layer time, over every way to cut the layers into k contiguous non-empty
// stages; ties go to the earliest cut.
std::vector<int> balanced_split(const std::vector<double>& layer_ms, int stages);

// Each of the model's layers' forward + backward time (median of 5 runs after a warm-up, ms) at
// batch n on `device`, taken as the stages will run:
//   kHostClock     the host's clock around each eager pass, the device synchronised after it:
//                  what a stage of an eager pipeline costs, its launches included (the CPU's
//                  work runs when queued, so this is its compute);
//   kGraphReplays  each layer's pass captured once as a graph (after an eager warm-up) and
//                  replayed, timed by device marks taken in the capture: what the stage costs
//                  inside a step's graph, where no host launches a kernel. Where the capture
//                  fails, every layer is timed by the host clock instead and `why_not_graphs`
//                  says why.
enum class LayerTiming { kHostClock, kGraphReplays };
const char* layer_timing_name(LayerTiming t);

struct LayerProfile {
  std::vector<double> layer_ms;
  LayerTiming timing = LayerTiming::kHostClock;
  std::string why_not_graphs;  // set where graph replays were asked for but could not be made
};

LayerProfile profile_layers(const Model& model, Device& device,
                            const std::vector<float>& parameters, int64_t n,
                            LayerTiming timing = LayerTiming::kHostClock);

}  // namespace paralab
