# LibTorch >= 2.11, and one target for it: ddpd_torch.
#
# Where from: a LibTorch given by CMAKE_PREFIX_PATH or Torch_DIR wins; else the torch package of
# the project's .venv/ (scripts/setup.sh installs it there): its share/cmake, which is
# torch.utils.cmake_prefix_path. The package is found, not imported: the demo's .venv
# (requirements-demo.txt) has torch without the Python packages `import torch` needs.
# DDPD_PYTHON names another interpreter to ask.
#
# What it links:
#  - the CPU binaries (build/bin: the demo, the tests, the images): c10 and torch_cpu only, so no CUDA library, NCCL or libcuda is NEEDED by our binaries (PyPI's torch_cpu itself
#    needs the wheel's libcudart and libcupti, for its profiler; neither needs a driver or GPU).
#  - CUDA build (DDPD_WITH_CUDA ON): the CPU binaries as above, and beside them (build/cuda/bin)
#    their CUDA variants, which add torch, torch_cuda and c10_cuda, bringing NCCL, cuBLAS and
#    cuDNN from the same wheel.
set(DDPD_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "The Python whose torch package provides LibTorch when CMAKE_PREFIX_PATH does not")

if(NOT Torch_DIR AND EXISTS "${DDPD_PYTHON}")
  execute_process(
    COMMAND "${DDPD_PYTHON}" -c
            "import importlib.util as u, os; print(os.path.join(u.find_spec('torch').submodule_search_locations[0], 'share', 'cmake'))"
    OUTPUT_VARIABLE ddpd_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE ddpd_rc
    ERROR_QUIET)
  if(ddpd_rc EQUAL 0 AND ddpd_torch_prefix)
    list(APPEND CMAKE_PREFIX_PATH "${ddpd_torch_prefix}")
  endif()
endif()

# TorchConfig sets up its CUDA flags from TORCH_CUDA_ARCH_LIST ("8.0;9.0"), ours from
# DDPD_CUDA_ARCHITECTURES ("80;90"): the same list.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST)
  list(TRANSFORM DDPD_CUDA_ARCHITECTURES REPLACE "^([0-9]+)([0-9])$" "\\1.\\2"
       OUTPUT_VARIABLE TORCH_CUDA_ARCH_LIST)
endif()
find_package(Torch 2.11 REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}")

# torch_cpu's interface names protobuf::libprotobuf so that source builds link their protobuf;
# the wheel's is static and internal (only std:: template instantiations are exported in common
# with Debian's libprotobuf: tests/linkage), so nothing of ours needs to link it for torch.
set_property(TARGET torch_cpu PROPERTY INTERFACE_LINK_LIBRARIES c10)

# ddpd_torch: LibTorch's headers and its CPU libraries, what the device-agnostic code (nearly all
# of it) compiles and links against; the CPU binaries link only this. ddpd_torch_cuda (CUDA build)
# adds the CUDA libraries and defines for the few files that are CUDA's: the CPU and CUDA binaries
# then share every other object, compiled once (issue 38: 200 s of the test command's builds).
add_library(ddpd_torch INTERFACE)
target_include_directories(ddpd_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_link_libraries(ddpd_torch INTERFACE torch_cpu c10)
if(DDPD_WITH_CUDA)
  # torch_library: libtorch and libtorch_cuda kept NEEDED (--no-as-needed), as their operator
  # registrations run from static initialisers.
  add_library(ddpd_torch_cuda INTERFACE)
  target_link_libraries(ddpd_torch_cuda INTERFACE torch_library c10_cuda ddpd_torch)
  target_compile_definitions(ddpd_torch_cuda INTERFACE DDPD_WITH_CUDA USE_C10D_NCCL)
endif()
