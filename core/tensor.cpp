#include "core/tensor.h"

#include <cstring>

#include "core/device.h"
#include "core/error.h"

namespace paralab {

struct Tensor::Storage {
  Device* device;
  void* ptr;
  std::size_t bytes;
  bool owned = true;  // false: unowned()'s, which frees nothing
  Storage(Device& d, std::size_t n) : device(&d), ptr(n ? d.allocate(n) : nullptr), bytes(n) {}
  Storage(Device& d, void* p, std::size_t n) : device(&d), ptr(p), bytes(n), owned(false) {}
  ~Storage() {
    if (ptr && owned) device->deallocate(ptr);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

std::size_t dtype_size(DType) { return 4; }

std::string shape_string(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::empty(Device& device, Shape shape, DType dtype) {
  for (int64_t d : shape)
    PARALAB_REQUIRE(d >= 0, "tensor: negative dimension in shape " + shape_string(shape));
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(device, t.bytes());
  return t;
}

Tensor Tensor::zeros(Device& device, Shape shape, DType dtype) {
  Tensor t = empty(device, std::move(shape), dtype);
  t.fill_zero();
  return t;
}

Tensor Tensor::from_host(Device& device, Shape shape, std::span<const float> values) {
  Tensor t = empty(device, std::move(shape), DType::F32);
  t.copy_from_host(values);
  return t;
}

Tensor Tensor::from_host(Device& device, Shape shape, std::span<const int32_t> values) {
  Tensor t = empty(device, std::move(shape), DType::I32);
  t.copy_from_host(values);
  return t;
}

Tensor Tensor::view(int64_t offset, Shape shape) const {
  PARALAB_REQUIRE(defined(), "tensor: view of an undefined tensor");
  PARALAB_REQUIRE(offset >= 0 && offset + shape_numel(shape) <= numel(),
                  "tensor: view " + shape_string(shape) + " at offset " + std::to_string(offset) +
                      " exceeds " + shape_string(shape_));
  Tensor t = *this;
  t.offset_ = offset_ + offset;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  PARALAB_REQUIRE(shape_numel(shape) == numel(),
                  "tensor: cannot reshape " + shape_string(shape_) + " to " + shape_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::unowned() const {
  Tensor t = *this;
  if (defined())
    t.storage_ = std::make_shared<Storage>(*storage_->device, storage_->ptr, storage_->bytes);
  return t;
}

Device& Tensor::device() const {
  PARALAB_REQUIRE(defined(), "tensor: device of an undefined tensor");
  return *storage_->device;
}

void* Tensor::raw() const {
  if (!storage_ || !storage_->ptr) return nullptr;
  return static_cast<char*>(storage_->ptr) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

float* Tensor::f32() const {
  PARALAB_REQUIRE(dtype_ == DType::F32, "tensor: f32() on an int32 tensor");
  return static_cast<float*>(raw());
}

int32_t* Tensor::i32() const {
  PARALAB_REQUIRE(dtype_ == DType::I32, "tensor: i32() on a float32 tensor");
  return static_cast<int32_t*>(raw());
}

std::vector<float> Tensor::to_host_f32() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  if (!out.empty()) device().copy_to_host(out.data(), f32(), bytes());
  return out;
}

std::vector<int32_t> Tensor::to_host_i32() const {
  std::vector<int32_t> out(static_cast<std::size_t>(numel()));
  if (!out.empty()) device().copy_to_host(out.data(), i32(), bytes());
  return out;
}

void Tensor::copy_from_host(std::span<const float> values) {
  PARALAB_REQUIRE(
      static_cast<int64_t>(values.size()) == numel(),
      "tensor: copy of " + std::to_string(values.size()) + " values into " + shape_string(shape_));
  if (!values.empty()) device().copy_from_host(f32(), values.data(), bytes());
}

void Tensor::copy_from_host(std::span<const int32_t> values) {
  PARALAB_REQUIRE(
      static_cast<int64_t>(values.size()) == numel(),
      "tensor: copy of " + std::to_string(values.size()) + " values into " + shape_string(shape_));
  if (!values.empty()) device().copy_from_host(i32(), values.data(), bytes());
}

void Tensor::copy_from(const Tensor& other) {
  PARALAB_REQUIRE(
      other.numel() == numel() && other.dtype_ == dtype_,
      "tensor: copy from " + shape_string(other.shape_) + " into " + shape_string(shape_));
  PARALAB_REQUIRE(&other.device() == &device(), "tensor: copy_from across devices");
  if (numel()) device().copy_on_device(raw(), other.raw(), bytes());
}

void Tensor::fill_zero() {
  if (numel()) device().fill_zero(raw(), bytes());
}

}  // namespace paralab
