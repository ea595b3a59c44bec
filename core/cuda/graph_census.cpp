#include "core/cuda/graph_census.h"

#include <unordered_map>
#include <vector>

#include "core/cuda/green_contexts.h"
#include "core/error.h"
#include "core/graph_census.h"

namespace paralab::cuda {

nlohmann::json graph_census_of(cudaGraph_t graph) {
  const auto unknown = [](const std::string& why) { return nlohmann::json{{"unknown", why}}; };
  const auto failed = [](cudaError_t e, const char* call) {
    (void)cudaGetLastError();
    return std::string(call) + " failed: " + cudaGetErrorString(e);
  };
  std::size_t n = 0;
  cudaError_t e = cudaGraphGetNodes(graph, nullptr, &n);
  std::vector<cudaGraphNode_t> handles(n);
  if (e == cudaSuccess && n) e = cudaGraphGetNodes(graph, handles.data(), &n);
  if (e != cudaSuccess) return unknown(failed(e, "cudaGraphGetNodes"));
  handles.resize(n);
  std::vector<GraphNode> nodes(n);
  std::unordered_map<cudaGraphNode_t, std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) {
    index.emplace(handles[i], i);
    cudaGraphNodeType type{};
    if ((e = cudaGraphNodeGetType(handles[i], &type)) != cudaSuccess)
      return unknown(failed(e, "cudaGraphNodeGetType"));
    GraphNode& node = nodes[i];
    switch (type) {
      case cudaGraphNodeTypeKernel: {
        node.kind = GraphNode::Kind::Kernel;
        node.name = kernel_node_name(handles[i]);  // "" without the driver's name functions
        break;
      }
      case cudaGraphNodeTypeMemcpy: {
        node.kind = GraphNode::Kind::Copy;
        cudaMemcpy3DParms p{};
        // Linear memory: the extent's width is in bytes (in elements only for CUDA arrays). A
        // copy the runtime does not describe is counted, its bytes unread (-1).
        if ((e = cudaGraphMemcpyNodeGetParams(handles[i], &p)) == cudaSuccess)
          node.bytes = static_cast<int64_t>(p.extent.width * p.extent.height * p.extent.depth);
        else {
          node.bytes = -1;  // counted as unread (bytes_unread), not as 0 bytes
          (void)failed(e, "cudaGraphMemcpyNodeGetParams");
        }
        break;
      }
      case cudaGraphNodeTypeMemset: {
        node.kind = GraphNode::Kind::Fill;
        cudaMemsetParams p{};
        if ((e = cudaGraphMemsetNodeGetParams(handles[i], &p)) == cudaSuccess)
          node.bytes = static_cast<int64_t>(p.elementSize) * static_cast<int64_t>(p.width) *
                       static_cast<int64_t>(p.height);
        else {
          node.bytes = -1;  // counted as unread (bytes_unread), not as 0 bytes
          (void)failed(e, "cudaGraphMemsetNodeGetParams");
        }
        break;
      }
      case cudaGraphNodeTypeEventRecord:
        node.kind = GraphNode::Kind::EventRecord;
        break;
      case cudaGraphNodeTypeWaitEvent:
        node.kind = GraphNode::Kind::EventWait;
        break;
      case cudaGraphNodeTypeEmpty:
        node.kind = GraphNode::Kind::Empty;
        break;
      case cudaGraphNodeTypeHost:
        node.kind = GraphNode::Kind::Host;
        break;
      default:
        node.kind = GraphNode::Kind::Other;
        node.name = "cudaGraphNodeType " + std::to_string(static_cast<int>(type));
    }
  }
  std::size_t m = 0;
  // CUDA 12.3 added edge data (programmatic launches' edges carry some, and a query without room
  // for it fails as lossy); 13.0 made that signature the plain name.
#if CUDART_VERSION >= 13000
#define PARALAB_GRAPH_EDGES(from, to, data, count) cudaGraphGetEdges(graph, from, to, data, count)
#else
#define PARALAB_GRAPH_EDGES(from, to, data, count) \
  cudaGraphGetEdges_v2(graph, from, to, data, count)
#endif
  e = PARALAB_GRAPH_EDGES(nullptr, nullptr, nullptr, &m);
  std::vector<cudaGraphNode_t> from(m), to(m);
  std::vector<cudaGraphEdgeData> data(m);
  if (e == cudaSuccess && m) e = PARALAB_GRAPH_EDGES(from.data(), to.data(), data.data(), &m);
#undef PARALAB_GRAPH_EDGES
  if (e != cudaSuccess) return unknown(failed(e, "cudaGraphGetEdges"));
  std::vector<GraphEdge> edges;
  for (std::size_t i = 0; i < m; ++i) {
    const auto a = index.find(from[i]), b = index.find(to[i]);
    if (a == index.end() || b == index.end())
      return unknown("cudaGraphGetEdges: an edge to a node cudaGraphGetNodes did not list");
    edges.push_back({a->second, b->second});
  }
  try {
    return graph_census(nodes, edges);
  } catch (const Error& err) {
    return unknown(err.what());
  }
}

}  // namespace paralab::cuda
