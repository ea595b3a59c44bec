// What a captured step holds and what it did, on data written out by hand: the census of its
// graph (core/graph_census.h: the counts by kind, the bytes of copies and fills, the longest
// chain of work, which a GPU's graph of the same shape gives through core/cuda's
// graph_census_of), and the summary of a trace of its launches (core/step_trace_summary.h: what
// core/cuda/step_trace.h records on a GPU).
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/graph_census.h"
#include "core/step_trace_summary.h"

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

TraceRecord run(TraceRecord::Kind kind, const std::string& name, uint64_t start, uint64_t end,
                int64_t bytes = 0) {
  return {kind, name, start, end, bytes};
}

TEST(StepTraceSummary, SpanBusyIdleAndGapsOfTwoLaunches) {
  using K = TraceRecord::Kind;
  // Two launches of a step: gather 0-10 us, conv 12-40 with a fill 20-25 beside it, sgd 41-45;
  // then the host's work between launches (45-60), and the same again from 60 us. Given out of
  // order: the summary sorts them.
  std::vector<TraceRecord> r;
  for (uint64_t at : {60000u, 0u}) {
    r.push_back(run(K::Kernel, "sgd_at_k", at + 41000, at + 45000));
    r.push_back(run(K::Kernel, "gather_k", at, at + 10000));
    r.push_back(run(K::Kernel, "conv", at + 12000, at + 40000));
    r.push_back(run(K::Fill, "", at + 20000, at + 25000, 4096));
  }
  const json s = trace_summary(r, 2);
  EXPECT_EQ(s["records"], 8);
  EXPECT_DOUBLE_EQ(s["span_us"].get<double>(), 105.0);
  EXPECT_DOUBLE_EQ(s["span_per_launch_us"].get<double>(), 52.5);
  EXPECT_DOUBLE_EQ(s["busy_per_launch_us"].get<double>(), 42.0);    // 10 + 28 + 4
  EXPECT_DOUBLE_EQ(s["idle_per_launch_us"].get<double>(), 10.5);    // (2 + 1) x 2 + 15, over 2
  EXPECT_DOUBLE_EQ(s["overlap_per_launch_us"].get<double>(), 5.0);  // the fill under conv
  ASSERT_EQ(s["gaps"].size(), 5u);
  EXPECT_EQ(s["gaps"][0],
            (json{{"us", 15.0}, {"after", "kernel sgd_at_k"}, {"before", "kernel gather_k"}}));
  EXPECT_EQ(s["gaps"][1],
            (json{{"us", 2.0}, {"after", "kernel gather_k"}, {"before", "kernel conv"}}));
  ASSERT_EQ(s["by_name"].size(), 4u);
  EXPECT_EQ(
      s["by_name"][0],
      (json{{"name", "conv"}, {"per_launch", 1.0}, {"us_per_launch", 28.0}, {"mean_us", 28.0}}));
  EXPECT_EQ(s["by_name"][3]["name"], "sgd_at_k");
  EXPECT_EQ(s["fills"],
            (json{{"per_launch", 1.0}, {"bytes_per_launch", 4096.0}, {"us_per_launch", 5.0}}));
  EXPECT_EQ(s["copies"],
            (json{{"per_launch", 0.0}, {"bytes_per_launch", 0.0}, {"us_per_launch", 0.0}}));
}

// The launches a trace covers, queued from several threads (a step graph per rank): the trace
// ends when its last traced launch has been queued, whichever thread queues it, not when another
// thread begins the window's last launch while an earlier traced one is still being queued.
TEST(StepTraceWindow, EndsOnceEveryTracedLaunchIsQueued) {
  TraceWindow w(2, 2);  // launches 3 and 4
  const int64_t one = w.begin(), two = w.begin();
  EXPECT_FALSE(w.first(one) || w.first(two) || w.traced(one) || w.traced(two));
  EXPECT_FALSE(w.queued(one));
  EXPECT_FALSE(w.queued(two));
  const int64_t a = w.begin();  // thread A: the first traced launch, which starts the trace
  const int64_t b = w.begin();  // thread B: the last traced launch
  const int64_t c = w.begin();  // thread C: after the window
  EXPECT_TRUE(w.first(a));
  EXPECT_FALSE(w.first(b));
  EXPECT_TRUE(w.traced(a) && w.traced(b));
  EXPECT_FALSE(w.traced(c));
  EXPECT_FALSE(w.queued(c));
  EXPECT_FALSE(w.queued(b)) << "ended while launch " << a << " was still being queued";
  EXPECT_TRUE(w.queued(a));
}

TEST(StepTraceSummary, NothingTracedAndBadRecordsAreSaid) {
  EXPECT_EQ(trace_summary({}, 3), (json{{"records", 0}, {"launches", 3}}));
  try {
    trace_summary({}, 0);
    FAIL() << "no error for 0 launches";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "trace summary: 0 launches traced (none?)");
  }
  try {
    trace_summary({run(TraceRecord::Kind::Copy, "", 9, 5, 64)}, 1);
    FAIL() << "no error for a record that ends before it starts";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "trace summary: copy 64 B ends (5 ns) before it starts (9 ns)");
  }
}

}  // namespace
}  // namespace paralab
