// Makes OpenBLAS use the kernels this CPU can run. Debian's OpenBLAS (DYNAMIC_ARCH) picks its
// kernels by CPU model when it loads; a model newer than the library (Emerald Rapids under
// OpenBLAS 0.3.21, say) falls back to generic SSE3 "Prescott" kernels, about 5x slower. The
// choice can only be overridden by OPENBLAS_CORETYPE before the library loads, so
// select_blas_kernels sets it from the CPU's features and re-executes the program once.
#pragma once

namespace tidal {

// Call first thing in main(). Returns only when no re-execution was needed (or it failed, in
// which case the program runs on with the library's own choice). TIDAL_KEEP_BLAS_KERNELS=1
// turns it off.
void select_blas_kernels(char** argv);
// The kernels select_blas_kernels would choose ("SkylakeX", "Haswell") when the library fell
// back to generic ones and nothing says to keep them; else null. For a process that cannot
// re-execute (a Python interpreter): it can only tell its user to set OPENBLAS_CORETYPE.
const char* better_blas_kernels();

// The kernel set OpenBLAS is using ("SkylakeX", "Haswell", ...).
const char* blas_kernel_name();

}  // namespace tidal
