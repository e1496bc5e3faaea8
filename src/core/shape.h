// A tensor shape: up to kMaxDims extents stored inline (shapes are made on every op call).
#pragma once

#include "core/error.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tidal {

class Shape {
 public:
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<std::int64_t>& dims) { assign(dims.begin(), dims.end()); }

  int size() const { return n_; }
  std::int64_t operator[](int i) const { return d_[std::size_t(i)]; }
  std::int64_t& operator[](int i) { return d_[std::size_t(i)]; }
  // Extent of dimension i; negative i counts from the end.
  std::int64_t dim(int i) const {
    const int j = i < 0 ? i + n_ : i;
    TIDAL_ASSERT(j >= 0 && j < n_, "dimension {} of a {}-d shape", i, n_);
    return d_[std::size_t(j)];
  }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < n_; ++i) n *= d_[std::size_t(i)];
    return n;
  }
  const std::int64_t* begin() const { return d_.data(); }
  const std::int64_t* end() const { return d_.data() + n_; }
  void push_back(std::int64_t v) {
    TIDAL_ASSERT(n_ < kMaxDims, "more than {} dimensions", kMaxDims);
    d_[std::size_t(n_++)] = v;
  }
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }
  std::string str() const;
  // This shape with the last dimension replaced (a linear layer's output shape).
  Shape with_last(std::int64_t last) const {
    Shape r = *this;
    r.d_[std::size_t(n_ - 1)] = last;
    return r;
  }

  bool operator==(const Shape& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i)
      if (d_[std::size_t(i)] != o.d_[std::size_t(i)]) return false;
    return true;
  }

 private:
  template <class It>
  void assign(It b, It e) {
    for (; b != e; ++b) push_back(*b);
  }
  std::array<std::int64_t, kMaxDims> d_{};
  int n_ = 0;
};

}  // namespace tidal
