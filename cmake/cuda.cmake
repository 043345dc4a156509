# The CUDA build (DDPD_WITH_CUDA): nvcc for kernels/cuda, for DDPD_CUDA_ARCHITECTURES (default
# sm_80 and sm_90), and the toolkit's headers. The same build tree keeps every CPU target and adds
# CUDA variants of the binaries in cuda/bin (ddpd-worker, ddpd-train, the CUDA tests), which share
# the CPU binaries' objects and add the CUDA LibTorch (torch_cuda, c10_cuda, the wheel's NCCL,
# cmake/torch.cmake) and the core's CUDA path:
# ProcessGroupNCCL, one GPU per local rank, CUDA-event timelines, caching-allocator statistics
# and the FlashAttention-2 kernels as an autograd op. Nothing here needs a GPU: CI compiles and
# links it on machines without one.
set(DDPD_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures for kernels/cuda")

# Where the CUDA variants of the binaries land (the CPU ones are in bin/, under the same names).
set(DDPD_CUDA_BIN_DIR ${CMAKE_BINARY_DIR}/cuda/bin)

# ddpd_cuda_binary(TARGET): TARGET, a CUDA build's executable, lands in DDPD_CUDA_BIN_DIR.
function(ddpd_cuda_binary target)
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${DDPD_CUDA_BIN_DIR})
endfunction()

# ddpd_add_cuda_variant(NAME SOURCE... LINK LIBRARY...): in a CUDA build, the executable NAME-cuda,
# written as DDPD_CUDA_BIN_DIR/NAME, from SOURCE (the CPU binary's objects) linked with LIBRARY
# (ddpd_core_cuda where the CPU binary has ddpd_core). Nothing in a CPU build.
function(ddpd_add_cuda_variant name)
  if(NOT DDPD_WITH_CUDA)
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "LINK")
  add_executable(${name}-cuda ${arg_UNPARSED_ARGUMENTS})
  target_link_libraries(${name}-cuda PRIVATE ${arg_LINK})
  set_target_properties(${name}-cuda PROPERTIES OUTPUT_NAME ${name})
  ddpd_cuda_binary(${name}-cuda)
endfunction()

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
