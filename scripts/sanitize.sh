#!/usr/bin/env bash
# The test suite under sanitizers, CPU backend only, without MPI (CUDA's runtime is not
# instrumented; Open MPI's start-up allocations are not leak-clean and its shared-memory
# transport is invisible to TSan):
#   1. AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, clang; the build holds
#      scripts/fuzz.sh's libFuzzer targets too, so CI compiles once for both: their coverage
#      instrumentation is limited to the code they parse with, tests/fuzz/coverage-allowlist.txt,
#      and the suites run at plain ASan speed): every test that runs C++,
#      but the report's and the model session's smoke tests (Python chains whose bench_runner
#      and allreduce_bench runs cli_test, fault_test and the strategy suites cover: 84 s under
#      ASan on 2 cores) and gpu_check_script (gpu-check.sh's plan, budget and verdicts, whose
#      bench_runner calls fail at once without a GPU: 67 s under ASan, 2026-12-04); each
#      strategy's comparison with one device for 3 steps, as under TSan (every step runs the same
#      code, so a bad access shows in the first; the full counts run in test.sh's build);
#   2. ThreadSanitizer (build-tsan/): the multi-threaded tests (transport, collectives, every
#      strategy; each strategy's comparison with one device for 3 steps, PARALAB_TEST_MAX_STEPS in
#      tests/strategy_harness.h: the suite 228 -> 121 s on 2 cores, 2026-12-04), with one OpenMP
#      thread per device, and the own CUDA kernels under the CPU emulator (each CUDA thread a
#      fiber whose switches order nothing but the kernel's barriers: a missing __syncthreads()
#      is a race TSan reports), all but the exact LeNet-sized stages (35 s there, run under ASan).
# Any report fails its test. Suppressions, each with why it is a false positive, are in
# tests/sanitizers/. Part of .ci/run; on 2 cores from scratch, 13.1 minutes at d2f7791 (ASan
# build 4.4 with the fuzz targets, its tests 2.7; TSan build 2.6, its tests 3.2) on an AMD EPYC
# VM, 2026-12-07; more runs in .ci/timings.md. In these builds some suites run a subset of their
# sweeps (testing::kSanitizerBuild in tests/test_util.h).
#   scripts/sanitize.sh [--build-only] [asan|tsan]...   (default: both)
#   --build-only   configure and build (BUILD_TARGETS="..." limits what), run nothing
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
cd "$(dirname "$0")/.."
build_only=0 kinds=()
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    asan | tsan) kinds+=("$arg") ;;
    *) echo "sanitize.sh: unknown argument '$arg' (known: --build-only, asan, tsan)" >&2; exit 2 ;;
  esac
done
((${#kinds[@]})) || kinds=(asan tsan)
deps=()  # the ASan build is clang's
[[ " ${kinds[*]} " != *" asan "* ]] || deps=(--with-clang)
scripts/install-deps.sh "${deps[@]}"
supp=$PWD/tests/sanitizers
# -O1, as the sanitizers' documentation advises, and line tables only (-g1: what a report's stack
# needs): on 2 cores that halves the compile time of -O2 -g (experiments/descriptor.cpp under
# ASan: 95 s -> 49 s, measured 2026-12-01 on an AMD EPYC VM).
flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG")
for kind in "${kinds[@]}"; do
  case "$kind" in
    asan)
      # clang compiles this build in 246 s against GCC's 335 on 2 cores, and its suites run as
      # fast (160 s against 163; an AMD EPYC VM, 2026-12-07).
      CC=clang CXX=clang++ BUILD_DIR=build-asan scripts/build.sh -DPARALAB_WITH_CUDA=OFF \
        -DPARALAB_WITH_MPI=OFF -DPARALAB_SANITIZE=address,undefined -DPARALAB_FUZZ=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo "${flags[@]}"
      ((build_only)) && continue
      echo "sanitize.sh: every test under ASan + UBSan"
      (cd build-asan &&
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
        LSAN_OPTIONS=suppressions=$supp/lsan.supp \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PARALAB_TEST_MAX_STEPS=3 \
        ctest --output-on-failure --timeout 900 -j "$(nproc)" \
          -E '^(plotting_test|model_test|baselines_test|report_short|model_session_short|gpu_check_script|gpu_check_script_verdicts|committed_results_schema|schema_drafts|install_deps_script|fresh_machine_check_arguments|gpu_results_script|scripts_help)$')
      ;;
    tsan)
      # Only the binaries that hold the suites run below (the rest of the build is not used).
      BUILD_TARGETS="test_collectives test_data_parallel test_layer_split test_channel_split test_fused_kernels test_model_kernels" \
      BUILD_DIR=build-tsan scripts/build.sh -DPARALAB_WITH_CUDA=OFF -DPARALAB_WITH_MPI=OFF \
        -DPARALAB_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo "${flags[@]}"
      ((build_only)) && continue
      echo "sanitize.sh: the multi-threaded tests under TSan"
      # clear_shadow_mmap_threshold: TSan zeroes the shadow of a freed block below 4 MiB in place
      # instead of mapping it afresh, which the next block there faulted in page by page (half of
      # a strategy test's time was the kernel's; the suite 228 -> 156 s on 2 cores, 2026-12-05).
      # Thread stacks (8 MiB) stay above it: zeroing theirs in place took WholeSteps.* 17 -> 288 s.
      (cd build-tsan &&
        TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:clear_shadow_mmap_threshold=4194304 \
        OMP_NUM_THREADS=1 PARALAB_TEST_MAX_STEPS=3 \
        ctest --output-on-failure --timeout 900 -j "$(nproc)" --no-tests=error \
          -R '^(Transport|RankGroup|Allreduce|ReduceScatterAllgather|WholeSteps|DataParallel|LayerSplit|Pipeline|ChannelSplit|FusedKernels|ModelKernels|Emulator)\.' \
          -E '^FusedKernels\.LeNetStagesAtItsTrainingBatchAreExact$')
      ;;
    *) echo "sanitize.sh: unknown kind '$kind' (known: asan, tsan)" >&2; exit 2 ;;
  esac
done
