// The one tolerance helper of the test suite: |got - ref| <= atol + rtol * |ref| elementwise,
// reporting the worst element (index, both values, and its excess) when it fails. GPU tensors
// are read back to the host first.
#pragma once

#include "core/tensor.h"

#include <gtest/gtest.h>

namespace tidal::testing {

struct Tolerance {
  double atol;
  double rtol;
};

// fp32 against PyTorch's fp32 on the same inputs: differences come from summation order only.
inline constexpr Tolerance kFp32{1e-5, 1e-4};

::testing::AssertionResult all_close(const Tensor& got, const Tensor& ref, Tolerance tol);

}  // namespace tidal::testing
