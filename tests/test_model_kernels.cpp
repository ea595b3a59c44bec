// ParaLab's own CUDA kernels for the model ops (pooling, dropout, resize) and for every step
// (ReLU, bias, softmax cross-entropy, SGD, sums, the minibatch gather) run on the CPU by the
// emulator (tests/cuda_emulator.h) against the double-precision reference, so that their index
// maps, window ranges, tie rules, masks and reduction order are tested on machines without a GPU;
// on a GPU, test_model_ops and test_backends run the same kernels through the "cuda" backend.
// The grid-stride kernels run with two grids (one block, several blocks) that must agree to the
// bit; softmax cross-entropy runs as its launcher runs it, one block of own::kThreads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/group_move_spec.h"
#include "tests/reference/reference.h"
#if !PARALAB_HAVE_CUDA
// The transport over fake virtual devices (not in a CUDA build: the collectives link the CUDA
// backend there, whose kernels' host stubs share the emulated kernels' names).
#include "strategies/spmd_group.h"
#include "tests/fake_gpu.h"
#endif
#include "tests/test_util.h"
// The emulator, then the kernels it runs.
#include "tests/cuda_emulator.h"
// clang-format off
#include "core/cuda/dropout_kernels.cuh"
#include "core/cuda/kernels.cuh"
#include "core/cuda/pool2d_kernels.cuh"
#include "core/cuda/resize_kernels.cuh"
// clang-format on

namespace paralab {
namespace {

using paralab::testing::all_close;
using paralab::testing::emulate;
using paralab::testing::to_double;
using paralab::testing::to_float;

// The grids each kernel runs with: one block of 64 threads striding over everything, and 5
// blocks of 32 (a count that divides none of the sizes below).
const dim3 kGrids[][2] = {{dim3(1), dim3(64)}, {dim3(5), dim3(32)}};

// Tolerances as in test_model_ops.cpp: selections exact; a few float roundings 1e-6 of the
// tensor's largest value; bilinear at sizes that are not powers of two 1e-5 (its coordinate is
// float).
double max_abs(const ref::Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

ref::Vec random_vec(std::size_t n, uint64_t seed) {
  ref::Rng rng(seed);
  ref::Vec v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

ref::Vec integer_vec(std::size_t n, uint64_t seed, int levels) {
  ref::Rng rng(seed);
  ref::Vec v(n);
  for (auto& x : v) x = static_cast<double>(rng.next_u64() % static_cast<uint64_t>(levels));
  return v;
}

void check_pool(const ref::PoolGeom& r, const ref::Vec& x, uint64_t seed) {
  const cuda::PoolGeometry g{
      int64_t{r.N} * r.C, r.H, r.W, r.OH(), r.OW(), r.kh, r.kw, r.sh, r.sw, r.ph, r.pw};
  const std::string what = std::string(r.max ? "max" : "avg") + " " + std::to_string(r.H) + "x" +
                           std::to_string(r.W) + " window " + std::to_string(r.kh) + "x" +
                           std::to_string(r.kw) + " stride " + std::to_string(r.sh) + "x" +
                           std::to_string(r.sw) + " pad " + std::to_string(r.ph) + "x" +
                           std::to_string(r.pw);
  const auto xf = to_float(x);
  const auto dyf = to_float(random_vec(std::size_t(g.planes * g.oh * g.ow), seed));
  std::vector<std::vector<float>> ys, dxs;
  for (const auto& [grid, block] : kGrids) {
    std::vector<float> y(dyf.size()), dx(xf.size(), 7.0f);
    std::vector<int32_t> argmax(dyf.size(), -7);
    if (r.max) {
      emulate(grid, block, cuda::pool::max_forward, xf.data(), y.data(), argmax.data(), g);
      emulate(grid, block, cuda::pool::max_backward, dyf.data(), argmax.data(), dx.data(), g);
    } else {
      emulate(grid, block, cuda::pool::avg_forward, xf.data(), y.data(), g);
      emulate(grid, block, cuda::pool::avg_backward, dyf.data(), dx.data(), g);
    }
    ys.push_back(y);
    dxs.push_back(dx);
  }
  const ref::Vec ry = ref::pool2d_forward(x, r), rdx = ref::pool2d_backward(x, to_double(dyf), r);
  const double y_tol = r.max ? 0.0 : 1e-6;
  EXPECT_TRUE(all_close(ys[0], ry, y_tol * max_abs(ry), y_tol)) << "y " << what;
  EXPECT_TRUE(all_close(dxs[0], rdx, 1e-6 * max_abs(rdx), 1e-6)) << "dx " << what;
  EXPECT_TRUE(bits_equal(ys[0], ys[1]) && bits_equal(dxs[0], dxs[1])) << "grids differ: " << what;
}

TEST(ModelKernels, PoolingMatchesReference) {
  const std::vector<ref::PoolGeom> cases = {
      {.N = 2, .C = 3, .H = 27, .W = 27, .kh = 3, .kw = 3, .sh = 2, .sw = 2},  // AlexNet 3/2
      {.N = 1, .C = 4, .H = 14, .W = 13, .kh = 3, .kw = 3, .sh = 2, .sw = 2},  // floor drops
      {.N = 2, .C = 2, .H = 9, .W = 7, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .max = false},
      {.N = 1, .C = 3, .H = 7, .W = 7, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1},
      {.N = 1,
       .C = 3,
       .H = 7,
       .W = 8,
       .kh = 3,
       .kw = 3,
       .sh = 2,
       .sw = 2,
       .ph = 1,
       .pw = 1,
       .max = false},
      {.N = 1, .C = 2, .H = 9, .W = 8, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 0},
      {.N = 1,
       .C = 2,
       .H = 9,
       .W = 8,
       .kh = 2,
       .kw = 4,
       .sh = 1,
       .sw = 3,
       .ph = 0,
       .pw = 2,
       .max = false},
  };
  uint64_t seed = 1;
  for (const auto& r : cases) {
    check_pool(r, random_vec(std::size_t(r.N) * r.C * r.H * r.W, seed), seed + 1);
    seed += 2;
  }
}

TEST(ModelKernels, MaxPoolTiesGoToTheFirstMaximum) {
  for (int levels : {3, 1}) {
    const ref::PoolGeom r{.N = 1, .C = 3, .H = 13, .W = 11, .kh = 3, .kw = 3, .sh = 2, .sw = 2};
    check_pool(r, integer_vec(std::size_t(3) * 13 * 11, 5, levels), 6);
    const ref::PoolGeom padded{
        .N = 1, .C = 2, .H = 6, .W = 5, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1};
    check_pool(padded, integer_vec(std::size_t(2) * 6 * 5, 7, levels), 8);
  }
}

TEST(ModelKernels, DropoutMaskAndScaleAreTheCpuBackendsBits) {
  // The kernel against the CPU backend's arithmetic (core/cpu/dropout.cpp): the same hash, the
  // same float scale, so the same bits; and against the reference's mask and values.
  const int64_t n = 5, f = 37, e0 = 11, f0 = 300;
  const uint64_t seed = 77;
  const float p = 0.4f, scale = 1.0f / (1.0f - p);
  const auto x = random_vec(std::size_t(n * f), 9);
  const auto xf = to_float(x);
  std::vector<float> want(xf.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j)
      want[std::size_t(i * f + j)] =
          dropout_uniform(seed, e0 + i, f0 + j) >= p ? xf[std::size_t(i * f + j)] * scale : 0.0f;
  for (const auto& [grid, block] : kGrids) {
    std::vector<float> y(xf.size());
    emulate(grid, block, cuda::dropout::apply, xf.data(), y.data(), n, f, p, scale, seed, e0, f0);
    EXPECT_TRUE(bits_equal(y, want)) << "grid " << grid.x << "x" << block.x;
    const ref::Vec r = ref::dropout_forward(x, int(n), p, seed, e0, f0);
    EXPECT_TRUE(all_close(y, r, 0.0, 1e-6));
  }
}

TEST(ModelKernels, ResizeMatchesReference) {
  struct Case {
    int h, w, oh, ow;
    bool integers;  // 8-bit values: exact at power-of-two factors
  };
  for (const Case c : {Case{28, 28, 224, 224, true}, Case{13, 17, 29, 23, false},
                       Case{20, 9, 7, 30, false}, Case{1, 3, 4, 1, false}}) {
    const auto x = c.integers ? integer_vec(std::size_t(2) * c.h * c.w, 11, 256)
                              : random_vec(std::size_t(2) * c.h * c.w, 12);
    const auto xf = to_float(x);
    const std::string what = std::to_string(c.h) + "x" + std::to_string(c.w) + " -> " +
                             std::to_string(c.oh) + "x" + std::to_string(c.ow);
    for (bool bilinear : {false, true}) {
      std::vector<std::vector<float>> ys;
      for (const auto& [grid, block] : kGrids) {
        std::vector<float> y(std::size_t(2) * c.oh * c.ow);
        emulate(grid, block, cuda::resize::images, xf.data(), y.data(), int64_t{2}, int64_t{c.h},
                int64_t{c.w}, int64_t{c.oh}, int64_t{c.ow}, bilinear);
        ys.push_back(y);
      }
      const ref::Vec r = bilinear ? ref::resize_bilinear(x, 2, 1, c.h, c.w, c.oh, c.ow)
                                  : ref::resize_nearest(x, 2, 1, c.h, c.w, c.oh, c.ow);
      const double atol = (bilinear && !c.integers) ? 1e-5 * max_abs(r) : 0.0;
      EXPECT_TRUE(all_close(ys[0], r, atol, bilinear && !c.integers ? 1e-6 : 0.0))
          << (bilinear ? "bilinear " : "nearest ") << what;
      EXPECT_TRUE(bits_equal(ys[0], ys[1])) << "grids differ: " << what;
    }
  }
}

// Softmax cross-entropy over rows that leave threads idle (1, 7), fill the block (256) and give
// threads several rows (300, 1000): the summed loss and the correct count against the reference,
// the gradient row by row, and the same stats bits with and without the gradient.
void check_softmax_xent(int rows, int classes, const ref::Vec& logits, uint64_t seed) {
  ref::Rng rng(seed);
  std::vector<int> labels(static_cast<std::size_t>(rows));
  for (int& l : labels) l = static_cast<int>(rng.next_u64() % static_cast<uint64_t>(classes));
  const std::vector<int32_t> labels32(labels.begin(), labels.end());
  const auto zf = to_float(logits);
  ref::Vec rdz;
  int rcorrect = 0;
  const double rloss = ref::softmax_xent(to_double(zf), labels, rows, classes, rdz, rcorrect);
  std::vector<float> dz(zf.size(), 7.0f), stats(2, -1.0f), stats_only(2, -1.0f);
  const dim3 one(1), block(cuda::own::kThreads);
  emulate(one, block, cuda::own::softmax_xent_k, zf.data(), labels32.data(), dz.data(),
          stats.data(), int64_t{rows}, int64_t{classes});
  emulate(one, block, cuda::own::softmax_xent_k, zf.data(), labels32.data(),
          static_cast<float*>(nullptr), stats_only.data(), int64_t{rows}, int64_t{classes});
  const std::string what = std::to_string(rows) + " rows of " + std::to_string(classes);
  // Each row's loss is a few float roundings (~1e-7 of it), summed in double.
  EXPECT_NEAR(stats[0], rloss, 1e-5 * std::max(1.0, std::abs(rloss))) << what;
  EXPECT_EQ(stats[1], static_cast<float>(rcorrect)) << what;
  EXPECT_TRUE(all_close(dz, rdz, 1e-6, 1e-5)) << "dlogits, " << what;
  EXPECT_TRUE(bits_equal(stats, stats_only)) << "stats without the gradient differ: " << what;
}

TEST(ModelKernels, SoftmaxXentMatchesReference) {
  uint64_t seed = 11;
  for (const auto& [rows, classes] :
       std::vector<std::pair<int, int>>{{1, 10}, {7, 10}, {256, 10}, {300, 10}, {1000, 3}}) {
    ref::Vec logits = random_vec(std::size_t(rows) * classes, seed);
    for (double& z : logits) z *= 4.0;  // confident rows and wrong ones both
    check_softmax_xent(rows, classes, logits, seed + 1);
    seed += 2;
  }
}

TEST(ModelKernels, SoftmaxXentTiesGoToTheFirstMaximum) {
  // Logits of 2 levels over 10 classes: most rows tie; the count must follow the reference's rule
  // (the lowest index among the maxima), and so must the shift of every row's exponentials.
  for (int levels : {2, 1}) check_softmax_xent(300, 10, integer_vec(3000, 21, levels), 22);
}

// Emulates the launcher (kernels.cu: group_moves) over `moves`; returns its launches.
int emulate_group_moves(const std::vector<cuda::GroupMoveSpec>& moves) {
  const std::vector<int> starts = cuda::own::group_launches(moves.data(), int(moves.size()));
  for (std::size_t l = 0; l < starts.size(); ++l) {
    const int end = l + 1 < starts.size() ? starts[l + 1] : int(moves.size());
    cuda::own::GroupMovesArgs args;
    const int64_t blocks = cuda::own::group_moves_args(args, moves.data(), starts[l], end);
    if (blocks)
      emulate(dim3(static_cast<unsigned>(blocks)), dim3(cuda::own::kGroupMovesThreads),
              cuda::own::group_moves_k, args);
  }
  return static_cast<int>(starts.size());
}

// The moves one after another, as receiving the messages one by one does.
void apply_in_order(const std::vector<cuda::GroupMoveSpec>& moves) {
  for (const cuda::GroupMoveSpec& m : moves)
    for (int64_t i = 0; i < m.floats; ++i) {
      float v = m.sources == 0 ? m.src0[i] : m.dst[i] + m.src0[i];
      if (m.sources == 2) v = v + m.src1[i];
      m.dst[i] = v;
    }
}

// The same moves on two copies of the buffers, `a` and `b`: their specs for a's, then b's.
struct TwinBuffers {
  TwinBuffers(int k, int64_t n, uint64_t seed) {
    for (int r = 0; r < k; ++r) a.push_back(to_float(random_vec(std::size_t(n), seed + r)));
    b = a;
  }
  // A spec on a's buffers moved onto b's (same ranks and offsets).
  cuda::GroupMoveSpec on_b(const cuda::GroupMoveSpec& m) const {
    // (Inside a buffer first: one buffer may end where the next begins.)
    auto move = [&](const float* p) -> float* {
      if (!p) return nullptr;
      for (int end = 0; end < 2; ++end)
        for (std::size_t r = 0; r < a.size(); ++r)
          if (p >= a[r].data() && p < a[r].data() + a[r].size() + end)
            return const_cast<float*>(b[r].data()) + (p - a[r].data());
      ADD_FAILURE() << "a pointer outside the buffers";
      return nullptr;
    };
    return {move(m.dst), move(m.src0), move(m.src1), m.sources, m.floats, m.phase};
  }
  std::vector<std::vector<float>> a, b;
};

// A ring allreduce's moves on k buffers of n floats (segments as equal_segments cuts them): k - 1
// reduce-scatter steps of adds, then k - 1 all-gather steps of copies, each step a phase.
std::vector<cuda::GroupMoveSpec> ring_moves(std::vector<std::vector<float>>& bufs, int64_t n) {
  const int k = static_cast<int>(bufs.size());
  std::vector<int64_t> bound(std::size_t(k) + 1, 0);
  for (int i = 0; i < k; ++i) bound[i + 1] = bound[i] + n / k + (i < n % k ? 1 : 0);
  auto mod = [k](int x) { return ((x % k) + k) % k; };
  std::vector<cuda::GroupMoveSpec> moves;
  for (int phase = 0; phase < 2 * (k - 1); ++phase) {
    const bool add = phase < k - 1;
    const int s = add ? phase : phase - (k - 1);
    for (int r = 0; r < k; ++r) {
      const int seg = add ? mod(r - s - 2) : mod(r - s - 1), prev = mod(r - 1);
      moves.push_back({bufs[r].data() + bound[seg], bufs[prev].data() + bound[seg], nullptr,
                       add ? 1 : 0, bound[seg + 1] - bound[seg], phase});
    }
  }
  return moves;
}

// A collective's steps in one launch: each block carries its floats through every step (a ring's
// segment lies at the same offset in every rank), so one kernel gives the bits of moving the
// steps one by one, for sizes no tile divides, at every tile the launcher picks (32 to 2,048
// floats: 40 floats to 5 million on 2 ranks), on 2, 3 and 8 ranks (8: 112 moves, one launch's
// worth), and on 9, whose moves take two launches.
TEST(ModelKernels, GroupMovesRunACollectivesStepsInOneLaunch) {
  for (int k : {2, 3, 8, 9})
    for (int64_t n : {int64_t{40}, int64_t{1001}, int64_t{129068}, int64_t{5000011}}) {
      if (k > 2 && n > 200000) continue;  // the largest tile once is enough (emulator time)
      if (k == 9 && n > 2000) continue;
      TwinBuffers bufs(k, n, 300 + uint64_t(k));
      const auto moves = ring_moves(bufs.a, n), same = ring_moves(bufs.b, n);
      // 9 ranks: 144 moves, two launches, the second from the middle of a step.
      EXPECT_EQ(emulate_group_moves(moves), k == 9 ? 2 : 1) << "k=" << k << " n=" << n;
      apply_in_order(same);
      for (int r = 0; r < k; ++r) {
        ASSERT_TRUE(bits_equal(bufs.a[r], bufs.b[r])) << "k=" << k << " n=" << n << " rank " << r;
        ASSERT_TRUE(bits_equal(bufs.a[r], bufs.a[0])) << "k=" << k << " n=" << n << " rank " << r;
      }
    }
}

// One step's moves: copies copy, adds add their one or two sources in order; more moves than one
// launch holds go in several.
TEST(ModelKernels, GroupMovesDoEveryRanksMoveOfAStep) {
  const int64_t sizes[] = {5000, 3001, 2049, 1, 257, 40};
  const int kMoves = cuda::own::kMaxGroupMoves + 8;
  TwinBuffers bufs(3 * kMoves, 5000, 40);
  std::vector<cuda::GroupMoveSpec> specs, same;
  for (int m = 0; m < kMoves; ++m) {
    const int sources = m % 3;  // copy, one add, two adds
    specs.push_back({bufs.a[3 * m].data(), bufs.a[3 * m + 1].data(),
                     sources == 2 ? bufs.a[3 * m + 2].data() : nullptr, sources, sizes[m % 6], 0});
    same.push_back(bufs.on_b(specs.back()));
  }
  EXPECT_EQ(emulate_group_moves(specs), 2);
  apply_in_order(same);
  for (std::size_t i = 0; i < bufs.a.size(); ++i)
    EXPECT_TRUE(bits_equal(bufs.a[i], bufs.b[i])) << "buffer " << i;
}

// Where a later step reads what an earlier one wrote from another start (a float would change
// blocks between the steps), the launcher splits there, and only there; the bits stay those of
// moving the steps one by one.
TEST(ModelKernels, GroupMovesSplitWhereAStepReadsAnotherStartOfAnEarlierOnesWrites) {
  const int64_t n = 100000;
  // Twice: the emulator runs every other launch's blocks last to first, and a launch that mixed
  // the steps would go wrong in one of the two orders.
  for (int twice = 0; twice < 2; ++twice) {
    TwinBuffers bufs(3, n, 70);
    auto* x = bufs.a[0].data();
    auto* y = bufs.a[1].data();
    auto* z = bufs.a[2].data();
    const std::vector<cuda::GroupMoveSpec> moves = {
        {y, x, nullptr, 1, n / 2, 0},          // y[0, n/2) += x
        {z, y, nullptr, 1, n / 2, 1},          // z += y from y's start: one block each float
        {x + 1, y + 1, nullptr, 0, n / 4, 2},  // reads y from another start: a new launch
        {z + 7, x + 7, y + 3, 2, 1000, 3},     // reads x from another start: another
    };
    EXPECT_FALSE(cuda::own::group_moves_clash(moves[0], moves[1]));
    EXPECT_TRUE(cuda::own::group_moves_clash(moves[0], moves[2]));
    EXPECT_EQ(cuda::own::group_launches(moves.data(), 4), (std::vector<int>{0, 2, 3}));
    std::vector<cuda::GroupMoveSpec> same;
    for (const auto& m : moves) same.push_back(bufs.on_b(m));
    EXPECT_EQ(emulate_group_moves(moves), 3);
    apply_in_order(same);
    for (int r = 0; r < 3; ++r) EXPECT_TRUE(bits_equal(bufs.a[r], bufs.b[r])) << "buffer " << r;
  }
}

// The group mover of virtual devices as it runs on a GPU: the transport's moves of every
// collective (naive, ring and tree allreduce; ring reduce-scatter and all-gather over uneven
// segments with an empty one), whole collectives and whole steps, made into the kernel's
// arguments (group_move_specs) and run by the emulated kernel in the launches group_launches
// splits them into, each launch's blocks first to last or last to first. Every rank's result
// must be the bits of the per-rank path (each message received and added on its own), for sizes
// no tile divides, several chunk sizes (pieces merged, segments that start apart) and k up to 8.
// Built without the CUDA backend (the sanitizer builds in CI; on a GPU the kernel itself runs).
#if !PARALAB_HAVE_CUDA
TEST(ModelKernels, GroupMovesGiveEveryCollectivesPerRankBits) {
  using testing::collective;
  using testing::Op;
  // Under the sanitizers (every thread of every block a fiber: about 0.4 s a launch under TSan)
  // one k, size and chunk, whole collectives.
  const std::vector<int> ks =
      testing::kSanitizerBuild ? std::vector<int>{3} : std::vector<int>{2, 3, 5, 8};
  for (int k : ks) {
    testing::FakeGpu gpu(k);
    int64_t launches = 0;
    gpu.log.apply = [&](std::span<const GroupMove> moves) {
      launches += emulate_group_moves(cuda::group_move_specs(moves));
    };
    const std::vector<int64_t> sizes = testing::kSanitizerBuild
                                           ? std::vector<int64_t>{301}
                                           : std::vector<int64_t>{1, k - 1, 1001, 5003};
    const std::vector<int64_t> chunks =
        testing::kSanitizerBuild ? std::vector<int64_t>{64} : std::vector<int64_t>{0, 64, 4096};
    const std::vector<StepMoves> modes =
        testing::kSanitizerBuild ? std::vector<StepMoves>{StepMoves::Whole}
                                 : std::vector<StepMoves>{StepMoves::Whole, StepMoves::WholeSteps};
    for (int64_t n : sizes)
      for (int64_t chunk : chunks)
        for (StepMoves moves : modes) {
          const std::string at = " k=" + std::to_string(k) + " n=" + std::to_string(n) +
                                 " chunk=" + std::to_string(chunk) +
                                 (moves == StepMoves::Whole ? " whole" : " steps");
          for (const std::string algorithm : {"naive", "ring", "tree"}) {
            const auto want =
                collective(gpu.devices, StepMoves::PerRank, algorithm, Op::Allreduce, n, chunk, 5);
            const auto got = collective(gpu.devices, moves, algorithm, Op::Allreduce, n, chunk, 5);
            ASSERT_EQ(got, want) << algorithm << at;
          }
          for (Op op : {Op::ReduceScatter, Op::Allgather}) {
            const auto want = collective(gpu.devices, StepMoves::PerRank, "ring", op, n, chunk, 6);
            const auto got = collective(gpu.devices, moves, "ring", op, n, chunk, 6);
            ASSERT_EQ(got, want) << (op == Op::Allgather ? "all-gather" : "reduce-scatter") << at;
          }
        }
    EXPECT_GT(launches, 0) << "k=" << k << ": the kernel never ran";
  }
}
#endif

// set_scalars_k: the first n of its 64 values, each in its place, whatever the block's size
// (its loop strides by the block); nothing past n written.
TEST(ModelKernels, SetScalarsWritesTheFirstNValuesInPlace) {
  cuda::own::ScalarBlock block{};
  for (int i = 0; i < cuda::own::ScalarBlock::kMax; ++i) block.v[i] = 1.0f + static_cast<float>(i);
  for (const int threads : {1, 7, 64}) {
    for (const int n : {1, 10, 64}) {
      std::vector<float> out(65, -1.0f);
      emulate(dim3(1), dim3(static_cast<unsigned>(threads)), cuda::own::set_scalars_k, out.data(),
              block, n);
      for (int i = 0; i < 65; ++i)
        EXPECT_EQ(out[static_cast<std::size_t>(i)], i < n ? 1.0f + static_cast<float>(i) : -1.0f)
            << "threads " << threads << ", n " << n << ", value " << i;
    }
  }
}

// The grid-stride kernels of a step, each from the same inputs with both grids: the same bits,
// and the reference's values (single float operations, exact but for SGD's product, which the
// GPU may fuse into one rounding).
TEST(ModelKernels, ElementwiseUpdateAndGatherKernelsMatchReference) {
  const int rows = 37, cols = 29;  // sizes no grid divides
  const std::size_t n = std::size_t(rows) * cols;
  const auto x = to_float(random_vec(n, 31)), dy = to_float(random_vec(n, 32));
  const auto b = to_float(random_vec(std::size_t(cols), 33));
  const float lr = 0.0625f;
  const std::vector<float> lr_on_device{lr};
  const auto nn = static_cast<int64_t>(n);
  std::vector<std::vector<float>> outs[6];
  for (const auto& [grid, block] : kGrids) {
    std::vector<float> y(n, 7.0f), dx(n, 7.0f), biased = x, p = x, p_at = x, sum = x;
    std::vector<float> in_place = x;
    emulate(grid, block, cuda::own::relu_forward_k, x.data(), y.data(), nn);
    emulate(grid, block, cuda::own::relu_forward_k, in_place.data(), in_place.data(), nn);
    emulate(grid, block, cuda::own::relu_backward_k, y.data(), dy.data(), dx.data(), nn);
    emulate(grid, block, cuda::own::add_bias_rows_k, biased.data(), b.data(), int64_t{rows},
            int64_t{cols});
    emulate(grid, block, cuda::own::sgd_k, p.data(), dy.data(), lr, nn);
    emulate(grid, block, cuda::own::sgd_at_k, p_at.data(), dy.data(), lr_on_device.data(), nn);
    emulate(grid, block, cuda::own::add_k, sum.data(), dy.data(), nn);
    EXPECT_TRUE(bits_equal(y, in_place)) << "ReLU in place differs from ReLU into y";
    int i = 0;
    for (const std::vector<float>* v : {&y, &dx, &biased, &p, &p_at, &sum}) outs[i++].push_back(*v);
  }
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(bits_equal(outs[i][0], outs[i][1])) << "grids differ in output " << i;
  ref::Vec ry(n), rdx(n), rbiased(n), rp(n), rsum(n);
  for (std::size_t i = 0; i < n; ++i) {
    ry[i] = std::max(0.0, double{x[i]});
    rdx[i] = x[i] > 0.0f ? dy[i] : 0.0;
    rbiased[i] = double{x[i]} + b[i % cols];
    rp[i] = double{x[i]} - double{lr} * dy[i];
    rsum[i] = double{x[i]} + dy[i];
  }
  EXPECT_TRUE(all_close(outs[0][0], ry, 0.0, 0.0)) << "ReLU forward";
  EXPECT_TRUE(all_close(outs[1][0], rdx, 0.0, 0.0)) << "ReLU backward";
  EXPECT_TRUE(all_close(outs[2][0], rbiased, 1e-6, 1e-6)) << "bias rows";
  EXPECT_TRUE(all_close(outs[3][0], rp, 1e-6, 1e-6)) << "SGD";
  EXPECT_TRUE(bits_equal(outs[3][0], outs[4][0])) << "SGD with the step read on the device";
  EXPECT_TRUE(all_close(outs[5][0], rsum, 1e-6, 1e-6)) << "add";

  // The minibatch gather: rows picked by index, repeats and the last row included, each label
  // with its row.
  const int images = 9, row = 13;
  const auto pool = to_float(random_vec(std::size_t(images) * row, 34));
  std::vector<int32_t> labels(images);
  for (int i = 0; i < images; ++i) labels[std::size_t(i)] = 100 + i;
  const std::vector<int32_t> idx{8, 0, 3, 3, 7, 1};
  const auto count = static_cast<int64_t>(idx.size());
  std::vector<std::vector<float>> xs;
  for (const auto& [grid, block] : kGrids) {
    std::vector<float> xb(idx.size() * row, 7.0f);
    std::vector<int32_t> yb(idx.size(), -1);
    emulate(grid, block, cuda::own::gather_k, pool.data(), labels.data(), idx.data(), count,
            int64_t{row}, xb.data(), yb.data());
    for (std::size_t r = 0; r < idx.size(); ++r) {
      EXPECT_EQ(yb[r], 100 + idx[r]) << "label of row " << r;
      EXPECT_EQ(std::memcmp(xb.data() + r * row, pool.data() + std::size_t(idx[r]) * row,
                            row * sizeof(float)),
                0)
          << "row " << r;
    }
    xs.push_back(xb);
  }
  EXPECT_TRUE(bits_equal(xs[0], xs[1]));
}

// The emulator itself (tests/cuda_emulator.h): what it must catch in a kernel.

// Each thread writes its slot, then reads its neighbour's above or below (its own at the end):
// without the barrier between, the neighbour may not have written yet.
__global__ void neighbour_k(float* out, float value, int higher, int barrier) {
  __shared__ float slot[64];
  const unsigned t = threadIdx.x, n = blockDim.x;
  slot[t] = value + float(t);
  if (barrier) __syncthreads();
  out[t] = slot[higher ? (t + 1 < n ? t + 1 : t) : (t > 0 ? t - 1 : t)];
  if (barrier) __syncthreads();
}

// Threads 48 and above return at once; the rest meet at a barrier and read each other's slots.
__global__ void early_return_k(float* out) {
  __shared__ float slot[64];
  const unsigned t = threadIdx.x;
  if (t >= 48) return;
  slot[t] = float(t);
  __syncthreads();
  out[t] = slot[47 - t];
}

// Block b reads what block b - 1 wrote in the same launch: right only if the blocks run in order.
__global__ void chain_k(float* out) {
  const unsigned b = blockIdx.x;
  if (threadIdx.x == 0) out[b] = b == 0 ? 1.0f : out[b - 1] + 1.0f;
}

// Does nothing, with any block shape.
__global__ void nothing_k(float*) {}

// Odd and even threads wait at different barriers: undefined on a GPU.
__global__ void divergent_k(float* out) {
  if (threadIdx.x % 2 == 0)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1.0f;
}

TEST(Emulator, AMissingBarrierReadsAStaleValueOnEitherSide) {
#ifdef PARALAB_EMULATOR_TSAN
  GTEST_SKIP() << "under TSan a missing barrier is a reported race (sanitize.sh, ModelKernels)";
#endif
  // Two launches of one block in a row run its threads in opposite orders: a read of the
  // neighbour above is stale in one of them, of the neighbour below in the other. Each launch
  // writes other values than the one before, so a stale slot holds a wrong one.
  const auto expected = [](float value, int higher, int t) {
    return value + float(higher ? std::min(t + 1, 63) : std::max(t - 1, 0));
  };
  for (const int higher : {0, 1}) {
    int wrong_launches = 0;
    for (int launch = 0; launch < 2; ++launch) {
      const float value = 100.0f * float(1 + 3 * higher + launch);
      std::vector<float> out(64, -1.0f);
      emulate(dim3(1), dim3(64), neighbour_k, out.data(), value, higher, 0);
      int wrong = 0;
      for (int t = 0; t < 64; ++t) wrong += out[std::size_t(t)] != expected(value, higher, t);
      wrong_launches += wrong > 0;
    }
    EXPECT_EQ(wrong_launches, 1) << "without the barrier, higher=" << higher;
    const float value = 100.0f * float(3 + 3 * higher);
    std::vector<float> out(64, -1.0f);
    emulate(dim3(1), dim3(64), neighbour_k, out.data(), value, higher, 1);
    for (int t = 0; t < 64; ++t)
      EXPECT_EQ(out[std::size_t(t)], expected(value, higher, t)) << "with the barrier, t=" << t;
  }
}

TEST(Emulator, ThreadsThatReturnEarlyDoNotHoldABarrier) {
  std::vector<float> out(64, -1.0f);
  emulate(dim3(3), dim3(64), early_return_k, out.data());
  for (int t = 0; t < 48; ++t) EXPECT_EQ(out[std::size_t(t)], float(47 - t)) << t;
  for (int t = 48; t < 64; ++t) EXPECT_EQ(out[std::size_t(t)], -1.0f) << t;
}

TEST(Emulator, AResultThatDependsOnTheBlocksOrderDiffersBetweenTwoLaunches) {
  // A GPU runs a grid's blocks in no order; the emulator runs them first to last and last to
  // first in turn.
  int in_order = 0;
  for (int launch = 0; launch < 2; ++launch) {
    std::vector<float> out(8, -1.0f);
    emulate(dim3(8), dim3(32), chain_k, out.data());
    bool chain = true;
    for (int b = 0; b < 8; ++b) chain = chain && out[std::size_t(b)] == float(b + 1);
    in_order += chain;
  }
  EXPECT_EQ(in_order, 1);
}

TEST(Emulator, LaunchesAGpuRefusesAreRefused) {
  std::vector<float> out(2048);
  const auto launch = [&](dim3 grid, dim3 block) { emulate(grid, block, nothing_k, out.data()); };
  EXPECT_THROW(launch(dim3(1), dim3(1025)), std::invalid_argument);
  EXPECT_THROW(launch(dim3(1), dim3(16, 1, 65)), std::invalid_argument);
  EXPECT_THROW(launch(dim3(1, 65536), dim3(32)), std::invalid_argument);
  EXPECT_THROW(launch(dim3(1, 1, 65536), dim3(32)), std::invalid_argument);
  EXPECT_THROW(launch(dim3(0), dim3(32)), std::invalid_argument);
  EXPECT_THROW(launch(dim3(1), dim3(32, 0)), std::invalid_argument);
  EXPECT_NO_THROW(launch(dim3(1), dim3(1024)));
  EXPECT_NO_THROW(launch(dim3(2, 3, 2), dim3(4, 4, 64)));
}

TEST(Emulator, ThreadsAtDifferentBarriersAbort) {
#if !defined(PARALAB_EMULATOR_FIBERS)
  GTEST_SKIP() << "host threads: a divergent barrier is not told apart";
#endif
#ifdef GTEST_FLAG_SET
  GTEST_FLAG_SET(death_test_style, "threadsafe");
#else  // GoogleTest < 1.12 (Ubuntu 22.04 has 1.11)
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
#endif
  std::vector<float> out(64);
  EXPECT_DEATH(emulate(dim3(1), dim3(64), divergent_k, out.data()),
               "wait at different __syncthreads\\(\\)");
}

}  // namespace
}  // namespace paralab
