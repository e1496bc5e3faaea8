# OpenBLAS, the OpenMP build: our kernels parallelise with OpenMP and call sgemm from inside
# parallel regions (one GEMM per attention head); the OpenMP build of OpenBLAS then runs those
# calls single-threaded instead of oversubscribing the cores with its own pthread pool.
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/openblas
  NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/setup.sh "
                      "(it installs libopenblas-openmp-dev)")
endif()
add_library(tidal_openblas INTERFACE)
target_include_directories(tidal_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(tidal_openblas INTERFACE ${OPENBLAS_LIBRARY})
get_filename_component(_openblas_dir ${OPENBLAS_LIBRARY} DIRECTORY)
# The runtime linker would otherwise pick whichever libopenblas.so.0 the system alternative names.
set(CMAKE_BUILD_RPATH ${_openblas_dir} ${CMAKE_BUILD_RPATH})
set(CMAKE_INSTALL_RPATH ${_openblas_dir} ${CMAKE_INSTALL_RPATH})
