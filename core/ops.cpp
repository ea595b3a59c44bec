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

}  // namespace paralab
