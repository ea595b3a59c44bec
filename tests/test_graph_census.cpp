// The census of a captured step (core/graph_census.h) on graphs written out by hand: the counts
// by kind, the bytes of copies and fills, and the longest chain of work, which a GPU's graph of
// the same shape gives through the backend (core/cuda: graph_census_of).
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/graph_census.h"

namespace paralab {
namespace {

using json = nlohmann::json;
using Kind = GraphNode::Kind;

GraphNode kernel(const std::string& name) { return {Kind::Kernel, name, 0}; }
GraphNode copy(int64_t bytes) { return {Kind::Copy, "", bytes}; }
GraphNode fill(int64_t bytes) { return {Kind::Fill, "", bytes}; }

TEST(GraphCensus, ALinearStepIsOneChainOfAllItsWork) {
  // gather, a staging copy, conv, a workspace fill, conv backward: one stream, one chain.
  const std::vector<GraphNode> nodes = {kernel("gather_k"), copy(40), kernel("conv"), fill(1 << 20),
                                        kernel("conv")};
  const json c = graph_census(nodes, {{0, 1}, {1, 2}, {2, 3}, {3, 4}});
  EXPECT_EQ(c["nodes"], 5);
  EXPECT_EQ(c["edges"], 4);
  EXPECT_EQ(c["kernels"], 3);
  EXPECT_EQ(c["copies"], 1);
  EXPECT_EQ(c["copy_bytes"], 40);
  EXPECT_EQ(c["fills"], 1);
  EXPECT_EQ(c["fill_bytes"], 1 << 20);
  EXPECT_EQ(c["longest_chain"],
            (json{{"work_nodes", 5}, {"kernels", 3}, {"copies", 1}, {"fills", 1}}));
  EXPECT_EQ(c["kernels_by_name"], (json{{"conv", 2}, {"gather_k", 1}}));
  EXPECT_FALSE(c.contains("other_kinds"));
  EXPECT_FALSE(c.contains("bytes_unread"));
  // A copy whose bytes the backend could not read is counted, its bytes left out and said.
  const json unread = graph_census({copy(40), copy(-1), fill(-1)}, {});
  EXPECT_EQ(unread["copies"], 2);
  EXPECT_EQ(unread["copy_bytes"], 40);
  EXPECT_EQ(unread["fill_bytes"], 0);
  EXPECT_EQ(unread["bytes_unread"], 2);
}

TEST(GraphCensus, TheLongestChainIsTheOneWithTheMostWorkNotTheMostNodes) {
  // A fork (event record) into two branches that join (event wait):
  //   0 record -> 1 k -> 2 k -> 3 k -> 7 wait -> 8 k
  //   0 record -> 4 empty -> 5 empty -> 6 copy -> 7
  // The first branch has three work nodes, the second one work node among three nodes.
  std::vector<GraphNode> nodes = {{Kind::EventRecord, "", 0},
                                  kernel("a"),
                                  kernel("b"),
                                  kernel("c"),
                                  {Kind::Empty, "", 0},
                                  {Kind::Empty, "", 0},
                                  copy(8),
                                  {Kind::EventWait, "", 0},
                                  kernel("d")};
  const std::vector<GraphEdge> edges = {{0, 1}, {1, 2}, {2, 3}, {3, 7}, {0, 4},
                                        {4, 5}, {5, 6}, {6, 7}, {7, 8}};
  json c = graph_census(nodes, edges);
  EXPECT_EQ(c["longest_chain"],
            (json{{"work_nodes", 4}, {"kernels", 4}, {"copies", 0}, {"fills", 0}}));
  EXPECT_EQ(c["event_records"], 1);
  EXPECT_EQ(c["event_waits"], 1);
  EXPECT_EQ(c["empty"], 2);
  // Two independent nodes side by side make no chain longer than one.
  c = graph_census({kernel("x"), kernel("y")}, {});
  EXPECT_EQ(c["longest_chain"]["work_nodes"], 1);
  // The order in which the edges are listed does not change the chain.
  std::vector<GraphEdge> reversed(edges.rbegin(), edges.rend());
  EXPECT_EQ(graph_census(nodes, reversed)["longest_chain"]["work_nodes"], 4);
  // Nor which branch the longest lies on: made the copy branch's, with five more copies.
  for (int i = 0; i < 5; ++i) nodes.push_back(copy(4));  // nodes 9..13, between 6 and 7
  std::vector<GraphEdge> longer = {{0, 1}, {1, 2},  {2, 3},   {3, 7},   {0, 4},   {4, 5},  {5, 6},
                                   {6, 9}, {9, 10}, {10, 11}, {11, 12}, {12, 13}, {13, 7}, {7, 8}};
  EXPECT_EQ(graph_census(nodes, longer)["longest_chain"],
            (json{{"work_nodes", 7}, {"kernels", 1}, {"copies", 6}, {"fills", 0}}));
}

TEST(GraphCensus, UnnamedKernelsAndOtherKindsAreCountedByName) {
  const std::string long_name(200, 'k');
  const json c = graph_census({kernel(""),
                               kernel(long_name),
                               {Kind::Host, "", 0},
                               {Kind::Other, "cudaGraphNodeType 13", 0}},
                              {});
  EXPECT_EQ(c["kernels_by_name"], (json{{"(unnamed)", 1}, {std::string(120, 'k'), 1}}));
  EXPECT_EQ(c["host"], 1);
  EXPECT_EQ(c["other"], 1);
  EXPECT_EQ(c["other_kinds"], (json{{"cudaGraphNodeType 13", 1}}));
  EXPECT_EQ(c["longest_chain"]["work_nodes"], 1);
  // An empty graph: nothing, no chain.
  const json none = graph_census({}, {});
  EXPECT_EQ(none["nodes"], 0);
  EXPECT_EQ(none["longest_chain"]["work_nodes"], 0);
}

TEST(GraphCensus, AnEdgeToNoNodeOrACycleIsAnError) {
  try {
    graph_census({kernel("a")}, {{0, 3}});
    FAIL() << "no error for an edge to node 3 of 1";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "graph census: an edge from node 0 to node 3 in a graph of 1 nodes");
  }
  try {
    graph_census({kernel("a"), kernel("b"), kernel("c")}, {{0, 1}, {1, 2}, {2, 1}});
    FAIL() << "no error for a cycle";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "graph census: the edges form a cycle (2 of 3 nodes on it or after it)");
  }
}

}  // namespace
}  // namespace paralab
