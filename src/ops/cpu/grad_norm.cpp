#include "ops/grad_norm.h"

#include "ops/cpu/typed.h"

#include <algorithm>
#include <vector>

namespace tidal::ops {

namespace cpu {
namespace {

// Fixed blocks summed in order: the same value whatever the thread count or timing, so clipping
// (and hence training) is bitwise reproducible.
constexpr std::int64_t kBlock = 1 << 14;

std::int64_t blocks_of(const Tensor& x) { return (x.numel() + kBlock - 1) / kBlock; }

// The sum of squares of x's elements [b kBlock, (b + 1) kBlock), in a fixed order: kLanes
// running sums (element i in lane i mod kLanes), then the lanes in order. Four vectors of
// doubles, so the adds do not wait on each other (one vector ran at half the memory's rate).
constexpr std::int64_t kLanes = 32;

double block_sum(const Tensor& x, std::int64_t b) {
  double lanes[kLanes] = {};
  with_float_type(x.dtype(), [&]<class T>() {
    const T* p = x.data<T>();
    const std::int64_t begin = b * kBlock, end = std::min(x.numel(), begin + kBlock);
    std::int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
#pragma omp simd
      for (std::int64_t j = 0; j < kLanes; ++j) {
        const double v = to_float(p[i + j]);
        lanes[j] += v * v;
      }
    }
    for (std::int64_t j = 0; i < end; ++i, ++j) {
      const double v = to_float(p[i]);
      lanes[j] += v * v;
    }
  });
  double s = 0.0;
  for (double lane : lanes) s += lane;
  return s;
}

}  // namespace

std::vector<double> sums_of_squares(std::span<const Tensor> xs) {
  // Every tensor's blocks in one parallel region (a model's gradients are many small tensors,
  // and a region each cost more than their sums), each tensor's blocks then summed in order.
  std::vector<std::int64_t> first{0};  // each tensor's first block among all
  for (const Tensor& x : xs) {
    expect_cpu_contiguous(x, "sum_of_squares x");
    first.push_back(first.back() + blocks_of(x));
  }
  const std::int64_t blocks = first.back();
  std::vector<double> partial(std::size_t(blocks), 0.0), sums(xs.size(), 0.0);
  if (blocks == 0) return sums;
  std::size_t owner = 0;  // advanced by each thread's own copy over its contiguous blocks
#pragma omp parallel for schedule(static) firstprivate(owner)
  for (std::int64_t b = 0; b < blocks; ++b) {
    while (first[owner + 1] <= b) ++owner;
    partial[std::size_t(b)] = block_sum(xs[owner], b - first[owner]);
  }
  for (std::size_t i = 0; i < xs.size(); ++i)
    for (std::int64_t b = first[i]; b < first[i + 1]; ++b) sums[i] += partial[std::size_t(b)];
  return sums;
}

double sum_of_squares(const Tensor& x) { return sums_of_squares(std::span<const Tensor>(&x, 1))[0]; }

}  // namespace cpu

}  // namespace tidal::ops
