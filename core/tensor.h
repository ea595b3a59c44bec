// Tensor: a float32 (or int32, for labels and indices) array in NCHW order owned by a Device.
//
// Storage is shared between a tensor and its views (view() of a flat buffer is how LeNet's eight
// parameter tensors live in one contiguous buffer that collectives can reduce in one call).
// Memory is released through the owning device when the last tensor referring to it goes away.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace paralab {

class Device;

enum class DType { F32, I32 };

std::size_t dtype_size(DType dtype);

using Shape = std::vector<int64_t>;

std::string shape_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised tensor of the given shape on `device`.
  static Tensor empty(Device& device, Shape shape, DType dtype = DType::F32);
  static Tensor zeros(Device& device, Shape shape, DType dtype = DType::F32);
  static Tensor from_host(Device& device, Shape shape, std::span<const float> values);
  static Tensor from_host(Device& device, Shape shape, std::span<const int32_t> values);

  // A tensor sharing this one's storage: `shape` elements starting `offset` elements in.
  Tensor view(int64_t offset, Shape shape) const;
  // Same storage, new shape with the same element count (e.g. flatten (N,50,4,4) to (N,800)).
  Tensor reshaped(Shape shape) const;
  // The same elements without keeping their memory alive: a pointer, as a CUDA graph holds one.
  // For test devices that record work as such a graph does (tests/recording_device.h), so that
  // memory freed while a recorded graph still points to it is seen as such.
  Tensor unowned() const;

  bool defined() const { return storage_ != nullptr; }
  Device& device() const;
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<std::size_t>(i)); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  // Device pointers: dereference them only in that device's code (backend ops, transports).
  void* raw() const;
  float* f32() const;
  int32_t* i32() const;

  std::vector<float> to_host_f32() const;
  std::vector<int32_t> to_host_i32() const;
  void copy_from_host(std::span<const float> values);
  void copy_from_host(std::span<const int32_t> values);
  // Same-device copy of an equally sized tensor.
  void copy_from(const Tensor& other);
  void fill_zero();

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace paralab
