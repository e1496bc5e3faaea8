# oneDNN (Debian's libdnnl-dev, the OpenMP build): bf16 GEMMs on the CPU's bf16 instructions and
# faster fp32 ones (ops/cpu/onednn_matmul.h). Optional: without it OpenBLAS runs every GEMM.
find_path(ONEDNN_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(ONEDNN_LIBRARY dnnl)
if(ONEDNN_INCLUDE_DIR AND ONEDNN_LIBRARY)
  set(_tidal_onednn_default ON)
else()
  set(_tidal_onednn_default OFF)
endif()
option(TIDAL_ONEDNN "CPU GEMMs through oneDNN (bf16 on the CPU's bf16 instructions); OFF: OpenBLAS only"
       ${_tidal_onednn_default})
if(TIDAL_ONEDNN)
  if(NOT ONEDNN_INCLUDE_DIR OR NOT ONEDNN_LIBRARY)
    message(FATAL_ERROR "TIDAL_ONEDNN=ON but oneDNN was not found: run scripts/setup.sh (it installs libdnnl-dev) "
                        "or configure with -DTIDAL_ONEDNN=OFF")
  endif()
  add_library(tidal_onednn INTERFACE)
  target_include_directories(tidal_onednn INTERFACE ${ONEDNN_INCLUDE_DIR})
  target_link_libraries(tidal_onednn INTERFACE ${ONEDNN_LIBRARY})
  target_compile_definitions(tidal_onednn INTERFACE TIDAL_ONEDNN=1)
  message(STATUS "oneDNN: ${ONEDNN_LIBRARY}")
else()
  message(STATUS "oneDNN: off (OpenBLAS runs every CPU GEMM)")
endif()
