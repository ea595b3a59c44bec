// Every backend against the double-precision reference: every op forward and backward on
// random inputs, the whole LeNet (loss, logits, all gradients), SGD steps, and determinism.
// The same tests run for "cpu" and, in CUDA builds, for "cuda" (skipped, with the reason, when
// no GPU is usable). TF32 is off, so one set of float32 tolerances serves both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#if PARALAB_HAVE_CUDA
#include <dlfcn.h>

#include "core/cuda/cublas_api.h"
#endif
#if PARALAB_HAVE_CPU
#include "core/cpu/onednn_impls.h"
#endif
#include "core/device.h"
#include "core/error.h"
#include "core/lenet.h"
#include "core/ops.h"
#include "core/rng.h"
#include "tests/reference/reference.h"
#include "tests/test_util.h"

namespace paralab {
namespace {

using testing::all_close;
using testing::to_double;
using testing::to_float;

// Inputs are rounded to float first, so the reference sees exactly what the backend sees; the
// remaining difference is float32 accumulation over at most ~800 terms: rtol 1e-4 leaves a wide
// margin over its ~1e-6 typical error yet catches any wrong index or missing term (errors of
// order 1). atol covers sums that cancel to near zero.
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

ref::Vec random_vec(std::size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  ref::Vec v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

class Backend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // "cuda-fused" / "cuda-mixed": the CUDA backend with its own conv kernels ("kernels":
    // "fused"), or its own for small filters and cuDNN for the rest ("mixed").
    const std::string& p = GetParam();
    const std::string kernels = p.starts_with("cuda-") ? p.substr(5) : "";
    const std::string backend = kernels.empty() ? p : "cuda";
    if (const std::string why = backend_unavailable(backend); !why.empty())
      GTEST_SKIP() << GetParam() << ": " << why;
    DeviceOptions options;
    if (!kernels.empty()) options.kernels = kernels;
    devices_ = make_devices(backend, 1, options);
    dev_ = devices_[0].get();
    dev_->bind_thread();
  }
  Tensor put(const ref::Vec& v, Shape shape) {
    return Tensor::from_host(*dev_, std::move(shape), to_float(v));
  }
  std::vector<std::unique_ptr<Device>> devices_;
  Device* dev_ = nullptr;
};

void check_stage(Device& dev, int N, int C, int H, int W, int K, int R, int S, uint64_t seed,
                 double w_scale) {
  const int PH = (H - R + 1) / 2, PW = (W - S + 1) / 2;
  auto x = random_vec(N * C * H * W, seed), w = random_vec(K * C * R * S, seed + 1, w_scale),
       b = random_vec(K, seed + 2, 0.1), dy = random_vec(N * K * PH * PW, seed + 3);
  auto put = [&](const ref::Vec& v, Shape s) {
    return Tensor::from_host(dev, std::move(s), to_float(v));
  };
  auto stage = dev.ops().make_conv_relu_pool();
  Tensor tx = put(x, {N, C, H, W}), tw = put(w, {K, C, R, S});
  Tensor ty = Tensor::empty(dev, {N, K, PH, PW});
  stage->forward(tx, tw, put(b, {K}), ty, /*training=*/true);
  Tensor tdx = Tensor::empty(dev, {N, C, H, W}), tdw = Tensor::empty(dev, {K, C, R, S}),
         tdb = Tensor::empty(dev, {K});
  stage->backward(tx, tw, put(dy, {N, K, PH, PW}), &tdx, tdw, tdb);
  const ref::StageResult r = ref::conv_relu_pool(x, w, b, dy, N, C, H, W, K, R, S);
  const std::string what = "C=" + std::to_string(C) + " H=" + std::to_string(H);
  EXPECT_TRUE(all_close(ty.to_host_f32(), r.y, kAtol, kRtol)) << "y " << what;
  EXPECT_TRUE(all_close(tdx.to_host_f32(), r.dx, kAtol, kRtol)) << "dx " << what;
  EXPECT_TRUE(all_close(tdw.to_host_f32(), r.dw, kAtol, kRtol)) << "dw " << what;
  EXPECT_TRUE(all_close(tdb.to_host_f32(), r.db, kAtol, kRtol)) << "db " << what;
}

TEST_P(Backend, ConvReluPoolMatchesReference) {
  // Odd sizes (a conv output of 7x7 pools to 3x3, dropping a row and a column) and channel
  // counts that are not multiples of the 16-wide blocks, so padding and indexing are exercised.
  check_stage(*dev_, 3, 4, 9, 8, 5, 3, 2, 1, 1.0);
}

TEST_P(Backend, ConvReluPoolLeNetShapesMatchReference) {
  check_stage(*dev_, 2, 1, 28, 28, 20, 3, 3, 5, 0.3);   // stage 1: 26x26 -> 13x13
  check_stage(*dev_, 2, 20, 13, 13, 50, 5, 5, 9, 0.1);  // stage 2: 9x9 -> 4x4 (floor)
}

TEST_P(Backend, ConvReluPoolGemmTilesAndTailsMatchReference) {
  // LeNet's conv2 at this batch fits one tile of the own kernels' forward GEMM in each direction;
  // these take several row tiles (K = 70, 130 filters), several row tiles of the input gradient's
  // columns (C R S = 360, 630), tails in both, an odd batch split into uneven chunks and crs past
  // the direct path's limit, so that the GPU runs (and compute-sanitizer sees) multi-tile grids.
  check_stage(*dev_, 5, 40, 12, 11, 70, 3, 3, 13, 0.05);
  check_stage(*dev_, 3, 70, 9, 10, 130, 3, 3, 17, 0.04);
}

TEST_P(Backend, ConvReluPoolKeepsTrainingActivationAcrossOtherShapes) {
  // An evaluation forward at another batch size between a training forward and its backward
  // must not disturb the activation backward uses.
  const int N = 2, C = 3, H = 8, K = 4, R = 3;
  auto x = random_vec(N * C * H * H, 91), w = random_vec(K * C * R * R, 92), b = random_vec(K, 93),
       dy = random_vec(N * K * 3 * 3, 94), x2 = random_vec(5 * C * H * H, 95);
  auto stage = dev_->ops().make_conv_relu_pool();
  Tensor tx = put(x, {N, C, H, H}), tw = put(w, {K, C, R, R}), tb = put(b, {K});
  Tensor ty = Tensor::empty(*dev_, {N, K, 3, 3}), ty2 = Tensor::empty(*dev_, {5, K, 3, 3});
  stage->forward(tx, tw, tb, ty, true);
  stage->forward(put(x2, {5, C, H, H}), tw, tb, ty2, false);
  Tensor tdx = Tensor::empty(*dev_, {N, C, H, H}), tdw = Tensor::empty(*dev_, {K, C, R, R}),
         tdb = Tensor::empty(*dev_, {K});
  stage->backward(tx, tw, put(dy, {N, K, 3, 3}), &tdx, tdw, tdb);
  const ref::StageResult r = ref::conv_relu_pool(x, w, b, dy, N, C, H, H, K, R, R);
  EXPECT_TRUE(all_close(tdw.to_host_f32(), r.dw, kAtol, kRtol));
}

TEST_P(Backend, ConvReluPoolRejectsMisshapenArguments) {
  auto stage = dev_->ops().make_conv_relu_pool();
  Tensor x = Tensor::zeros(*dev_, {2, 3, 8, 8}), w = Tensor::zeros(*dev_, {4, 3, 3, 3});
  Tensor b = Tensor::zeros(*dev_, {4}), y = Tensor::zeros(*dev_, {2, 4, 3, 3});
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Tensor short_bias = Tensor::zeros(*dev_, {3});
  EXPECT_EQ(message([&] { stage->forward(x, w, short_bias, y, true); }),
            "conv_relu_pool forward: bias has 3 values for 4 channels");
  Tensor wide_y = Tensor::zeros(*dev_, {2, 4, 4, 4});
  EXPECT_EQ(message([&] { stage->forward(x, w, b, wide_y, true); }),
            "conv_relu_pool forward: y is (2,4,4,4), expected (2,4,3,3)");
  stage->forward(x, w, b, y, true);
  Tensor dw = Tensor::zeros(*dev_, {4, 3, 3, 3}), db = Tensor::zeros(*dev_, {4});
  EXPECT_EQ(message([&] { stage->backward(x, w, wide_y, nullptr, dw, db); }),
            "conv_relu_pool backward: dy is (2,4,4,4), expected (2,4,3,3)");
  Tensor bad_dx = Tensor::zeros(*dev_, {2, 3, 8, 7});
  EXPECT_EQ(message([&] { stage->backward(x, w, y, &bad_dx, dw, db); }),
            "conv_relu_pool backward: dx (2,3,8,7) != x (2,3,8,8)");
  Tensor short_dw = Tensor::zeros(*dev_, {4, 3, 3, 2}), short_db = Tensor::zeros(*dev_, {3});
  EXPECT_EQ(message([&] { stage->backward(x, w, y, nullptr, short_dw, db); }),
            "conv_relu_pool backward: dw has 72 values and db 4 for w (4,3,3,3)");
  EXPECT_EQ(message([&] { stage->backward(x, w, y, nullptr, dw, short_db); }),
            "conv_relu_pool backward: dw has 108 values and db 3 for w (4,3,3,3)");
  Tensor none = Tensor::zeros(*dev_, {0, 3, 8, 8});
  EXPECT_EQ(message([&] { stage->forward(none, w, b, y, true); }),
            "conv_relu_pool: x (0,3,8,8) and w (4,3,3,3) do not fit");
}

TEST_P(Backend, ReluMatchesReference) {
  auto x = random_vec(1000, 21), dy = random_vec(1000, 22);
  auto relu = dev_->ops().make_relu();
  Tensor tx = put(x, {1000}), ty = Tensor::empty(*dev_, {1000}), tdx = Tensor::empty(*dev_, {1000});
  relu->forward(tx, ty);
  EXPECT_TRUE(all_close(ty.to_host_f32(), ref::relu_forward(x), 0, 0));
  relu->backward(ty, put(dy, {1000}), tdx);
  EXPECT_TRUE(all_close(tdx.to_host_f32(), ref::relu_backward(x, dy), 0, 0));
}

TEST_P(Backend, LinearMatchesReference) {
  const int N = 7, in = 33, out = 17;
  auto x = random_vec(N * in, 31), w = random_vec(in * out, 32), b = random_vec(out, 33),
       dy = random_vec(N * out, 34);
  auto fc = dev_->ops().make_linear();
  Tensor tx = put(x, {N, in}), tw = put(w, {in, out});
  Tensor ty = Tensor::empty(*dev_, {N, out});
  fc->forward(tx, tw, put(b, {out}), ty);
  EXPECT_TRUE(all_close(ty.to_host_f32(), ref::linear_forward(x, w, b, N, in, out), kAtol, kRtol));
  Tensor tdx = Tensor::empty(*dev_, {N, in}), tdw = Tensor::empty(*dev_, {in, out}),
         tdb = Tensor::empty(*dev_, {out});
  fc->backward(tx, tw, put(dy, {N, out}), &tdx, tdw, tdb);
  ref::Vec dx, dw, db;
  ref::linear_backward(x, w, dy, N, in, out, dx, dw, db);
  EXPECT_TRUE(all_close(tdx.to_host_f32(), dx, kAtol, kRtol)) << "dx";
  EXPECT_TRUE(all_close(tdw.to_host_f32(), dw, kAtol, kRtol)) << "dw";
  EXPECT_TRUE(all_close(tdb.to_host_f32(), db, kAtol, kRtol)) << "db";
}

// The linear layer with its ReLU as one op (CUDA: bias and ReLU in cuBLASLt's epilogue, the
// bias gradient in the weight GEMM's), against the reference linear then ReLU. Weights and bias,
// and their gradients, are views into flat buffers, w at `offset` floats and b right after it,
// as the model's parameters and gradients are (a GEMM library must not assume aligned pointers):
// offset 1 gives 4-byte aligned views; offset 2 with 400 x 120 gives LeNet's fc1 case, weights
// 8-byte aligned and the bias at 8 mod 16 bytes, under the 16 bytes a cuBLASLt epilogue kernel may
// assume for its bias vector. At a small shape and at LeNet's fc1 (batch 256, 400 -> 120).
void check_linear(Device& dev, bool relu, int N, int in, int out, uint64_t seed, int offset = 1) {
  const ref::Vec x = random_vec(N * in, seed), w = random_vec(in * out, seed + 1, 0.2),
                 b = random_vec(out, seed + 2), dy = random_vec(N * out, seed + 3);
  ref::Vec flat(static_cast<std::size_t>(offset + in * out + out));
  std::copy(w.begin(), w.end(), flat.begin() + offset);
  std::copy(b.begin(), b.end(), flat.begin() + offset + in * out);
  const Tensor params = Tensor::from_host(dev, {static_cast<int64_t>(flat.size())}, to_float(flat));
  const Tensor tw = params.view(offset, {in, out}), tb = params.view(offset + in * out, {out});
  Tensor grads = Tensor::empty(dev, params.shape());
  auto fc = relu ? dev.ops().make_linear_relu() : dev.ops().make_linear();
  Tensor tx = Tensor::from_host(dev, {N, in}, to_float(x)), ty = Tensor::empty(dev, {N, out});
  fc->forward(tx, tw, tb, ty);
  ref::Vec y = ref::linear_forward(x, w, b, N, in, out);
  ref::Vec g = dy;
  if (relu) {
    g = ref::relu_backward(y, dy);
    y = ref::relu_forward(y);
  }
  const std::string what = (relu ? "linear+relu " : "linear ") + std::to_string(N) + "x" +
                           std::to_string(in) + "x" + std::to_string(out);
  EXPECT_TRUE(all_close(ty.to_host_f32(), y, kAtol, kRtol)) << "y " << what;
  const Tensor tdy = Tensor::from_host(dev, {N, out}, to_float(dy));
  Tensor tdx = Tensor::empty(dev, {N, in}), tdw = grads.view(offset, {in, out}),
         tdb = grads.view(offset + in * out, {out});
  fc->backward(tx, tw, tdy, &tdx, tdw, tdb);
  ref::Vec dx, dw, db;
  ref::linear_backward(x, w, g, N, in, out, dx, dw, db);
  EXPECT_TRUE(all_close(tdx.to_host_f32(), dx, kAtol, kRtol)) << "dx " << what;
  EXPECT_TRUE(all_close(tdw.to_host_f32(), dw, kAtol, kRtol)) << "dw " << what;
  EXPECT_TRUE(all_close(tdb.to_host_f32(), db, kAtol, kRtol)) << "db " << what;
  EXPECT_EQ(tdy.to_host_f32(), to_float(dy)) << "dy changed " << what;
  // The first layer's backward: no dx, the same weight and bias gradients, bit for bit. Written
  // into views at the same offset of a second flat buffer: a GEMM library may pick its kernel by
  // the pointers' alignment (cuBLASLt does), so only equally aligned outputs must agree to the
  // bit.
  Tensor grads2 = Tensor::empty(dev, params.shape());
  Tensor tdw2 = grads2.view(offset, {in, out}), tdb2 = grads2.view(offset + in * out, {out});
  fc->backward(tx, tw, tdy, nullptr, tdw2, tdb2);
  EXPECT_EQ(tdw2.to_host_f32(), tdw.to_host_f32()) << what;
  EXPECT_EQ(tdb2.to_host_f32(), tdb.to_host_f32()) << what;
}

TEST_P(Backend, LinearAtUnalignedParametersMatchesReference) {
  check_linear(*dev_, false, 7, 33, 17, 61);
  check_linear(*dev_, false, 256, 400, 120, 65);
}

TEST_P(Backend, LinearWithReluMatchesReference) {
  check_linear(*dev_, true, 7, 33, 17, 71);
  check_linear(*dev_, true, 256, 400, 120, 75);
  check_linear(*dev_, true, 256, 84, 10, 79);
}

TEST_P(Backend, LinearWithBiasUnder16ByteAlignedMatchesReference) {
  check_linear(*dev_, true, 256, 400, 120, 91, 2);
  check_linear(*dev_, false, 256, 400, 120, 95, 2);
  check_linear(*dev_, true, 7, 33, 17, 99, 2);
}

#if PARALAB_HAVE_CUDA
// cuBLAS is loaded when first used (core/cuda/cublas_api.h), not linked: a process that uses no
// CUDA device never pays its 0.4 s of start-up. Under ctest each test is a process of its own, so
// nothing has loaded it before this test; then every function ParaLab calls resolves, and the
// version the results record is the loaded library's.
TEST(CudaBackend, CublasIsLoadedOnFirstUseWithEveryFunction) {
  if (cuda::blas_loaded()) GTEST_SKIP() << "cuBLAS was loaded by an earlier test of this process";
  const std::string lt = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  EXPECT_EQ(dlopen(lt.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr)
      << lt << " is loaded before first use: linked to the program?";
  const cuda::CublasApi& api = cuda::blas();
  ASSERT_TRUE(cuda::blas_loaded());
  void* loaded = dlopen(lt.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(loaded, nullptr) << lt;
  if (loaded) dlclose(loaded);
#define PARALAB_EXPECT_RESOLVED(f) EXPECT_NE(api.f, nullptr) << #f;
  PARALAB_CUBLAS_FUNCTIONS(PARALAB_EXPECT_RESOLVED)
  PARALAB_CUBLASLT_FUNCTIONS(PARALAB_EXPECT_RESOLVED)
#undef PARALAB_EXPECT_RESOLVED
  int major = -1, minor = -1;
  ASSERT_EQ(api.cublasGetProperty(MAJOR_VERSION, &major), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(api.cublasGetProperty(MINOR_VERSION, &minor), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(major, CUBLAS_VER_MAJOR);
  EXPECT_EQ(cuda::blas_version(), std::to_string(major) + "." + std::to_string(minor));
  EXPECT_EQ(backend_versions()["cublas"], cuda::blas_version());
}

// Without an NVIDIA driver the runtime reports cudaErrorInsufficientDriver, "driver version is
// insufficient", which would send a user to upgrade a driver that is not there.
TEST(CudaBackend, NoDriverIsNamedAsSuch) {
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(driver);
    GTEST_SKIP() << "an NVIDIA driver is installed here";
  }
  EXPECT_EQ(backend_unavailable("cuda"), "no usable GPU: no NVIDIA driver found (libcuda)");
  EXPECT_EQ(usable_gpu_count(), 0);
}

// What allreduce_bench records of the GPUs it ran on (the performance model checks it against the
// directory a file is committed in): each usable GPU's name and SM count, in GPU order.
TEST(CudaBackend, GpuPropertiesNameEveryUsableGpu) {
  const nlohmann::json gpus = usable_gpu_properties();
  ASSERT_TRUE(gpus.is_array());
  ASSERT_EQ(static_cast<int>(gpus.size()), usable_gpu_count());
  if (gpus.empty()) GTEST_SKIP() << "no usable GPU";
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    EXPECT_EQ(gpus[i].at("gpu").get<std::size_t>(), i);
    EXPECT_EQ(gpus[i].at("gpu_model").get<std::string>().rfind("NVIDIA ", 0), 0u) << gpus[i];
    EXPECT_GT(gpus[i].at("sm_count").get<int>(), 0) << gpus[i];
  }
}

// A cuBLAS that cannot be found is one Error naming the file, both places looked in and why.
TEST(CudaBackend, ALibraryThatCannotBeLoadedIsAnErrorNamingIt) {
  try {
    cuda::open_cuda_library("paralab_absent", 13, "/nonexistent/lib64");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot load libparalab_absent.so.13"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/lib64/libparalab_absent.so.13"), std::string::npos) << what;
    EXPECT_NE(what.find("LD_LIBRARY_PATH"), std::string::npos) << what;
  }
  EXPECT_THROW(cuda::open_cuda_library("paralab_absent", 13, ""), Error);
}

std::unique_ptr<Device> cuda_device_or_skip(const std::string& kernels = "") {
  if (!backend_unavailable("cuda").empty()) return nullptr;
  DeviceOptions options;
  if (!kernels.empty()) options.kernels = kernels;
  auto devices = make_devices("cuda", 1, options);
  devices[0]->bind_thread();
  return std::move(devices[0]);
}

// PARALAB_TEST_CAPTURE_FAULT (the broken-capture tests' switch, core/cuda/cuda_device.h): a
// value other than C:N or C:N:D (C and N >= 1, D >= 0) is an error naming the variable, when a
// device is made.
TEST(CudaBackend, AMalformedCaptureFaultIsAnErrorNamingTheVariable) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty()) GTEST_SKIP() << why;
  for (const char* bad : {"2", "0:3", "2:", ":1", "a:b", "2:3x", "1:9999999", "1:2:", "1:2:-1",
                          "1:2:x", "1:2:3:4", "1::2"}) {
    testing::EnvGuard env("PARALAB_TEST_CAPTURE_FAULT");
    env.set(bad);
    try {
      make_devices("cuda", 1, {});
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("PARALAB_TEST_CAPTURE_FAULT: '") + bad +
                    "' is not C:N or C:N:D (the N-th fault point of the C-th capture, both "
                    "from 1, on every device or on device D only)");
    }
  }
  for (const char* good : {"2:4", "2:4:0", "1:1:7"}) {
    testing::EnvGuard env("PARALAB_TEST_CAPTURE_FAULT");
    env.set(good);
    EXPECT_NO_THROW(make_devices("cuda", 1, {})) << good;
  }
}

// The measuring switches of the CUDA ops (scripts/gpu-check.sh speed): cuBLASLt without split-K
// gives the same sums to float32 rounding; a value the switch does not know is an error naming
// it, raised where the op is planned.
TEST(CudaBackend, LinearWithoutSplitKMatchesReference) {
  testing::EnvGuard env("PARALAB_CUBLASLT_SPLIT_K");
  env.set("off");
  auto dev = cuda_device_or_skip();
  if (!dev) GTEST_SKIP() << backend_unavailable("cuda");
  check_linear(*dev, true, 256, 800, 128, 97, 2);
}

// PARALAB_CUDNN_RULE=gemm: LeNet's two cuDNN convolutions take no FFT algorithm in any direction
// (the heuristic rule chose FFT or FFT_TILING for three of their six on the H200), the choice says
// which rule made it, and the stage still computes what the heuristic's algorithms compute, to a
// float32 tolerance.
TEST(CudaBackend, GemmRuleTakesNoFftAlgorithmAndComputesTheSameStage) {
  auto stage_outputs = [](const char* rule, std::string* choices) {
    testing::EnvGuard env("PARALAB_CUDNN_RULE");
    env.set(rule);
    auto dev = cuda_device_or_skip("cudnn");
    if (!dev) return std::vector<std::vector<float>>{};
    std::vector<std::vector<float>> out;
    for (const auto& [x_shape, w_shape, y_shape] :
         {std::tuple<Shape, Shape, Shape>{{8, 1, 28, 28}, {20, 1, 3, 3}, {8, 20, 13, 13}},
          std::tuple<Shape, Shape, Shape>{{8, 20, 13, 13}, {50, 20, 5, 5}, {8, 50, 4, 4}}}) {
      auto stage = dev->ops().make_conv_relu_pool();
      const auto n = [](const Shape& s) { return static_cast<std::size_t>(shape_numel(s)); };
      Tensor x = Tensor::from_host(*dev, x_shape, to_float(random_vec(n(x_shape), 91))),
             w = Tensor::from_host(*dev, w_shape, to_float(random_vec(n(w_shape), 92, 0.2))),
             b = Tensor::from_host(*dev, {w_shape[0]}, to_float(random_vec(n({w_shape[0]}), 93))),
             y = Tensor::empty(*dev, y_shape),
             dy = Tensor::from_host(*dev, y_shape, to_float(random_vec(n(y_shape), 94)));
      Tensor dx = Tensor::empty(*dev, x_shape), dw = Tensor::empty(*dev, w_shape),
             db = Tensor::empty(*dev, {w_shape[0]});
      stage->forward(x, w, b, y, /*training=*/true);
      stage->backward(x, w, dy, &dx, dw, db);
      for (const Tensor* t : {&y, &dx, &dw, &db}) out.push_back(t->to_host_f32());
    }
    *choices = dev->ops().describe()["choices"].dump();
    return out;
  };
  std::string heuristic_choices, gemm_choices;
  const auto heuristic = stage_outputs("heuristic", &heuristic_choices);
  if (heuristic.empty()) GTEST_SKIP() << backend_unavailable("cuda");
  const auto gemm = stage_outputs("gemm", &gemm_choices);
  EXPECT_EQ(gemm_choices.find("FFT"), std::string::npos) << gemm_choices;
  EXPECT_NE(gemm_choices.find("\"rule\":\"gemm\""), std::string::npos) << gemm_choices;
  EXPECT_NE(heuristic_choices.find("\"rule\":\"heuristic\""), std::string::npos)
      << heuristic_choices;
  ASSERT_EQ(gemm.size(), heuristic.size());
  for (std::size_t i = 0; i < gemm.size(); ++i) {
    double scale = 0;
    for (float v : heuristic[i]) scale = std::max(scale, std::fabs(double{v}));
    for (std::size_t j = 0; j < gemm[i].size(); ++j)
      ASSERT_NEAR(gemm[i][j], heuristic[i][j], 1e-5 * scale + 1e-6)
          << "output " << i << " at " << j;
  }
}

TEST(CudaBackend, UnknownMeasuringSwitchesAreErrorsNamingThem) {
  {
    testing::EnvGuard env("PARALAB_CUBLASLT_SPLIT_K");
    env.set("maybe");
    auto dev = cuda_device_or_skip();
    if (!dev) GTEST_SKIP() << backend_unavailable("cuda");
    auto fc = dev->ops().make_linear();
    Tensor x = Tensor::zeros(*dev, {4, 8}), w = Tensor::zeros(*dev, {8, 3}),
           b = Tensor::zeros(*dev, {3}), y = Tensor::empty(*dev, {4, 3});
    try {
      fc->forward(x, w, b, y);
      ADD_FAILURE() << "no error for PARALAB_CUBLASLT_SPLIT_K=maybe";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("PARALAB_CUBLASLT_SPLIT_K"), std::string::npos)
          << e.what();
    }
  }
  {
    testing::EnvGuard env("PARALAB_OWN_TILES");
    env.set("huge");
    auto dev = cuda_device_or_skip("fused");
    ASSERT_NE(dev, nullptr);  // the block above found a GPU
    auto stage = dev->ops().make_conv_relu_pool();
    Tensor x = Tensor::zeros(*dev, {2, 20, 13, 13}), w = Tensor::zeros(*dev, {50, 20, 5, 5}),
           b = Tensor::zeros(*dev, {50}), y = Tensor::empty(*dev, {2, 50, 4, 4});
    try {
      stage->forward(x, w, b, y, /*training=*/true);
      ADD_FAILURE() << "no error for PARALAB_OWN_TILES=huge";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("PARALAB_OWN_TILES"), std::string::npos) << e.what();
    }
  }
  {
    testing::EnvGuard env("PARALAB_CUDNN_RULE");
    env.set("fastest");
    auto dev = cuda_device_or_skip("cudnn");
    ASSERT_NE(dev, nullptr);
    auto stage = dev->ops().make_conv_relu_pool();
    Tensor x = Tensor::zeros(*dev, {2, 20, 13, 13}), w = Tensor::zeros(*dev, {50, 20, 5, 5}),
           b = Tensor::zeros(*dev, {50}), y = Tensor::empty(*dev, {2, 50, 4, 4});
    try {
      stage->forward(x, w, b, y, /*training=*/true);
      ADD_FAILURE() << "no error for PARALAB_CUDNN_RULE=fastest";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "PARALAB_CUDNN_RULE: 'fastest' is neither heuristic nor gemm");
    }
  }
}
#endif

// The fused op computes what the two ops give one after the other: on the CPU the very bits.
TEST(CpuBackend, LinearWithReluIsTheTwoOpsBitForBit) {
  auto devices = make_devices("cpu", 1, {});
  Device& dev = *devices[0];
  const int N = 32, in = 50, out = 24;
  const auto x = to_float(random_vec(N * in, 81)), w = to_float(random_vec(in * out, 82, 0.2)),
             b = to_float(random_vec(out, 83)), dy = to_float(random_vec(N * out, 84));
  const Tensor tx = Tensor::from_host(dev, {N, in}, x), tw = Tensor::from_host(dev, {in, out}, w),
               tb = Tensor::from_host(dev, {out}, b), tdy = Tensor::from_host(dev, {N, out}, dy);
  auto fused = dev.ops().make_linear_relu();
  auto linear = dev.ops().make_linear();
  auto relu = dev.ops().make_relu();
  Tensor y1 = Tensor::empty(dev, {N, out}), y2 = Tensor::empty(dev, {N, out});
  fused->forward(tx, tw, tb, y1);
  linear->forward(tx, tw, tb, y2);
  relu->forward(y2, y2);
  EXPECT_EQ(y1.to_host_f32(), y2.to_host_f32());
  Tensor dx1 = Tensor::empty(dev, {N, in}), dw1 = Tensor::empty(dev, {in, out}),
         db1 = Tensor::empty(dev, {out}), dx2 = Tensor::empty(dev, {N, in}),
         dw2 = Tensor::empty(dev, {in, out}), db2 = Tensor::empty(dev, {out}),
         g = Tensor::empty(dev, {N, out});
  fused->backward(tx, tw, tdy, &dx1, dw1, db1);
  relu->backward(y2, tdy, g);
  linear->backward(tx, tw, g, &dx2, dw2, db2);
  EXPECT_EQ(dx1.to_host_f32(), dx2.to_host_f32());
  EXPECT_EQ(dw1.to_host_f32(), dw2.to_host_f32());
  EXPECT_EQ(db1.to_host_f32(), db2.to_host_f32());
}

#if PARALAB_HAVE_CPU
// The convolution implementations the CPU backend does not use from oneDNN 3.7 on
// (core/cpu/onednn_impls.h): the direct JIT ones, told apart by name from every other kind.
TEST(CpuBackend, DirectJitConvolutionsAreToldApartByName) {
  for (const char* impl : {"jit:avx512_core", "jit:avx2", "jit:sse41", "jit:avx512_core_bf16"})
    EXPECT_TRUE(cpu::onednn::is_direct_jit_conv(impl)) << impl;
  for (const char* impl :
       {"brgconv:avx512_core", "brg_conv_bwd:avx2+brg_conv_fwd:avx2", "brgconv_strided:avx2",
        "brg:avx512_core", "jit_1x1:avx512_core", "jit_dw:avx2", "jit_uni:avx2", "x64:gemm:jit",
        "gemm:jit", "ref:any", ""})
    EXPECT_FALSE(cpu::onednn::is_direct_jit_conv(impl)) << impl;
}
#endif

TEST_P(Backend, SoftmaxXentMatchesReference) {
  const int N = 9, classes = 10;
  auto z = random_vec(N * classes, 41, 3.0);
  std::vector<int> labels;
  std::vector<int32_t> labels32;
  for (int i = 0; i < N; ++i) {
    labels.push_back((i * 7) % classes);
    labels32.push_back((i * 7) % classes);
  }
  auto xent = dev_->ops().make_softmax_xent();
  Tensor tdz = Tensor::empty(*dev_, {N, classes}), stats = Tensor::empty(*dev_, {2});
  xent->forward_backward(put(z, {N, classes}), Tensor::from_host(*dev_, {N}, labels32), &tdz,
                         stats);
  ref::Vec dz;
  int correct = 0;
  const double loss = ref::softmax_xent(z, labels, N, classes, dz, correct);
  const auto s = stats.to_host_f32();
  EXPECT_NEAR(s[0], loss, 1e-5 * std::abs(loss));
  EXPECT_EQ(static_cast<int>(s[1]), correct);
  EXPECT_TRUE(all_close(tdz.to_host_f32(), dz, 1e-6, 1e-5));
}

TEST_P(Backend, SgdAndAddAreExact) {
  auto p = random_vec(100, 51), g = random_vec(100, 52);
  Tensor tp = put(p, {100}), tg = put(g, {100});
  dev_->ops().sgd(tp, tg, 0.25f);  // powers of two: exact in float
  ref::Vec expect(100);
  for (int i = 0; i < 100; ++i) expect[i] = static_cast<float>(p[i] - 0.25 * g[i]);
  EXPECT_TRUE(all_close(tp.to_host_f32(), expect, 0, 0));
  dev_->ops().add_inplace(tp, tg);
  for (int i = 0; i < 100; ++i) expect[i] = static_cast<float>(expect[i] + g[i]);
  EXPECT_TRUE(all_close(tp.to_host_f32(), expect, 0, 0));
}

// The step read from a device scalar, as a replayed CUDA graph reads it: set, used, set again.
TEST_P(Backend, SgdWithItsStepOnTheDeviceTakesEachNewValue) {
  auto p = random_vec(100, 53), g = random_vec(100, 54);
  Tensor tp = put(p, {100}), tg = put(g, {100});
  Tensor step = Tensor::zeros(*dev_, {1});
  ref::Vec expect(p.begin(), p.end());
  for (const double s : {0.25, 0.5}) {  // powers of two: exact in float
    dev_->ops().set_scalar(step, static_cast<float>(s));
    dev_->ops().sgd(tp, tg, step);
    for (int i = 0; i < 100; ++i) expect[i] = static_cast<float>(expect[i] - s * g[i]);
    EXPECT_TRUE(all_close(tp.to_host_f32(), expect, 0, 0)) << "step " << s;
  }
  EXPECT_EQ(step.to_host_f32(), std::vector<float>{0.5f});
  Tensor two = Tensor::zeros(*dev_, {2});
  EXPECT_THROW(dev_->ops().sgd(tp, tg, two), Error);
  EXPECT_THROW(dev_->ops().set_scalar(two, 1.0f), Error);
}

// Several steps set at once (a graph of several training steps reads one each): every value in
// its place, in one call of up to 64 values; more, none, or a tensor of another size is an error
// naming the counts.
TEST_P(Backend, SetScalarsSetsEachValueInItsPlace) {
  std::vector<float> values(64);
  for (int i = 0; i < 64; ++i) values[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i);
  Tensor all = Tensor::zeros(*dev_, {64});
  dev_->ops().set_scalars(all, values);
  EXPECT_EQ(all.to_host_f32(), values);
  Tensor three = Tensor::zeros(*dev_, {3});
  const auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  dev_->ops().set_scalars(three, std::vector<float>{7, 8, 9});
  EXPECT_EQ(three.to_host_f32(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(error_of([&] {
              dev_->ops().set_scalars(three, std::vector<float>{1, 2});
            }),
            "set_scalars: 2 values (1 to 64) for a tensor (3)");
  EXPECT_EQ(error_of([&] { dev_->ops().set_scalars(three, std::vector<float>{}); }),
            "set_scalars: 0 values (1 to 64) for a tensor (3)");
  Tensor many = Tensor::zeros(*dev_, {65});
  EXPECT_EQ(error_of([&] { dev_->ops().set_scalars(many, std::vector<float>(65, 1.0f)); }),
            "set_scalars: 65 values (1 to 64) for a tensor (65)");
}

ref::LeNetParams to_ref_params(const std::vector<float>& flat) {
  return ref::unflatten(to_double(flat));
}

TEST(LeNetLayout, HasTheBookShapesAndParameterCount) {
  int64_t total = 0;
  for (const auto& p : lenet_layout()) {
    EXPECT_EQ(p.offset, total) << p.name;
    total += shape_numel(p.shape);
  }
  EXPECT_EQ(total, kLeNetParameters);
  EXPECT_EQ(kLeNetParameters, 129068);
  EXPECT_EQ(lenet_layout()[4].shape, (Shape{800, 128}));
}

TEST(LeNetInit, IsSeededNormalWithZeroBiases) {
  const auto a = lenet_initial_parameters(0), b = lenet_initial_parameters(0),
             c = lenet_initial_parameters(1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double sum = 0, sq = 0;
  int64_t n = 0;
  for (int i = 0; i < kLeNetTensors; ++i) {
    const auto& p = lenet_layout()[i];
    for (int64_t j = 0; j < shape_numel(p.shape); ++j) {
      const double v = a[static_cast<std::size_t>(p.offset + j)];
      if (i % 2) {
        EXPECT_EQ(v, 0.0) << p.name;
      } else {
        sum += v;
        sq += v * v;
        ++n;
      }
    }
  }
  EXPECT_NEAR(sum / n, 0.0, 2e-4);             // 128,860 draws: std error 2.8e-5
  EXPECT_NEAR(std::sqrt(sq / n), 0.01, 1e-4);  // relative std error ~0.2 %
}

class LeNetOnBackend : public Backend {};

TEST_P(LeNetOnBackend, ForwardBackwardMatchesReference) {
  const int N = 5;
  // A larger init scale than training's 0.01 so that gradients are not vanishingly small.
  const auto params = to_float(ref::flatten(ref::lenet_init(7, 0.1)));
  auto images = random_vec(N * 28 * 28, 61);
  for (auto& v : images) v = static_cast<float>(std::abs(v) / 3);
  std::vector<int> labels{3, 1, 4, 1, 5};
  std::vector<int32_t> labels32(labels.begin(), labels.end());

  LeNet model(*dev_);
  model.params().copy_from_host(params);
  Tensor stats = Tensor::empty(*dev_, {2});
  model.forward(put(images, {N, 1, 28, 28}), Tensor::from_host(*dev_, {N}, labels32), stats, true);
  model.backward();

  const auto r = ref::lenet_forward_backward(to_ref_params(params), images, labels, N);
  const auto s = stats.to_host_f32();
  EXPECT_NEAR(s[0], r.loss, 1e-5 * std::abs(r.loss));
  EXPECT_EQ(static_cast<int>(s[1]), r.correct);
  EXPECT_TRUE(all_close(model.logits().to_host_f32(), r.logits, kAtol, kRtol)) << "logits";
  const auto ref_grads = ref::flatten(r.grads);
  const auto grads = model.grads().to_host_f32();
  for (int i = 0; i < kLeNetTensors; ++i) {
    const auto& p = lenet_layout()[i];
    const auto b = static_cast<std::size_t>(p.offset), e = b + shape_numel(p.shape);
    const std::vector<float> g(grads.begin() + b, grads.begin() + e);
    const ref::Vec rg(ref_grads.begin() + b, ref_grads.begin() + e);
    EXPECT_TRUE(all_close(g, rg, kAtol, kRtol)) << "gradient of " << p.name;
  }
}

TEST_P(LeNetOnBackend, TenSgdStepsMatchReference) {
  const int N = 8;
  const float lr = 0.5f;
  auto params = to_float(ref::flatten(ref::lenet_init(3, 0.05)));
  auto images = random_vec(N * 28 * 28, 71);
  for (auto& v : images) v = static_cast<float>(std::abs(v) / 3);
  std::vector<int> labels{0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<int32_t> labels32(labels.begin(), labels.end());

  LeNet model(*dev_);
  model.params().copy_from_host(params);
  Tensor x = put(images, {N, 1, 28, 28}), y = Tensor::from_host(*dev_, {N}, labels32);
  Tensor stats = Tensor::empty(*dev_, {2});
  ref::LeNetParams rp = to_ref_params(params);
  for (int step = 0; step < 10; ++step) {
    model.forward(x, y, stats, true);
    model.backward();
    dev_->ops().sgd(model.params(), model.grads(), lr / N);
    const auto r = ref::lenet_forward_backward(rp, images, labels, N);
    ref::sgd(rp, r.grads, lr, N);
    EXPECT_NEAR(stats.to_host_f32()[0], r.loss, 1e-4 * std::abs(r.loss)) << "step " << step;
  }
  // Ten steps compound float rounding: the bound is looser than one op's, still far below any
  // real error (a wrong gradient moves parameters by ~lr * grad ~ 1e-2).
  EXPECT_TRUE(all_close(model.params().to_host_f32(), ref::flatten(rp), 1e-5, 1e-3));
}

TEST_P(LeNetOnBackend, SameSeedGivesBitIdenticalLosses) {
  auto run = [&] {
    LeNet model(*dev_);
    model.params().copy_from_host(lenet_initial_parameters(5));
    auto images = random_vec(16 * 28 * 28, 81);
    std::vector<int32_t> labels(16);
    for (int i = 0; i < 16; ++i) labels[i] = i % 10;
    Tensor x = put(images, {16, 1, 28, 28}), y = Tensor::from_host(*dev_, {16}, labels);
    Tensor stats = Tensor::empty(*dev_, {2});
    std::vector<float> losses;
    for (int i = 0; i < 5; ++i) {
      model.forward(x, y, stats, true);
      model.backward();
      dev_->ops().sgd(model.params(), model.grads(), 5.0f / 16);
      losses.push_back(stats.to_host_f32()[0]);
    }
    return losses;
  };
  const auto a = run(), b = run();
  EXPECT_EQ(a, b);
  EXPECT_NE(a.front(), a.back());  // it trained
}

TEST_P(Backend, ConvReluPoolOfAnExampleIsBitIdenticalAtEveryBatchSize) {
  // The strategy tests (tests/strategy_harness.h, tracks_single) rest on this: a shard of a
  // batch must see exactly the activations the whole batch sees, or a pre-activation within
  // rounding of zero may fall on the other side of ReLU's kink in one of them and change a
  // gradient by far more than rounding. The conv stages hold 17,570 of LeNet's 17,698 ReLU
  // positions per example. (oneDNN's matmul does not promise this: under AVX2 the linear layers'
  // outputs differ in the last bit between batch sizes; 128 positions remain exposed.)
  if (GetParam() == "cuda")
    GTEST_SKIP() << "cuda: cuDNN chooses its algorithms per batch size, so the order of a "
                    "convolution's sums may change with it";
  for (int stage = 0; stage < 2; ++stage) {
    if (GetParam() == "cuda-mixed" && stage == 1) continue;  // conv2 runs on cuDNN there
    const int C = stage ? 20 : 1, H = stage ? 13 : 28, K = stage ? 50 : 20, R = stage ? 5 : 3;
    const int P = (H - R + 1) / 2;
    const auto x = random_vec(25 * C * H * H, 3), w = random_vec(K * C * R * R, 4, 0.3),
               b = random_vec(K, 5, 0.1);
    auto y_at = [&](int n) {
      auto op = dev_->ops().make_conv_relu_pool();
      Tensor y = Tensor::empty(*dev_, {n, K, P, P});
      op->forward(put(ref::Vec(x.begin(), x.begin() + n * C * H * H), {n, C, H, H}),
                  put(w, {K, C, R, R}), put(b, {K}), y, /*training=*/true);
      return y.to_host_f32();
    };
    const auto whole = y_at(25);
    for (int n : {9, 8, 1}) {
      const auto part = y_at(n);
      EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin()))
          << "stage " << stage + 1 << ", batch " << n << " against 25";
    }
  }
}

const std::vector<std::string> kBackends = {"cpu"
#if PARALAB_HAVE_CUDA
                                            ,
                                            "cuda", "cuda-fused", "cuda-mixed"
#endif
};
INSTANTIATE_TEST_SUITE_P(Backends, Backend, ::testing::ValuesIn(kBackends),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });
INSTANTIATE_TEST_SUITE_P(Backends, LeNetOnBackend, ::testing::ValuesIn(kBackends),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace paralab
