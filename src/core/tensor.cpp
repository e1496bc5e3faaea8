#include "core/tensor.h"

#include "core/gpu.h"
#include "core/profile.h"

#include <cstring>

namespace tidal {

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(d_[std::size_t(i)]);
  return s + "]";
}

Shape contiguous_strides(const Shape& shape) {
  Shape s = shape;
  std::int64_t stride = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    s[i] = stride;
    stride *= shape[i];
  }
  return s;
}

Storage::Storage(Allocator& allocator, std::size_t bytes)
    : allocator_(allocator), bytes_(bytes), data_(allocator.allocate(bytes)) {}

Storage::~Storage() { allocator_.deallocate(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& alloc) {
  for (auto d : shape) TIDAL_ASSERT(d >= 0, "negative extent in shape {}", shape.str());
  Tensor t;
  t.storage_ = std::make_shared<Storage>(alloc, std::size_t(shape.numel()) * dtype_size(dtype));
  t.data_ = t.storage_->data();
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = alloc.device();
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Allocator& alloc) {
  Tensor t = empty(shape, dtype, alloc);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, Allocator& alloc) {
  Tensor t = empty(shape, DType::f32, alloc);
  t.fill_(value);
  return t;
}

Tensor Tensor::view_of(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

// Row-major with no gaps; a dimension of extent 1 is never stepped along, so its stride does not
// matter (one sample of a batch sliced along positions is contiguous).
bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = shape_.size() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(const Shape& shape) const {
  TIDAL_ASSERT(is_contiguous(), "reshape of a non-contiguous tensor {}", str());
  Shape s = shape;
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TIDAL_ASSERT(infer < 0, "two -1 extents in {}", shape.str());
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) s[infer] = known == 0 ? 0 : numel() / known;
  TIDAL_ASSERT(s.numel() == numel(), "cannot reshape {} to {}", str(), shape.str());
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int dim, std::int64_t begin, std::int64_t end) const {
  const int d = dim < 0 ? dim + ndim() : dim;
  TIDAL_ASSERT(d >= 0 && d < ndim() && 0 <= begin && begin <= end && end <= shape_[d],
               "slice({}, {}, {}) of {}", dim, begin, end, str());
  Tensor t = *this;
  t.shape_[d] = end - begin;
  t.data_ = static_cast<std::byte*>(data_) + std::size_t(begin * strides_[d]) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  TIDAL_ASSERT(a >= 0 && a < ndim() && b >= 0 && b < ndim(), "transpose({}, {}) of {}", a, b, str());
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

void Tensor::zero_() {
  TIDAL_ASSERT(is_contiguous(), "zero_ on non-contiguous {}", str());
  zero_bytes(data_, device_, nbytes());
}

void Tensor::fill_(float value) {
  TIDAL_ASSERT(is_contiguous() && dtype_ == DType::f32, "fill_ on {}", str());
  fill_f32(data<float>(), device_, numel(), value);
}

namespace {

// Copies the block of `shape` from src to dst (element strides), dimension `d` onward. The last
// two dimensions go as one batch of rows when both sides have the last one contiguous (one
// cudaMemcpy2D between devices); otherwise element by element on the host.
void copy_strided(std::byte* dst, const Shape& dst_strides, Device dst_device, const std::byte* src,
                  const Shape& src_strides, Device src_device, const Shape& shape, int d, std::size_t esize) {
  const int last = shape.size() - 1;
  const bool rows_contiguous = dst_strides[last] == 1 && src_strides[last] == 1;
  if (d == last || (d == last - 1 && rows_contiguous)) {
    const bool one_row = d == last;
    const std::size_t rows = one_row ? 1 : std::size_t(shape[d]);
    if (rows_contiguous) {
      const std::size_t row_bytes = std::size_t(shape[last]) * esize;
      copy_rows(dst, one_row ? row_bytes : std::size_t(dst_strides[d]) * esize, dst_device, src,
                one_row ? row_bytes : std::size_t(src_strides[d]) * esize, src_device, row_bytes, rows);
      return;
    }
    TIDAL_ASSERT(dst_device.is_cpu() && src_device.is_cpu(),
                 "a copy to or from a GPU tensor needs the last dimension contiguous on both sides");
    for (std::int64_t i = 0; i < shape[d]; ++i)
      std::memcpy(dst + std::size_t(i * dst_strides[d]) * esize, src + std::size_t(i * src_strides[d]) * esize, esize);
    return;
  }
  for (std::int64_t i = 0; i < shape[d]; ++i) {
    copy_strided(dst + std::size_t(i * dst_strides[d]) * esize, dst_strides, dst_device,
                 src + std::size_t(i * src_strides[d]) * esize, src_strides, src_device, shape, d + 1, esize);
  }
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  const OpTimer timer(OpFamily::copy_cast);
  TIDAL_ASSERT(src.shape() == shape_ && src.dtype() == dtype_, "copy {} into {}", src.str(), str());
  if (numel() == 0 || device_.is_meta() || src.device().is_meta()) return;
  if (is_contiguous() && src.is_contiguous()) {
    copy_bytes(data_, device_, src.raw(), src.device(), nbytes());
  } else {
    copy_strided(static_cast<std::byte*>(data_), strides_, device_, static_cast<const std::byte*>(src.raw()),
                 src.strides(), src.device(), shape_, 0, dtype_size(dtype_));
  }
}

Tensor Tensor::clone(Allocator& alloc) const {
  Tensor t = empty(shape_, dtype_, alloc);
  t.copy_from(*this);
  return t;
}

float Tensor::item() const {
  TIDAL_ASSERT(numel() == 1 && dtype_ == DType::f32, "item() of {}", str());
  float v = 0;
  copy_bytes(&v, Device::cpu(), data_, device_, sizeof v);
  return v;
}

Tensor on_host(const Tensor& t, bool copy) {
  if (!t.defined() || !t.device().is_cuda()) return t;
  return copy ? t.clone(host_allocator()) : Tensor::empty(t.shape(), t.dtype(), host_allocator());
}

void from_host(Tensor& t, const Tensor& host) {
  if (host.raw() != t.raw()) t.copy_from(host);
}

Allocator& host_side(const Tensor& like, Allocator& otherwise) {
  return like.device().is_cuda() ? host_allocator() : otherwise;
}

bool has_values(const Tensor& t) { return !t.device().is_meta(); }

std::string Tensor::str() const { return std::string(dtype_name(dtype_)) + shape_.str(); }

}  // namespace tidal
