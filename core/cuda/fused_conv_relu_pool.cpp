// The CUDA conv -> ReLU -> avgpool stage on ParaLab's own kernels ("kernels": "fused"): one
// kernel forward writes only the pooled output and a byte of ReLU bits per pooled value (no
// conv activation in memory); backward derives the conv gradient from dy and those bits. Sums
// have a fixed order, so results repeat to the bit and a shard of a batch sees exactly the
// activations the whole batch sees. cuDNN's stage (conv_relu_pool.cpp) stays as the reference
// path ("kernels": "cudnn").
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>

#include "core/cuda/check.h"
#include "core/cuda/conv_relu_pool_fused.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/kernel_log.h"
#include "core/cuda/relu_masks.h"

namespace paralab::cuda {

namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct Plan {
  crp::Geometry g{};
  ReluMasks masks;  // ReLU bits: the last training forward's, an evaluation's
  Tensor dconv;     // (N,K,OH,OW), for the GEMM paths
  Tensor partial;   // partial_floats(g)
  Tensor cols;      // cols_floats(g): the input gradient's columns, when dx is asked for
  const crp::TileSet* tiles = &crp::kDefaultTiles;
  bool has_forward = false;
};

// The GEMM tiles: crp::kDefaultTiles, or the set PARALAB_OWN_TILES names (wide, narrow), for
// measuring one against the other (every set gives the same bits; conv_relu_pool_plan.h).
const crp::TileSet& own_tiles() {
  const char* v = std::getenv("PARALAB_OWN_TILES");
  if (!v || !*v) return crp::kDefaultTiles;
  if (const crp::TileSet* t = crp::find_tile_set(v)) return *t;
  std::string known;
  for (const crp::TileSet* t : crp::kTileSets)
    known += (known.empty() ? "" : ", ") + std::string(t->name);
  throw Error("PARALAB_OWN_TILES: unknown tile set '" + std::string(v) + "' (known: " + known +
              ")");
}

std::string tile_name(const char* what, const crp::Tile& t) {
  return std::string(what) + " " + std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" +
         std::to_string(t.bk) + ", " + std::to_string(t.tm) + "x" + std::to_string(t.tn) +
         " per thread";
}

std::string slice_note(const crp::Geometry& g) {
  const crp::Slices sl = crp::data_slices(g);
  return std::to_string(sl.count) + (sl.count == 1 ? " slice" : " slices") + " of " +
         std::to_string(sl.examples) + " examples";
}

class FusedConvReluPool final : public ConvReluPool {
 public:
  FusedConvReluPool(CudaDevice& d, KernelLog& log) : d_(d), log_(log) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
               bool training) override {
    check_forward(x, w, b, y);
    Plan& p = plan(x, w);
    crp::forward(p.g, *p.tiles, x.f32(), w.f32(), b.f32(), y.f32(), p.masks.for_forward(training),
                 d_.stream());
    if (training) p.has_forward = true;
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    check_backward(x, w, dy, dx, dw, db);
    Plan& p = plan(x, w);
    PARALAB_REQUIRE(p.has_forward, "conv_relu_pool backward: no training forward for x " +
                                       shape_string(x.shape()));
    const bool gemm = !crp::direct(p.g);
    if ((gemm || dx) && !p.dconv.defined())
      p.dconv = Tensor::empty(d_, {p.g.n, p.g.k, p.g.oh, p.g.ow});
    crp::backward_weights(p.g, *p.tiles, x.f32(), dy.f32(), p.masks.training(),
                          gemm ? p.dconv.f32() : nullptr, p.partial.f32(), dw.f32(), db.f32(),
                          d_.stream());
    if (!dx) return;
    if (!gemm) crp::conv_grads(p.g, dy.f32(), p.masks.training(), p.dconv.f32(), d_.stream());
    if (!p.cols.defined())
      p.cols = Tensor::empty(d_, {std::max<int64_t>(1, crp::cols_floats(p.g))});
    crp::backward_data(p.g, *p.tiles, p.dconv.f32(), w.f32(), p.cols.f32(), dx->f32(), d_.stream());
  }

 private:
  Plan& plan(const Tensor& x, const Tensor& w) {
    output_shape(x, w);  // validates
    const Key key{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3)};
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    auto p = std::make_unique<Plan>();
    p->g =
        crp::checked_geometry(x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3));
    p->tiles = &own_tiles();
    p->masks = ReluMasks(d_, p->g);
    p->partial = Tensor::empty(d_, {crp::partial_floats(p->g)});
    const crp::Partition part = crp::partition(p->g.n);
    const bool direct = crp::direct(p->g);
    const std::string chunks = "summed in " + std::to_string(part.parts) + " chunks of " +
                               std::to_string(part.chunk) + " examples, then in order";
    const crp::TileSet& t = *p->tiles;
    log_.note(
        conv_key(x, w),
        {{"kernels", "fused"},
         {"tiles", t.name},
         {"forward", direct ? std::string("direct, one thread per pooled output")
                            : tile_name("implicit GEMM", t.forward)},
         {"backward_filter",
          (direct ? std::string("direct") : tile_name("implicit GEMM", t.filter)) + ", " + chunks},
         {"backward_data", tile_name("columns GEMM", t.data) + " over the positions the pool " +
                               "reads, then col2im; " + slice_note(p->g)}});
    return *plans_.emplace(key, std::move(p)).first->second;
  }

  CudaDevice& d_;
  KernelLog& log_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace

std::unique_ptr<ConvReluPool> make_fused_conv_relu_pool(CudaDevice& device, KernelLog& log) {
  return std::make_unique<FusedConvReluPool>(device, log);
}

}  // namespace paralab::cuda
