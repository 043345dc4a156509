# LibTorch's headers, precompiled once per build (issue 38: <torch/torch.h> alone is 20.9 s of CPU
# per file; with it precompiled core/src/train/trainer.cpp takes 15.4 s instead of 34.8).
# ddpd_torch_pch owns the precompiled header; the kernels, the core, ddpd-train and the LibTorch
# tests reuse it (REUSE_FROM), so it is compiled once, not once per target. GCC uses it only with
# the flags it was made with (-Winvalid-pch says when not), which is why a file with flags of its
# own (fused_adamw_cpu.cpp's -fno-math-errno) skips it, and ddpd-worker does not use it. The CUDA
# build's few CUDA files (their defines differ) share ddpd_torch_cuda_pch.
option(DDPD_PRECOMPILE_HEADERS "Precompile LibTorch's headers once for every LibTorch target" ON)

if(DDPD_PRECOMPILE_HEADERS)
  add_library(ddpd_torch_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/torch_pch.cpp)
  target_link_libraries(ddpd_torch_pch PRIVATE ddpd_torch)
  target_compile_options(ddpd_torch_pch PRIVATE -Wall -Wextra -Wno-unused-parameter)
  set(ddpd_torch_pch_headers
    <torch/torch.h>
    <torch/csrc/distributed/c10d/Backend.hpp>
    <torch/csrc/distributed/c10d/PrefixStore.hpp>
    <torch/csrc/distributed/c10d/Store.hpp>
    <torch/csrc/distributed/c10d/TCPStore.hpp>)
  target_precompile_headers(ddpd_torch_pch PRIVATE ${ddpd_torch_pch_headers})
  if(DDPD_WITH_CUDA)
    add_library(ddpd_torch_cuda_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/torch_pch.cpp)
    target_link_libraries(ddpd_torch_cuda_pch PRIVATE ddpd_torch_cuda)
    target_compile_options(ddpd_torch_cuda_pch PRIVATE -Wall -Wextra -Wno-unused-parameter)
    target_precompile_headers(ddpd_torch_cuda_pch PRIVATE ${ddpd_torch_pch_headers})
  endif()
endif()

# ddpd_use_torch_pch(TARGET [CUDA] [SKIP file...]): TARGET's files start with the precompiled
# LibTorch headers (with CUDA: those made with ddpd_torch_cuda's defines), except the SKIP files
# (flags of their own, or no LibTorch in them: loading the header costs them more than it saves).
function(ddpd_use_torch_pch target)
  if(NOT DDPD_PRECOMPILE_HEADERS)
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 1 arg "CUDA" "" "SKIP")
  if(arg_CUDA)
    target_precompile_headers(${target} REUSE_FROM ddpd_torch_cuda_pch)
  else()
    target_precompile_headers(${target} REUSE_FROM ddpd_torch_pch)
  endif()
  if(arg_SKIP)
    set_source_files_properties(${arg_SKIP} TARGET_DIRECTORY ${target}
                                PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()
