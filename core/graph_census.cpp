#include "core/graph_census.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace paralab {

namespace {

bool is_work(GraphNode::Kind k) {
  return k == GraphNode::Kind::Kernel || k == GraphNode::Kind::Copy || k == GraphNode::Kind::Fill;
}

// Along a path: its work nodes, and of them its kernels, copies and fills.
struct Chain {
  int64_t work = 0, kernels = 0, copies = 0, fills = 0;
  Chain plus(GraphNode::Kind k) const {
    Chain c = *this;
    c.work += is_work(k) ? 1 : 0;
    c.kernels += k == GraphNode::Kind::Kernel ? 1 : 0;
    c.copies += k == GraphNode::Kind::Copy ? 1 : 0;
    c.fills += k == GraphNode::Kind::Fill ? 1 : 0;
    return c;
  }
};

}  // namespace

nlohmann::json graph_census(const std::vector<GraphNode>& nodes,
                            const std::vector<GraphEdge>& edges) {
  const std::size_t n = nodes.size();
  std::vector<std::vector<std::size_t>> after(n);
  std::vector<std::size_t> waiting(n, 0);  // edges into each node not yet walked
  for (const GraphEdge& e : edges) {
    PARALAB_REQUIRE(e.from < n && e.to < n,
                    "graph census: an edge from node " + std::to_string(e.from) + " to node " +
                        std::to_string(e.to) + " in a graph of " + std::to_string(n) + " nodes");
    after[e.from].push_back(e.to);
    ++waiting[e.to];
  }
  // The heaviest chain ending at each node, in topological order (Kahn): a node's chain is its
  // heaviest predecessor's plus itself.
  std::vector<Chain> best(n);
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (!waiting[i]) ready.push_back(i);
  for (std::size_t i : ready) best[i] = Chain{}.plus(nodes[i].kind);
  std::size_t walked = 0;
  Chain longest;
  while (!ready.empty()) {
    const std::size_t i = ready.back();
    ready.pop_back();
    ++walked;
    if (best[i].work > longest.work) longest = best[i];
    for (std::size_t j : after[i]) {
      const Chain through = best[i].plus(nodes[j].kind);
      if (through.work > best[j].work) best[j] = through;  // a node of no work adds nothing
      if (--waiting[j] == 0) ready.push_back(j);
    }
  }
  PARALAB_REQUIRE(walked == n, "graph census: the edges form a cycle (" +
                                   std::to_string(n - walked) + " of " + std::to_string(n) +
                                   " nodes on it or after it)");

  int64_t kernels = 0, copies = 0, fills = 0, records = 0, waits = 0, empty = 0, host = 0,
          other = 0, copy_bytes = 0, fill_bytes = 0, unread = 0;
  std::map<std::string, int64_t> by_name, other_kinds;
  for (const GraphNode& node : nodes) {
    switch (node.kind) {
      case GraphNode::Kind::Kernel:
        ++kernels;
        ++by_name[node.name.empty() ? "(unnamed)" : node.name.substr(0, 120)];
        break;
      case GraphNode::Kind::Copy:
        ++copies;
        copy_bytes += std::max<int64_t>(node.bytes, 0);
        unread += node.bytes < 0 ? 1 : 0;
        break;
      case GraphNode::Kind::Fill:
        ++fills;
        fill_bytes += std::max<int64_t>(node.bytes, 0);
        unread += node.bytes < 0 ? 1 : 0;
        break;
      case GraphNode::Kind::EventRecord:
        ++records;
        break;
      case GraphNode::Kind::EventWait:
        ++waits;
        break;
      case GraphNode::Kind::Empty:
        ++empty;
        break;
      case GraphNode::Kind::Host:
        ++host;
        break;
      case GraphNode::Kind::Other:
        ++other;
        ++other_kinds[node.name.empty() ? "(unnamed)" : node.name];
        break;
    }
  }
  nlohmann::json out = {{"nodes", n},
                        {"edges", edges.size()},
                        {"kernels", kernels},
                        {"copies", copies},
                        {"copy_bytes", copy_bytes},
                        {"fills", fills},
                        {"fill_bytes", fill_bytes},
                        {"event_records", records},
                        {"event_waits", waits},
                        {"empty", empty},
                        {"host", host},
                        {"other", other},
                        {"longest_chain",
                         {{"work_nodes", longest.work},
                          {"kernels", longest.kernels},
                          {"copies", longest.copies},
                          {"fills", longest.fills}}},
                        {"kernels_by_name", by_name}};
  if (!other_kinds.empty()) out["other_kinds"] = other_kinds;
  if (unread) out["bytes_unread"] = unread;
  return out;
}

}  // namespace paralab
