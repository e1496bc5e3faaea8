// Test main: the same BLAS kernel selection as the tidal command, then GoogleTest.
#include "core/blas_kernels.h"

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  tidal::select_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
