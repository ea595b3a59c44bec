// What a captured step holds (a CUDA graph, read back after its capture): its nodes by kind, the
// bytes its copies and fills move, and the longest chain of dependent work in it. The results
// record it beside the step's time (strategy_report.cuda_graph.census), so that a step slower than
// its kernels' sum can be read: copies and fills that no kernel profile lists (a library's staging
// copy, a workspace zeroed each call), and a chain of dependent nodes that a replay runs one after
// another, each paying the GPU's launch latency, however wide the GPU.
//
// The backend reads the nodes and edges (core/cuda: graph_census_of); the counting is here, on
// plain data, so that it is tested on any machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace paralab {

struct GraphNode {
  // Kernel, Copy (memcpy), Fill (memset): work the GPU runs. EventRecord, EventWait, Empty: order
  // only. Host: a host function the graph calls. Other: any other kind (named in `name`).
  enum class Kind { Kernel, Copy, Fill, EventRecord, EventWait, Empty, Host, Other };
  Kind kind = Kind::Other;
  std::string
      name;  // Kernel: the function's name ("" where the driver gives none); Other: the kind
  int64_t bytes = 0;  // Copy, Fill: the bytes written; -1 where the backend could not read them
};

// An edge of the graph: `to` runs after `from` (indices into the nodes).
struct GraphEdge {
  std::size_t from = 0, to = 0;
};

// The census of a graph of `nodes` and `edges`:
//   nodes, edges; kernels, copies, copy_bytes, fills, fill_bytes, event_records, event_waits,
//   empty, host, other (with other_kinds: name -> count); bytes_unread: the copies and fills
//   whose bytes the backend could not read (only when some), left out of copy_bytes / fill_bytes;
//   longest_chain: {work_nodes, kernels, copies, fills} along the path with the most work
//     nodes (kernels, copies, fills), the ones a replay must run one after another;
//   kernels_by_name: name (cut to 120 characters; "(unnamed)") -> count.
// Throws Error when an edge names a node that does not exist or the edges form a cycle.
nlohmann::json graph_census(const std::vector<GraphNode>& nodes,
                            const std::vector<GraphEdge>& edges);

}  // namespace paralab
