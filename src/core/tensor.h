// Tensor: shape + strides + dtype + device + a pointer into storage it may not own. Views into
// a chunk payload, a pinned buffer or a workspace are first-class: `Tensor::view_of` wraps
// foreign memory without owning it, `slice` and `reshape` share the storage of their source.
#pragma once

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

#include <cstddef>
#include <memory>
#include <string>

namespace tidal {

// Bytes obtained from an allocator, returned to it on destruction.
class Storage {
 public:
  Storage(Allocator& allocator, std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Allocator& allocator() const { return allocator_; }

 private:
  Allocator& allocator_;
  std::size_t bytes_;
  void* data_;
};

class Tensor;
// Whether t's values exist to be read or written (every tensor's but a meta one's: core/device.h).
bool has_values(const Tensor& t);

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Allocator& alloc = default_allocator());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Allocator& alloc = default_allocator());
  static Tensor full(const Shape& shape, float value, Allocator& alloc = default_allocator());
  // A contiguous view of memory owned by someone else (a chunk, a buffer); never frees it.
  static Tensor view_of(void* data, const Shape& shape, DType dtype, Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr || data_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return shape_.size(); }
  std::int64_t dim(int i) const { return shape_.dim(i); }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t nbytes() const { return std::size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;
  bool owns_storage() const { return storage_ != nullptr; }
  // No other tensor shares its storage: its last reader may write over it (a loss writes the
  // logits' gradient over the logits once nothing else holds them).
  bool unshared() const { return storage_ != nullptr && storage_.use_count() == 1; }
  // The allocator its storage came from (null for a view of someone else's memory).
  Allocator* allocator() const { return storage_ ? &storage_->allocator() : nullptr; }

  void* raw() const { return data_; }
  template <class T>
  T* data() const {
    TIDAL_ASSERT(dtype_of<T>() == dtype_, "tensor holds {}, accessed as {}", dtype_name(dtype_),
                 dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_);
  }

  // Same storage, new shape (contiguous tensors only); one extent may be -1.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) of dimension `dim`; shares storage.
  Tensor slice(int dim, std::int64_t begin, std::int64_t end) const;
  // A view with dimensions a and b swapped (strided; copy_from or clone makes it contiguous).
  Tensor transpose(int a, int b) const;

  void zero_();
  void fill_(float value);
  void copy_from(const Tensor& src);  // same shape and dtype (ops::cast converts); either side may be strided
  Tensor clone(Allocator& alloc = default_allocator()) const;
  float item() const;  // the single element of a one-element fp32 tensor

  std::string str() const;  // "f32[3, 37, 72]"

 private:
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  Shape shape_;
  Shape strides_;  // in elements
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
};

Shape contiguous_strides(const Shape& shape);

// For host loops over tensors that may live on a GPU: t itself when the CPU can reach it, else a
// host tensor of its shape and dtype, holding t's values when `copy` (complete on return).
Tensor on_host(const Tensor& t, bool copy = true);
// A host tensor's values into t (nothing when `host` is t itself, as on_host gives on the CPU).
void from_host(Tensor& t, const Tensor& host);
// Where such a loop keeps tensors of its own beside `like`: `otherwise` (the default: the step's
// pool) when like is in host memory, else the host's allocator.
Allocator& host_side(const Tensor& like, Allocator& otherwise = default_allocator());

}  // namespace tidal
