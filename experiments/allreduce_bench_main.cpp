// allreduce_bench: see experiments/allreduce_bench.cpp for what it measures and how.
#include <cstdio>
#include <exception>

#include "experiments/allreduce_bench.h"

int main(int argc, char** argv) {
  try {
    return paralab::allreduce_bench_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
