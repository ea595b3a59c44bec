#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"

namespace paralab::cpu {

Staged::Staged(CpuDevice& device, const dnnl::memory::desc& user, const dnnl::memory::desc& prim)
    : device_(&device) {
  PARALAB_DNNL("staging", {
    user_ = dnnl::memory(user, device.engine(), DNNL_MEMORY_NONE);
    staged_ = user != prim;
    if (staged_) {
      prim_ = dnnl::memory(prim, device.engine());
      to_prim_ = dnnl::reorder(user_, prim_);
      to_user_ = dnnl::reorder(prim_, user_);
    }
  });
}

dnnl::memory Staged::in(const void* user_ptr) {
  user_.set_data_handle(const_cast<void*>(user_ptr));
  if (!staged_) return user_;
  PARALAB_DNNL("reorder", to_prim_.execute(device_->stream(), user_, prim_));
  return prim_;
}

dnnl::memory Staged::out(void* user_ptr) {
  user_.set_data_handle(user_ptr);
  return staged_ ? prim_ : user_;
}

void Staged::finish() {
  if (staged_) PARALAB_DNNL("reorder", to_user_.execute(device_->stream(), prim_, user_));
}

dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims) {
  using tag = dnnl::memory::format_tag;
  static const tag tags[] = {tag::a, tag::ab, tag::abc, tag::abcd};
  return {dims, dnnl::memory::data_type::f32, tags[dims.size() - 1]};
}

dnnl::memory plain_memory(CpuDevice& device, const Tensor& t, const dnnl::memory::dims& dims) {
  dnnl::memory m;
  PARALAB_DNNL("memory", m = dnnl::memory(plain_desc(dims), device.engine(), t.raw()));
  return m;
}

}  // namespace paralab::cpu
