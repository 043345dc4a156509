"""setup.py compiles core's shm transport from the paths it lists: each must exist and be one
CMake builds, so the module and ddpd-train run the same transport."""

import ast
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[1]
REPO = BACKEND.parent


def listed(name):
    tree = ast.parse((BACKEND / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py has no {name}")


def test_core_sources_exist_and_cmake_builds_them():
    cmake = (REPO / "core/CMakeLists.txt").read_text()
    for path in listed("CORE_SOURCES"):
        assert (REPO / path).is_file(), path
        assert path.removeprefix("core/") in cmake, f"core/CMakeLists.txt no longer lists {path}"


def test_binding_sources_exist():
    for path in listed("BINDING_SOURCES"):
        assert (BACKEND / path).is_file(), path
