// A CUDA graph read back for its census (core/graph_census.h): the nodes, their kinds and the
// bytes of copies and memsets, and the edges, through the runtime; kernel names through the
// driver (core/cuda/green_contexts.h: kernel_node_name).
#pragma once

#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

namespace paralab::cuda {

// The census of `graph`; {"unknown": why} where the runtime cannot say.
nlohmann::json graph_census_of(cudaGraph_t graph);

}  // namespace paralab::cuda
