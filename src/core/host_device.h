// Marks a function that kernels call as well as host code (Philox, so the GPU draws the same
// dropout masks and initial weights as the CPU). Empty outside nvcc.
#pragma once

#ifdef __CUDACC__
#define TIDAL_HOST_DEVICE __host__ __device__
#else
#define TIDAL_HOST_DEVICE
#endif
