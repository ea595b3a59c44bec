#include "core/ops.h"

#include <memory>
#include <string>
#include <utility>

#include "core/error.h"

namespace paralab {

Shape ConvReluPool::output_shape(const Tensor& x, const Tensor& w) {
  // At least one example and one filter: the kernels cut the batch into chunks and launch a
  // block per filter tile, neither of which exists for none.
  PARALAB_REQUIRE(x.ndim() == 4 && w.ndim() == 4 && x.dim(1) == w.dim(1) && x.dim(0) >= 1 &&
                      w.dim(0) >= 1 && x.dim(2) - w.dim(2) + 1 >= 2 && x.dim(3) - w.dim(3) + 1 >= 2,
                  "conv_relu_pool: x " + shape_string(x.shape()) + " and w " +
                      shape_string(w.shape()) + " do not fit");
  return {x.dim(0), w.dim(0), (x.dim(2) - w.dim(2) + 1) / 2, (x.dim(3) - w.dim(3) + 1) / 2};
}

void ConvReluPool::check_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Tensor& y) {
  const Shape expect = output_shape(x, w);
  PARALAB_REQUIRE(y.shape() == expect, "conv_relu_pool forward: y is " + shape_string(y.shape()) +
                                           ", expected " + shape_string(expect));
  PARALAB_REQUIRE(b.numel() == w.dim(0), "conv_relu_pool forward: bias has " +
                                             std::to_string(b.numel()) + " values for " +
                                             std::to_string(w.dim(0)) + " channels");
}

void ConvReluPool::check_backward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                  const Tensor* dx, const Tensor& dw, const Tensor& db) {
  const Shape expect = output_shape(x, w);
  PARALAB_REQUIRE(dy.shape() == expect, "conv_relu_pool backward: dy is " +
                                            shape_string(dy.shape()) + ", expected " +
                                            shape_string(expect));
  PARALAB_REQUIRE(!dx || dx->shape() == x.shape(), "conv_relu_pool backward: dx " +
                                                       shape_string(dx ? dx->shape() : Shape{}) +
                                                       " != x " + shape_string(x.shape()));
  // The kernels write K C R S weight and K bias gradients: where they go must hold them.
  PARALAB_REQUIRE(dw.numel() == w.numel() && db.numel() == w.dim(0),
                  "conv_relu_pool backward: dw has " + std::to_string(dw.numel()) +
                      " values and db " + std::to_string(db.numel()) + " for w " +
                      shape_string(w.shape()));
}

namespace {

std::string dims(int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

// Ops::make_linear_relu's default: the linear op, then the ReLU in place on its output; backward
// masks dy into a buffer of its own, then runs the linear op's backward on it.
class LinearThenRelu final : public Linear {
 public:
  LinearThenRelu(std::unique_ptr<Linear> linear, std::unique_ptr<Relu> relu)
      : linear_(std::move(linear)), relu_(std::move(relu)) {}
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    linear_->forward(x, w, b, y);
    relu_->forward(y, y);
    y_ = y;
  }
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    PARALAB_REQUIRE(y_.defined() && y_.shape() == dy.shape(),
                    "linear+relu backward: no forward of dy's shape " + shape_string(dy.shape()));
    if (!masked_.defined() || masked_.shape() != dy.shape())
      masked_ = Tensor::empty(dy.device(), dy.shape());
    relu_->backward(y_, dy, masked_);
    linear_->backward(x, w, masked_, dx, dw, db);
  }

 private:
  std::unique_ptr<Linear> linear_;
  std::unique_ptr<Relu> relu_;
  Tensor y_, masked_;
};

}  // namespace

void Ops::set_scalars(Tensor& t, std::span<const float> values) {
  PARALAB_REQUIRE(t.dtype() == DType::F32 && t.numel() == static_cast<int64_t>(values.size()) &&
                      !values.empty() && values.size() <= kMaxScalars,
                  "set_scalars: " + std::to_string(values.size()) + " values (1 to " +
                      std::to_string(kMaxScalars) + ") for a tensor " + shape_string(t.shape()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    Tensor one = t.view(static_cast<int64_t>(i), {1});
    set_scalar(one, values[i]);
  }
}

std::unique_ptr<Linear> Ops::make_linear_relu() {
  return std::make_unique<LinearThenRelu>(make_linear(), make_relu());
}

void Conv2d::check_params(const Conv2dParams& p) {
  PARALAB_REQUIRE(p.stride_h >= 1 && p.stride_w >= 1,
                  "conv2d: stride " + dims(p.stride_h, p.stride_w) + " must be >= 1");
  PARALAB_REQUIRE(p.pad_h >= 0 && p.pad_w >= 0,
                  "conv2d: padding " + dims(p.pad_h, p.pad_w) + " must be >= 0");
}

Shape Conv2d::output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  check_params(p);
  PARALAB_REQUIRE(x.size() == 4 && w.size() == 4,
                  "conv2d: x " + shape_string(x) + " and w " + shape_string(w) + " must be 4-D");
  PARALAB_REQUIRE(x[1] == w[1], "conv2d: x " + shape_string(x) + " has " + std::to_string(x[1]) +
                                    " channels, w " + shape_string(w) + " expects " +
                                    std::to_string(w[1]));
  PARALAB_REQUIRE(x[0] >= 1 && w[0] >= 1 && w[2] >= 1 && w[3] >= 1,
                  "conv2d: empty x " + shape_string(x) + " or w " + shape_string(w));
  PARALAB_REQUIRE(w[2] <= x[2] + 2 * p.pad_h && w[3] <= x[3] + 2 * p.pad_w,
                  "conv2d: kernel " + dims(w[2], w[3]) + " larger than the input " +
                      dims(x[2], x[3]) + " padded by " + dims(p.pad_h, p.pad_w));
  return {x[0], w[0], (x[2] + 2 * p.pad_h - w[2]) / p.stride_h + 1,
          (x[3] + 2 * p.pad_w - w[3]) / p.stride_w + 1};
}

void Conv2d::check_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                           const Conv2dParams& p) {
  const Shape expect = output_shape(x.shape(), w.shape(), p);
  PARALAB_REQUIRE(y.shape() == expect, "conv2d forward: y is " + shape_string(y.shape()) +
                                           ", expected " + shape_string(expect));
  PARALAB_REQUIRE(b.numel() == w.dim(0), "conv2d forward: bias has " + std::to_string(b.numel()) +
                                             " values for " + std::to_string(w.dim(0)) +
                                             " channels");
}

void Conv2d::check_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx,
                            const Tensor& dw, const Tensor& db, const Conv2dParams& p) {
  const Shape expect = output_shape(x.shape(), w.shape(), p);
  PARALAB_REQUIRE(dy.shape() == expect, "conv2d backward: dy is " + shape_string(dy.shape()) +
                                            ", expected " + shape_string(expect));
  PARALAB_REQUIRE(!dx || dx->shape() == x.shape(), "conv2d backward: dx " +
                                                       shape_string(dx ? dx->shape() : Shape{}) +
                                                       " != x " + shape_string(x.shape()));
  PARALAB_REQUIRE(dw.shape() == w.shape(), "conv2d backward: dw " + shape_string(dw.shape()) +
                                               " != w " + shape_string(w.shape()));
  PARALAB_REQUIRE(db.numel() == w.dim(0), "conv2d backward: db has " + std::to_string(db.numel()) +
                                              " values for " + std::to_string(w.dim(0)) +
                                              " channels");
}

PoolMode pool_mode_from_name(const std::string& name) {
  if (name == "max") return PoolMode::Max;
  if (name == "avg") return PoolMode::Average;
  throw Error("pool2d: unknown mode \"" + name + "\" (known: max, avg)");
}

const char* pool_mode_name(PoolMode mode) { return mode == PoolMode::Max ? "max" : "avg"; }

void Pool2d::check_params(const Pool2dParams& p) {
  const std::string what = std::string("pool2d (") + pool_mode_name(p.mode) + "): ";
  PARALAB_REQUIRE(p.window_h >= 1 && p.window_w >= 1,
                  what + "window " + dims(p.window_h, p.window_w) + " must be >= 1");
  PARALAB_REQUIRE(p.stride_h >= 1 && p.stride_w >= 1,
                  what + "stride " + dims(p.stride_h, p.stride_w) + " must be >= 1");
  PARALAB_REQUIRE(
      p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.window_h && 2 * p.pad_w <= p.window_w,
      what + "padding " + dims(p.pad_h, p.pad_w) + " must be >= 0 and at most half the window " +
          dims(p.window_h, p.window_w));
}

Shape Pool2d::output_shape(const Shape& x, const Pool2dParams& p) {
  check_params(p);
  const std::string what = std::string("pool2d (") + pool_mode_name(p.mode) + "): ";
  PARALAB_REQUIRE(x.size() == 4 && x[0] >= 1 && x[1] >= 1,
                  what + "x " + shape_string(x) + " must be 4-D and not empty");
  PARALAB_REQUIRE(p.window_h <= x[2] + 2 * p.pad_h && p.window_w <= x[3] + 2 * p.pad_w,
                  what + "window " + dims(p.window_h, p.window_w) + " larger than the input " +
                      dims(x[2], x[3]) + " padded by " + dims(p.pad_h, p.pad_w));
  return {x[0], x[1], (x[2] + 2 * p.pad_h - p.window_h) / p.stride_h + 1,
          (x[3] + 2 * p.pad_w - p.window_w) / p.stride_w + 1};
}

void Pool2d::check_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  const Shape expect = output_shape(x.shape(), p);
  PARALAB_REQUIRE(y.shape() == expect, std::string("pool2d (") + pool_mode_name(p.mode) +
                                           ") forward: y is " + shape_string(y.shape()) +
                                           ", expected " + shape_string(expect));
}

void Pool2d::check_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p) {
  const Shape expect = output_shape(dx.shape(), p);
  PARALAB_REQUIRE(dy.shape() == expect, std::string("pool2d (") + pool_mode_name(p.mode) +
                                            ") backward: dy is " + shape_string(dy.shape()) +
                                            ", expected " + shape_string(expect) + " for dx " +
                                            shape_string(dx.shape()));
}

void Dropout::check_forward(const Tensor& x, const Tensor& y, float p) {
  // Written so that NaN fails too.
  PARALAB_REQUIRE(p >= 0.0f && p < 1.0f,
                  "dropout: p = " + std::to_string(p) + " must be in [0, 1)");
  PARALAB_REQUIRE(x.ndim() >= 1 && x.dim(0) >= 1 && y.shape() == x.shape(),
                  "dropout forward: x " + shape_string(x.shape()) + " and y " +
                      shape_string(y.shape()) + " must have the same, non-empty shape");
}

ResizeMode resize_mode_from_name(const std::string& name) {
  if (name == "nearest") return ResizeMode::Nearest;
  if (name == "bilinear") return ResizeMode::Bilinear;
  throw Error("resize: unknown mode \"" + name + "\" (known: nearest, bilinear)");
}

const char* resize_mode_name(ResizeMode mode) {
  return mode == ResizeMode::Nearest ? "nearest" : "bilinear";
}

void Resize::check_forward(const Tensor& x, const Tensor& y) {
  PARALAB_REQUIRE(x.ndim() == 4 && y.ndim() == 4 && x.dim(0) == y.dim(0) && x.dim(1) == y.dim(1),
                  "resize: x " + shape_string(x.shape()) + " and y " + shape_string(y.shape()) +
                      " must be 4-D with the same N and C");
  PARALAB_REQUIRE(x.numel() >= 1 && y.numel() >= 1, "resize: x " + shape_string(x.shape()) +
                                                        " and y " + shape_string(y.shape()) +
                                                        " must not be empty");
}

}  // namespace paralab
