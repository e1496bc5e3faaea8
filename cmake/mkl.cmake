# Intel oneMKL (PyPI's wheel, installed by scripts/mkl.sh): the fp32 CPU GEMMs' fastest library
# (ops/cpu/mkl_blas.h). Not linked: tidal loads it at run time from TIDAL_MKL_DIR (the
# environment's, else this default), so a build without it is the same build, on oneDNN and
# OpenBLAS. OFF: tidal looks for MKL only where TIDAL_MKL_DIR names it at run time.
option(TIDAL_MKL "look for MKL's runtime (scripts/mkl.sh) for the fp32 CPU GEMMs" ON)
if(DEFINED ENV{TIDAL_MKL_DIR})
  set(_tidal_mkl_dir "$ENV{TIDAL_MKL_DIR}")
else()
  set(_tidal_mkl_dir "$ENV{HOME}/.cache/tidal/mkl")
endif()
set(TIDAL_MKL_DIR "${_tidal_mkl_dir}" CACHE PATH "where tidal looks for MKL's libmkl_rt.so.3 at run time")
if(TIDAL_MKL)
  if(EXISTS "${TIDAL_MKL_DIR}/libmkl_rt.so.3")
    message(STATUS "MKL: ${TIDAL_MKL_DIR} (loaded at run time)")
  else()
    message(STATUS "MKL: not in ${TIDAL_MKL_DIR} (scripts/mkl.sh installs it; until then oneDNN / OpenBLAS run fp32)")
  endif()
else()
  message(STATUS "MKL: off (TIDAL_MKL=OFF)")
endif()
