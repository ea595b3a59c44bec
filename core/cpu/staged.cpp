#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/error.h"

namespace paralab::cpu {

dnnl::primitive_attr own_scratchpad(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Primitive::Primitive(const dnnl::primitive_desc_base& pd) : primitive_(pd.get()) {
  PARALAB_REQUIRE(pd.get_primitive_attr().get_scratchpad_mode() == dnnl::scratchpad_mode::user,
                  "oneDNN primitive made without own_scratchpad()");
  const dnnl::memory::desc scratch = pd.scratchpad_desc();
  if (scratch.get_size() > 0) scratch_ = dnnl::memory(scratch, pd.get_engine());
}

void Primitive::execute(dnnl::stream& stream, std::unordered_map<int, dnnl::memory> args) const {
  if (scratch_) args.emplace(DNNL_ARG_SCRATCHPAD, scratch_);
  primitive_.execute(stream, args);
}

Staged::Staged(CpuDevice& device, const dnnl::memory::desc& user, const dnnl::memory::desc& prim)
    : device_(&device) {
  PARALAB_DNNL("staging", {
    user_ = dnnl::memory(user, device.engine(), DNNL_MEMORY_NONE);
    staged_ = user != prim;
    if (staged_) {
      prim_ = dnnl::memory(prim, device.engine());
      to_prim_ = Primitive(dnnl::reorder::primitive_desc(user_, prim_, own_scratchpad()));
      to_user_ = Primitive(dnnl::reorder::primitive_desc(prim_, user_, own_scratchpad()));
    }
  });
}

dnnl::memory Staged::in(const void* user_ptr) {
  user_.set_data_handle(const_cast<void*>(user_ptr));
  if (!staged_) return user_;
  PARALAB_DNNL("reorder",
               to_prim_.execute(device_->stream(), {{DNNL_ARG_FROM, user_}, {DNNL_ARG_TO, prim_}}));
  return prim_;
}

dnnl::memory Staged::out(void* user_ptr) {
  user_.set_data_handle(user_ptr);
  return staged_ ? prim_ : user_;
}

void Staged::finish() {
  if (staged_)
    PARALAB_DNNL("reorder", to_user_.execute(device_->stream(),
                                             {{DNNL_ARG_FROM, prim_}, {DNNL_ARG_TO, user_}}));
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
