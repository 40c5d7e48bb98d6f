// The strided tensor view (tensor_view.h): construction with default strides,
// slicing and selection, element access as float, and printing.

#include "common/tensor_view.h"

#include <fmt/format.h>

namespace vpod {

TensorView::TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  VPOD_CHECK_MSG(rank_ <= max_rank, "tensor rank above TensorView::max_rank");
  int d = 0;
  for (std::int64_t extent : shape) {
    VPOD_CHECK_MSG(extent >= 0, "negative tensor extent");
    shape_[d++] = extent;
  }
  std::int64_t stride = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    strides_[i] = stride;
    stride *= shape_[i];
  }
}

TensorView::TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       std::initializer_list<std::int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  VPOD_CHECK_MSG(rank_ <= max_rank, "tensor rank above TensorView::max_rank");
  VPOD_CHECK_MSG(shape.size() == strides.size(), "shape and strides differ in rank");
  int d = 0;
  for (std::int64_t extent : shape) {
    VPOD_CHECK_MSG(extent >= 0, "negative tensor extent");
    shape_[d++] = extent;
  }
  d = 0;
  for (std::int64_t s : strides) strides_[d++] = s;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::int64_t TensorView::offset_of(std::initializer_list<std::int64_t> index) const {
  VPOD_CHECK_MSG(static_cast<int>(index.size()) == rank_, "index rank differs from tensor rank");
  std::int64_t offset = 0;
  int d = 0;
  for (std::int64_t i : index) {
    VPOD_CHECK_MSG(i >= 0 && i < shape_[d], "tensor index out of bounds");
    offset += i * strides_[d];
    ++d;
  }
  return offset;
}

TensorView TensorView::select(int dim, std::int64_t index) const {
  check_dim(dim);
  VPOD_CHECK_MSG(index >= 0 && index < shape_[dim], "select index out of bounds");
  TensorView out = *this;
  out.data_ = static_cast<char*>(data_) +
              index * strides_[dim] * static_cast<std::int64_t>(dtype_size(dtype_));
  for (int i = dim; i + 1 < rank_; ++i) {
    out.shape_[i] = shape_[i + 1];
    out.strides_[i] = strides_[i + 1];
  }
  out.rank_ = rank_ - 1;
  return out;
}

TensorView TensorView::slice(int dim, std::int64_t start, std::int64_t length) const {
  check_dim(dim);
  VPOD_CHECK_MSG(start >= 0 && length >= 0 && start + length <= shape_[dim], "slice out of bounds");
  TensorView out = *this;
  out.data_ = static_cast<char*>(data_) +
              start * strides_[dim] * static_cast<std::int64_t>(dtype_size(dtype_));
  out.shape_[dim] = length;
  return out;
}

float TensorView::get(std::initializer_list<std::int64_t> index) const {
  VPOD_CHECK_MSG(device_ == Device::cpu, "TensorView::get on a device tensor");
  return load_as_float(data_, dtype_, static_cast<std::size_t>(offset_of(index)));
}

void TensorView::set(std::initializer_list<std::int64_t> index, float value) const {
  VPOD_CHECK_MSG(device_ == Device::cpu, "TensorView::set on a device tensor");
  store_from_float(data_, dtype_, static_cast<std::size_t>(offset_of(index)), value);
}

std::string TensorView::to_string() const {
  std::string shape;
  std::string strides;
  for (int i = 0; i < rank_; ++i) {
    shape += fmt::format("{}{}", i ? ", " : "", shape_[i]);
    strides += fmt::format("{}{}", i ? ", " : "", strides_[i]);
  }
  return fmt::format("{}[{}] strides [{}] on {}", dtype_name(dtype_), shape, strides,
                     device_name(device_));
}

}  // namespace vpod
