# CUDA detection, in two independent parts:
#  - DDPD_HAVE_CUDA_KERNELS: a CUDA compiler was found (nvcc on PATH, CUDACXX, or
#    /usr/local/cuda). kernels/cuda then builds; it needs only the CUDA runtime, so CI compiles
#    it on machines without a GPU or a CUDA LibTorch.
#  - DDPD_WITH_CUDA: the LibTorch found is a CUDA build (TorchConfig sets TORCH_CUDA_LIBRARIES).
#    The training core then builds its CUDA path: ProcessGroupNCCL, one GPU per local rank,
#    CUDA-event timelines, caching-allocator statistics and the kernels as an autograd op.
# DDPD_CUDA_ARCHITECTURES (default 90, Hopper) picks the kernels' targets.
option(DDPD_BUILD_CUDA_KERNELS "Build kernels/cuda when a CUDA compiler is found" ON)
set(DDPD_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures for kernels/cuda")

set(DDPD_HAVE_CUDA_KERNELS OFF)
if(DDPD_BUILD_CUDA_KERNELS)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${DDPD_CUDA_ARCHITECTURES})
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(DDPD_HAVE_CUDA_KERNELS ON)
    message(STATUS "kernels/cuda: building for sm_${DDPD_CUDA_ARCHITECTURES} with ${CMAKE_CUDA_COMPILER}")
  else()
    message(STATUS "kernels/cuda: no CUDA compiler found; CUDA kernels not built")
  endif()
endif()

set(DDPD_WITH_CUDA OFF)
if(TORCH_CUDA_LIBRARIES)
  if(NOT DDPD_HAVE_CUDA_KERNELS)
    message(FATAL_ERROR "a CUDA LibTorch was found but no CUDA compiler: set CUDACXX to nvcc")
  endif()
  set(DDPD_WITH_CUDA ON)
  message(STATUS "training core: CUDA build (NCCL, CUDA events, allocator statistics)")
else()
  message(STATUS "training core: CPU build (LibTorch ${Torch_VERSION} has no CUDA)")
endif()

# Without a CUDA LibTorch, the core's CUDA sources are still compiled (not linked) against this
# LibTorch's headers, so CI notices when they stop compiling. Debian's libtorch-dev ships the
# c10/cuda and c10d NCCL headers but not one generated header; a stand-in is written here.
set(DDPD_CHECK_CUDA_SOURCES OFF)
if(DDPD_HAVE_CUDA_KERNELS AND NOT DDPD_WITH_CUDA)
  find_path(DDPD_C10_CUDA_HEADERS c10/cuda/CUDAMacros.h PATHS ${TORCH_INCLUDE_DIRS})
  find_path(DDPD_NCCL_HEADER nccl.h PATHS ${CUDAToolkit_INCLUDE_DIRS})
  if(DDPD_C10_CUDA_HEADERS AND DDPD_NCCL_HEADER)
    set(DDPD_CUDA_SHIM_DIR ${CMAKE_BINARY_DIR}/cuda_header_shim)
    file(WRITE ${DDPD_CUDA_SHIM_DIR}/c10/cuda/impl/cuda_cmake_macros.h
         "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    set(DDPD_CHECK_CUDA_SOURCES ON)
    message(STATUS "training core: CUDA sources compile-checked against LibTorch ${Torch_VERSION} headers")
  endif()
endif()
