// The CUDA linear layer: cuBLASLt GEMMs with the bias, the ReLU and the bias gradient in their
// epilogues, and cuBLAS with own kernels where cuBLASLt offers no algorithm for a shape.
//
// Row-major y (N,out) = x (N,in) W (in,out) is column-major y^T = W^T x^T: cuBLAS sees the
// row-major buffers as their transposes, so no data moves. In that view (m = out, n = N):
//   forward            y^T (out,N)  = W^T (out,in) x^T (in,N)    epilogue BIAS or RELU_BIAS: + b
//                                                                 per row, then max(0, .)
//   backward weights   dW^T (out,in) = g^T (out,N) x (N,in)       epilogue BGRADA: db = g^T's
//                                                                 row sums (A's "k" dimension)
//   backward data      dx^T (in,N)  = W (in,out) g^T (out,N)      no epilogue
// with g = dy, or with the ReLU dy masked where the forward's y > 0 (relu_backward).
//
// Reproducible: each shape's algorithm is cuBLASLt's first heuristic answer, asked once per op,
// so the same shapes on the same GPU give the same bits. Split-K is allowed with the reduction
// schemes that keep the partial products in the workspace and add them in a separate step
// (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, _OUTPUT_TYPE: a fixed order, no atomics), not "in
// place" (counters in the workspace, which cuBLAS shares on the stream). Without split-K the
// heuristic gave fc1's forward (m 128, n 256, k 800) 32 blocks of 32 x 32 outputs, each through
// all 800 products: 30 us on an H200 for 26 MFLOP (ncu, results/reference/h200-2026-12-04).
// PARALAB_CUBLASLT_SPLIT_K=off excludes split-K (CUBLASLT_REDUCTION_SCHEME_NONE), for measuring
// one rule against the other; the scheme is recorded with the algorithm.
// The heuristic is told the pointers' real alignment: weights and biases are views into one
// flat parameter buffer, not 256-byte aligned. Its preferences cover A, B, C and D but not the
// epilogue's bias vector, which a kernel it picks may load or store 16 bytes at a time ("misaligned
// address", a fault that ends the process's CUDA context): a bias or bias gradient under 16-byte
// alignment (LeNet's fc1 and fc2 biases sit at 8 mod 16 in the flat buffers) goes through a staging
// vector of the layer's own, one device-to-device copy of `out` floats per pass.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/cuda/check.h"
#include "core/cuda/cublas_api.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/kernel_log.h"
#include "core/cuda/kernels.h"
#include "core/ops.h"

namespace paralab::cuda {

namespace {

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment bound).
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  uint32_t align = 256;
  while (align > 4 && a % align != 0) align /= 2;
  return align;
}

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS:
      return "BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_BGRADA:
      return "BGRADA";
    default:
      return "DEFAULT";
  }
}

const char* reduction_scheme_name(uint32_t scheme) {
  switch (scheme) {
    case CUBLASLT_REDUCTION_SCHEME_NONE:
      return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE:
      return "inplace";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE:
      return "compute_type";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE:
      return "output_type";
    default:
      return "unknown";
  }
}

// Whether the heuristic may answer with split-K (the default), or not: PARALAB_CUBLASLT_SPLIT_K
// "on" or "off"; any other value is an error naming the variable.
bool split_k_allowed() {
  const char* v = std::getenv("PARALAB_CUBLASLT_SPLIT_K");
  if (!v || !*v || std::string_view(v) == "on") return true;
  if (std::string_view(v) == "off") return false;
  throw Error("PARALAB_CUBLASLT_SPLIT_K: '" + std::string(v) + "' is neither on nor off");
}

// One column-major GEMM D (m,n) = op(A) op(B) with an epilogue, planned once: descriptors and
// the algorithm. `ok` false (with `why`) when cuBLASLt has no algorithm for it, refuses a
// descriptor, or refuses the first call (run() false): the layer then takes cuBLAS and its own
// kernels. Nothing here throws for a refusal of cuBLASLt's.
class LtGemm {
 public:
  struct Spec {
    bool transa, transb;
    int m, n, k, lda, ldb, ldd;
    cublasLtEpilogue_t epilogue;
    std::array<uint32_t, 4> align;  // A, B, D, bias
    auto key() const {
      return std::tuple(transa, transb, m, n, k, lda, ldb, ldd, static_cast<int>(epilogue), align);
    }
  };

  LtGemm(CudaDevice& d, const Spec& s, const void* bias) : d_(d), spec_(s) {
    // Read before any descriptor exists: a bad value throws with nothing to release.
    const uint32_t reductions = split_k_allowed()
                                    ? uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                                               CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}
                                    : uint32_t{CUBLASLT_REDUCTION_SCHEME_NONE};
    // The first refusal names the plan's why_ and ends the planning.
    const auto check = [&](cublasStatus_t st, const char* call) {
      if (st != CUBLAS_STATUS_SUCCESS && why_.empty())
        why_ = std::string(call) + ": " + cublas_status_name(st);
      return why_.empty();
    };
    const cublasComputeType_t compute =
        d.tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
    const cublasOperation_t ta = s.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = s.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const char* const set_desc = "cublasLtMatmulDescSetAttribute";
    const bool described =
        check(blas().cublasLtMatmulDescCreate(&op_, compute, CUDA_R_32F),
              "cublasLtMatmulDescCreate") &&
        check(
            blas().cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
            set_desc) &&
        check(
            blas().cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
            set_desc) &&
        check(blas().cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &s.epilogue,
                                                    sizeof s.epilogue),
              set_desc) &&
        check(bias_status(bias), "cublasLtMatmulDescSetAttribute (bias pointer)");
    // On an SM share (a green context) the heuristic plans for the share's SMs, not the GPU's:
    // the tiles that fill a 132-SM GPU leave a 33-SM share with several waves.
    if (described && d.sm_share().stream && d.sm_share().sm_count > 0) {
      sm_target_ = d.sm_share().sm_count;
      check(blas().cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                  &sm_target_, sizeof sm_target_),
            "cublasLtMatmulDescSetAttribute (SM count target)");
    }
    // Stored layouts: A is (m,k) or, transposed, (k,m); B likewise (k,n) or (n,k).
    const char* const layout = "cublasLtMatrixLayoutCreate";
    cublasLtMatmulPreference_t pref = nullptr;
    if (!why_.empty() ||
        !check(blas().cublasLtMatrixLayoutCreate(&a_, CUDA_R_32F, s.transa ? s.k : s.m,
                                                 s.transa ? s.m : s.k, s.lda),
               layout) ||
        !check(blas().cublasLtMatrixLayoutCreate(&b_, CUDA_R_32F, s.transb ? s.n : s.k,
                                                 s.transb ? s.k : s.n, s.ldb),
               layout) ||
        !check(blas().cublasLtMatrixLayoutCreate(&d_layout_, CUDA_R_32F, s.m, s.n, s.ldd),
               layout) ||
        !check(blas().cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"))
      return;  // ok_ stays false
    const std::size_t workspace = CudaDevice::kCublasWorkspace;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    const auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, std::size_t n) {
      if (status == CUBLAS_STATUS_SUCCESS)
        status = blas().cublasLtMatmulPreferenceSetAttribute(pref, attr, v, n);
    };
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof reductions);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &s.align[0], sizeof(uint32_t));
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &s.align[1], sizeof(uint32_t));
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &s.align[2], sizeof(uint32_t));
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &s.align[2], sizeof(uint32_t));
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS)
      status = blas().cublasLtMatmulAlgoGetHeuristic(d.cublas_lt(), op_, a_, b_, d_layout_,
                                                     d_layout_, pref, 1, &result_, &found);
    blas().cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS)
      why_ = std::string("cublasLtMatmulAlgoGetHeuristic: ") + cublas_status_name(status);
    else if (found == 0)
      why_ = "cuBLASLt has no algorithm for it";
    ok_ = why_.empty();
  }
  ~LtGemm() {
    if (d_layout_) blas().cublasLtMatrixLayoutDestroy(d_layout_);
    if (b_) blas().cublasLtMatrixLayoutDestroy(b_);
    if (a_) blas().cublasLtMatrixLayoutDestroy(a_);
    if (op_) blas().cublasLtMatmulDescDestroy(op_);
  }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string log_key;  // its entry in the device's kernel log
  // What the results record: the epilogue and the algorithm's id, tile and split-K setting.
  nlohmann::json describe() const {
    int id = -1, tile = -1, split_k = -1;
    uint32_t scheme = 0;
    blas().cublasLtMatmulAlgoConfigGetAttribute(&result_.algo, CUBLASLT_ALGO_CONFIG_ID, &id,
                                                sizeof id, nullptr);
    blas().cublasLtMatmulAlgoConfigGetAttribute(&result_.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                sizeof tile, nullptr);
    blas().cublasLtMatmulAlgoConfigGetAttribute(&result_.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                &split_k, sizeof split_k, nullptr);
    blas().cublasLtMatmulAlgoConfigGetAttribute(
        &result_.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme, nullptr);
    return {{"epilogue", epilogue_name(spec_.epilogue)},
            {"algo_id", id},
            {"tile_id", tile},
            {"split_k", split_k},
            {"reduction_scheme", reduction_scheme_name(scheme)},
            {"sm_count_target", sm_target_ > 0 ? nlohmann::json(sm_target_) : nlohmann::json()}};
  }

  // D = op(A) op(B) (+ the epilogue with `bias`: read for BIAS, written for BGRADA). False when
  // cuBLASLt refuses the plan's first call (a heuristic's answer "doesn't fully guarantee algo
  // will run", cublasLt.h): nothing was queued, the plan is no longer ok, and the caller takes
  // its fallback, now and from then on. A refusal after the plan has run is an Error.
  bool run(const float* a, const float* b, float* d, const void* bias) {
    PARALAB_CUBLAS(bias_status(bias));
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = blas().cublasLtMatmul(
        d_.cublas_lt(), op_, &one, a, a_, b, b_, &zero, d, d_layout_, d, d_layout_, &result_.algo,
        d_.cublas_workspace(), CudaDevice::kCublasWorkspace, d_.stream());
    if (st == CUBLAS_STATUS_SUCCESS) {
      ran_ = true;
      return true;
    }
    if (ran_) PARALAB_CUBLAS(st);
    ok_ = false;
    why_ = std::string("cublasLtMatmul refused its first call: ") + cublas_status_name(st);
    return false;
  }

 private:
  cublasStatus_t bias_status(const void* bias) {
    if (spec_.epilogue == CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_SUCCESS;
    return blas().cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                 sizeof bias);
  }
  CudaDevice& d_;
  Spec spec_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_layout_ = nullptr;
  cublasLtMatmulHeuristicResult_t result_{};
  bool ok_ = false, ran_ = false;
  int32_t sm_target_ = 0;  // CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET; 0: the whole GPU's
  std::string why_;
};

class CudaLinear final : public Linear {
 public:
  CudaLinear(CudaDevice& d, KernelLog& log, bool relu) : d_(d), log_(log), relu_(relu) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const int n = rows(x, w), in = static_cast<int>(w.dim(0)), out = static_cast<int>(w.dim(1));
    PARALAB_REQUIRE(y.shape() == (Shape{n, out}),
                    "linear forward: y " + shape_string(y.shape()) + " does not fit");
    const cublasLtEpilogue_t epilogue =
        relu_ ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    const void* bias = stage_for(b, bias_stage_);
    LtGemm& g = plan(
        {false,
         false,
         out,
         n,
         in,
         out,
         in,
         out,
         epilogue,
         {alignment_of(w.raw()), alignment_of(x.raw()), alignment_of(y.raw()), alignment_of(bias)}},
        bias, "forward", x, w, bias != b.raw());
    if (relu_) y_ = y;
    if (g.ok()) {
      if (bias != b.raw()) d_.copy_on_device(bias_stage_.raw(), b.raw(), b.bytes());
      if (ran(g, w.f32(), x.f32(), y.f32(), bias)) return;
    }
    const float one = 1.0f, zero = 0.0f;
    PARALAB_CUBLAS(blas().cublasSgemm(d_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, out, n, in, &one,
                                      w.f32(), out, x.f32(), in, &zero, y.f32(), out));
    add_bias_rows(y.f32(), b.f32(), n, out, d_.stream());
    if (relu_) relu_forward(y.f32(), y.f32(), y.numel(), d_.stream());
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    const int n = rows(x, w), in = static_cast<int>(w.dim(0)), out = static_cast<int>(w.dim(1));
    PARALAB_REQUIRE(dy.shape() == (Shape{n, out}),
                    "linear backward: dy " + shape_string(dy.shape()) + " does not fit");
    const float* g = dy.f32();
    if (relu_) {
      PARALAB_REQUIRE(y_.defined() && y_.shape() == dy.shape(),
                      "linear+relu backward: no forward of dy's shape " + shape_string(dy.shape()));
      if (!masked_.defined() || masked_.shape() != dy.shape())
        masked_ = Tensor::empty(d_, dy.shape());
      relu_backward(y_.f32(), dy.f32(), masked_.f32(), dy.numel(), d_.stream());
      g = masked_.f32();
    }
    const float one = 1.0f, zero = 0.0f;
    // dW (in,out) = x^T g  ->  column-major dW^T (out,in) = g^T (out,N) x (N,in), and db from
    // g^T's rows in the epilogue.
    void* bias_grad = stage_for(db, db_stage_);
    LtGemm& weights = plan(
        {false,
         true,
         out,
         in,
         n,
         out,
         in,
         out,
         CUBLASLT_EPILOGUE_BGRADA,
         {alignment_of(g), alignment_of(x.raw()), alignment_of(dw.raw()), alignment_of(bias_grad)}},
        bias_grad, "backward weights", x, w, bias_grad != db.raw());
    if (weights.ok() && ran(weights, g, x.f32(), dw.f32(), bias_grad)) {
      if (bias_grad != db.raw()) d_.copy_on_device(db.raw(), bias_grad, db.bytes());
    } else {
      PARALAB_CUBLAS(blas().cublasSgemm(d_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, out, in, n, &one, g,
                                        out, x.f32(), in, &zero, dw.f32(), out));
      column_sums(g, db.f32(), n, out, d_.stream());
    }
    if (!dx) return;
    // dx (N,in) = g W^T  ->  column-major dx^T (in,N) = W (in,out) g^T (out,N)
    PARALAB_CUBLAS(blas().cublasSgemm(d_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, in, n, out, &one,
                                      w.f32(), out, g, out, &zero, dx->f32(), in));
  }

 private:
  static int rows(const Tensor& x, const Tensor& w) {
    PARALAB_REQUIRE(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(0),
                    "linear: x " + shape_string(x.shape()) + " and W " + shape_string(w.shape()) +
                        " do not fit");
    return static_cast<int>(x.dim(0));
  }

  // The plan of a GEMM, made at its first use (an eager step: a capture never plans) and
  // recorded in the device's kernel log.
  LtGemm& plan(const LtGemm::Spec& s, const void* bias, const char* pass, const Tensor& x,
               const Tensor& w, bool bias_staged) {
    auto it = plans_.find(s.key());
    if (it == plans_.end()) {
      it = plans_.emplace(s.key(), std::make_unique<LtGemm>(d_, s, bias)).first;
      LtGemm& g = *it->second;
      g.log_key = "linear x " + shape_string(x.shape()) + " w " + shape_string(w.shape()) +
                  (relu_ ? " relu " : " ") + pass;
      nlohmann::json choice = g.ok() ? nlohmann::json{{"gemm", "cublasLt"}} : fallback(g);
      if (g.ok()) choice.update(g.describe());
      if (g.ok() && bias_staged) choice["bias_staged"] = true;  // under 16-byte aligned
      log_.note(g.log_key, std::move(choice));
    }
    return *it->second;
  }
  static nlohmann::json fallback(const LtGemm& g) { return {{"gemm", "cublas"}, {"why", g.why()}}; }
  // g.run(...), and where its first call was refused, the log says the fallback runs instead.
  bool ran(LtGemm& g, const float* a, const float* b, float* d, const void* bias) {
    if (g.run(a, b, d, bias)) return true;
    log_.revise(g.log_key, fallback(g));
    return false;
  }

  // The vector the epilogue reads or writes for bias vector v: v itself where it is 16-byte
  // aligned, else `stage` (made at the first eager pass: a capture finds it made).
  void* stage_for(const Tensor& v, Tensor& stage) {
    if (alignment_of(v.raw()) >= 16) return v.raw();
    if (!stage.defined() || stage.shape() != v.shape()) stage = Tensor::empty(d_, v.shape());
    return stage.raw();
  }

  CudaDevice& d_;
  KernelLog& log_;
  bool relu_;
  Tensor y_;           // the last forward's output (relu: its gradient's mask)
  Tensor masked_;      // relu: dy where y > 0
  Tensor bias_stage_;  // the bias, copied where it is under 16-byte aligned (stage_for)
  Tensor db_stage_;    // the bias gradient's epilogue output, likewise, copied into db after
  std::map<decltype(std::declval<LtGemm::Spec>().key()), std::unique_ptr<LtGemm>> plans_;
};

}  // namespace

std::unique_ptr<Linear> make_cuda_linear(CudaDevice& device, KernelLog& log, bool relu) {
  return std::make_unique<CudaLinear>(device, log, relu);
}

}  // namespace paralab::cuda
