// data_parallel: the book's strategy. Every device holds a full replica of the model; each global
// minibatch is split into k shards, one per device; each device computes the gradient of its
// shard's summed loss; an allreduce (naive | ring | tree) sums the gradients; every replica takes
// the same SGD step (lr / global batch), so replicas stay bit-identical.
//
// Options (descriptor run keys):
//   "allreduce": "ring"        naive | ring | tree | nccl (CUDA devices on distinct GPUs)
//   "grouping": "bucketed"     per_tensor (8 allreduces, as the book) | bucketed (size-capped
//                              groups of whole tensors, last layer first, as PyTorch DDP)
//   "bucket_bytes": 26214400   bucket cap (DDP's 25 MiB)
//   "overlap": false           start each bucket's allreduce as soon as backward has produced
//                              it, on a communication thread per device
//   "chunk_bytes": 262144      piece size for the ring's and tree's pipelines
//   "cuda_graphs": true        on CUDA devices: capture the step once and replay it (with
//                              nccl, a graph per rank; with naive, ring or tree, one graph over
//                              a GPU's virtual devices; overlap's communication stream included)
//   "uneven_shards": false     allow a global batch not divisible by k (shards differ by one;
//                              the summed loss weights every example equally either way)
//   "read_back": "step"        when the host reads a graphed step's figures: "step" (each
//                              launch waited for, its loss, accuracy and every device's phases
//                              read), or "epoch" (launches queued without waiting, as `single`
//                              does on GPUs: each step's loss, accuracy and time, from the end
//                              of the step before on the device's queue, read once per epoch;
//                              per-device phases for the last of them only). Eager steps are
//                              read per step either way.
//                              "epoch" needs every rank in one process.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "strategies/strategy.h"

namespace paralab {

std::unique_ptr<Strategy> make_data_parallel(const nlohmann::json& options,
                                             const std::string& path);

}  // namespace paralab
