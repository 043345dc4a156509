"""Builds ddpd_torch._C against the installed torch (2.11.x) with torch's cpp_extension.

Build in the repository, not from an sdist: the module compiles ddpd's shared-memory transport
from core/ (CORE_SOURCES), one folder up. Install with
    .venv/bin/pip install --no-build-isolation ./torch_backend
(--no-build-isolation: build against the torch already installed, not a fresh download).
"""

from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# The files of core's shm transport this module needs, as CMakeLists.txt builds them
# (tests/test_sources.py checks that each exists and that CMake still lists it).
CORE_SOURCES = [
    "core/src/shm/segment.cpp",
    "core/src/shm/shared_buffers.cpp",
    "core/src/shm/rank_order_sum.cpp",
    "core/src/shm/shm_process_group.cpp",
    "core/src/comm/transport.cpp",
]
BINDING_SOURCES = [
    "csrc/chained_work.cpp",
    "csrc/coalesced.cpp",
    "csrc/ddpd_backend.cpp",
    "csrc/module.cpp",
    "csrc/p2p.cpp",
    "csrc/p2p_waiter.cpp",
    "csrc/rooted.cpp",
    "csrc/unserved.cpp",
]

# As CMake's Release build of core (rank_order_sum.cpp's loops are written for the vectorizer).
CXX_FLAGS = ["-O3", "-DNDEBUG", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        CppExtension(
            "ddpd_torch._C",
            # Relative to this folder: setuptools refuses absolute source paths.
            BINDING_SOURCES + [f"../{s}" for s in CORE_SOURCES],
            include_dirs=[
                str(HERE / "csrc"),
                str(REPO / "core/src"),
                str(REPO / "core/include"),
                str(REPO / "common/include"),
            ],
            extra_compile_args={"cxx": CXX_FLAGS},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
