// allreduce_bench on CPU devices that record and replay their work as a CUDA device captures it
// (tests/recording_device.h), so that --graphs, which captures each collective once as one graph
// over the group and times its launches, runs without a GPU. The ctests around it
// (tests/CMakeLists.txt) check that every row is a graph, that the replay is checked for the
// exact sum before timing, and that a graph missing the transport's ordering is caught there.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "experiments/allreduce_bench.h"
#include "tests/recording_device.h"

namespace {

// The CPU devices the recording ones forward to; at namespace scope, so that they outlive the
// benchmark's groups (function-local statics, destroyed first).
std::vector<std::unique_ptr<paralab::Device>> g_inner;

// "skip-ready-wait" as the first argument: the devices record no waits, so that a replay runs
// every device's recorded work without the edges that order a receive after its sender's work
// (the last rank first): what a graph missing them would compute. The check of the replay
// before timing must refuse it. "fail-group-end": every group capture's end fails on every rank
// (CaptureFailed), as on a GPU that cannot make the graph.

}  // namespace

int main(int argc, char** argv) {
  try {
    bool skip_waits = false, fail_end = false;
    if (argc > 1 && (std::strcmp(argv[1], "skip-ready-wait") == 0 ||
                     std::strcmp(argv[1], "fail-group-end") == 0)) {
      (argv[1][0] == 's' ? skip_waits : fail_end) = true;
      argv[1] = argv[0];
      ++argv;
      --argc;
    }
    return paralab::allreduce_bench_main(
        argc, argv, {}, [skip_waits, fail_end](std::unique_ptr<paralab::Device> d) {
          g_inner.push_back(std::move(d));
          auto rec = std::make_unique<paralab::testing::RecordingDevice>(*g_inner.back());
          rec->ignore_waits = skip_waits;
          if (fail_end) rec->fail_group_end = "cudaGraphInstantiate: out of memory (simulated)";
          return std::unique_ptr<paralab::Device>(std::move(rec));
        });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "recording_allreduce_bench: %s\n", e.what());
    return 1;
  }
}
