#include "core/ops.h"

#include "core/error.h"

namespace paralab {

Shape ConvReluPool::output_shape(const Tensor& x, const Tensor& w) {
  PARALAB_REQUIRE(x.ndim() == 4 && w.ndim() == 4 && x.dim(1) == w.dim(1) &&
                      x.dim(2) - w.dim(2) + 1 >= 2 && x.dim(3) - w.dim(3) + 1 >= 2,
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
                                  const Tensor* dx) {
  const Shape expect = output_shape(x, w);
  PARALAB_REQUIRE(dy.shape() == expect, "conv_relu_pool backward: dy is " +
                                            shape_string(dy.shape()) + ", expected " +
                                            shape_string(expect));
  PARALAB_REQUIRE(!dx || dx->shape() == x.shape(), "conv_relu_pool backward: dx " +
                                                       shape_string(dx ? dx->shape() : Shape{}) +
                                                       " != x " + shape_string(x.shape()));
}

}  // namespace paralab
