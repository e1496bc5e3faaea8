# cuDNN's fused attention (ops/cuda/cudnn_attention.h), in CUDA builds that find cudnn-frontend's
# headers (scripts/cudnn-frontend.sh installs them from PyPI) and cuDNN 9's cudnn.h. libcudnn is
# not linked: the frontend loads libcudnn.so.9 at run time, so the binary starts where cuDNN is
# absent and attention runs on tidal's own kernels there. OFF, or either header missing: own
# kernels only (train.attention = "cudnn" then says how to rebuild).
option(TIDAL_CUDNN "run attention through cuDNN where its headers are found (CUDA builds)" ON)
if(DEFINED ENV{TIDAL_CUDNN_FRONTEND_DIR})
  set(_tidal_cudnn_fe_dir "$ENV{TIDAL_CUDNN_FRONTEND_DIR}")
else()
  set(_tidal_cudnn_fe_dir "$ENV{HOME}/.cache/tidal/cudnn-frontend")
endif()
set(TIDAL_CUDNN_FRONTEND_DIR "${_tidal_cudnn_fe_dir}" CACHE PATH "where cudnn-frontend's include/ is")
set(TIDAL_CUDNN_FOUND OFF)
if(TIDAL_CUDA AND TIDAL_CUDNN)
  find_path(TIDAL_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/local/include)
  if(NOT EXISTS "${TIDAL_CUDNN_FRONTEND_DIR}/include/cudnn_frontend.h")
    message(STATUS "cuDNN attention: off (no cudnn-frontend headers in ${TIDAL_CUDNN_FRONTEND_DIR}: "
                   "scripts/cudnn-frontend.sh installs them)")
  elseif(NOT TIDAL_CUDNN_INCLUDE_DIR)
    message(STATUS "cuDNN attention: off (no cudnn.h: install cuDNN 9's headers)")
  else()
    set(TIDAL_CUDNN_FOUND ON)
    message(STATUS "cuDNN attention: on (cudnn-frontend ${TIDAL_CUDNN_FRONTEND_DIR}, cudnn.h in "
                   "${TIDAL_CUDNN_INCLUDE_DIR}; libcudnn.so.9 loaded at run time)")
  endif()
endif()
