# The CUDA build (DDPD_WITH_CUDA, build-cuda/): nvcc for kernels/cuda, for DDPD_CUDA_ARCHITECTURES
# (default sm_80 and sm_90), and the toolkit's headers. cmake/torch.cmake then links the CUDA
# LibTorch (torch_cuda, c10_cuda, the wheel's NCCL) and the core builds its CUDA path:
# ProcessGroupNCCL, one GPU per local rank, CUDA-event timelines, caching-allocator statistics
# and the FlashAttention-2 kernels as an autograd op. Nothing here needs a GPU: CI compiles and
# links it on machines without one.
set(DDPD_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures for kernels/cuda")
if(NOT DDPD_WITH_CUDA)
  return()
endif()
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "DDPD_WITH_CUDA needs nvcc: the CUDA toolkit at /usr/local/cuda, or CUDACXX")
endif()
set(CMAKE_CUDA_ARCHITECTURES ${DDPD_CUDA_ARCHITECTURES})
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
message(STATUS "CUDA build: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_${DDPD_CUDA_ARCHITECTURES}")
