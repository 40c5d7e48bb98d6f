// A small non-owning strided view: pointer, dtype, shape, strides (in
// elements), and where the memory lives. Views are what subsystems hand each
// other (a KV-cache layer's K, a weight, an activation); ownership stays with
// whoever allocated the memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/check.h"
#include "common/dtype.h"

namespace vpod {

enum class Device : std::uint8_t { cpu, cuda };

inline const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

class TensorView {
 public:
  static constexpr int max_rank = 6;

  TensorView() = default;

  // Contiguous (row-major) view of `shape`.
  TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
             Device device = Device::cpu);
  // Explicit strides, in elements; shape and strides must have the same rank.
  TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
             std::initializer_list<std::int64_t> strides, Device device = Device::cpu);

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int rank() const { return rank_; }
  std::int64_t size(int dim) const { return shape_[check_dim(dim)]; }
  std::int64_t stride(int dim) const { return strides_[check_dim(dim)]; }
  std::int64_t numel() const;
  bool empty() const { return numel() == 0; }
  bool is_contiguous() const;

  // Element offset (in elements) of a multi-index; bounds-checked.
  std::int64_t offset_of(std::initializer_list<std::int64_t> index) const;
  // Typed pointer to one element; T must match the dtype's size.
  template <typename T>
  T* ptr(std::initializer_list<std::int64_t> index) const {
    VPOD_CHECK(sizeof(T) == dtype_size(dtype_));
    return static_cast<T*>(data_) + offset_of(index);
  }

  // The view with dimension `dim` fixed at `index` (rank drops by one).
  TensorView select(int dim, std::int64_t index) const;
  // The view restricted to [start, start + length) along `dim`.
  TensorView slice(int dim, std::int64_t start, std::int64_t length) const;

  // Host-side element access through float (cpu views only).
  float get(std::initializer_list<std::int64_t> index) const;
  void set(std::initializer_list<std::int64_t> index, float value) const;

  // "bf16[4, 128] strides [128, 1] on cpu"
  std::string to_string() const;

 private:
  int check_dim(int dim) const {
    VPOD_CHECK_MSG(dim >= 0 && dim < rank_, "tensor dimension out of range");
    return dim;
  }

  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  int rank_ = 0;
  std::array<std::int64_t, max_rank> shape_{};
  std::array<std::int64_t, max_rank> strides_{};
};

}  // namespace vpod
