"""Stops the run before any test when ddpd_torch is not importable by the Python running pytest
(each rank runs on that Python too), saying how to install it."""

import sys

import pytest


def pytest_configure(config):
    try:
        import ddpd_torch  # noqa: F401
    except ImportError as e:
        raise pytest.UsageError(
            f"ddpd_torch is not importable by {sys.executable} ({e}): build and install it with "
            f"`{sys.executable} -m pip install --no-build-isolation --no-deps ./torch_backend` "
            "from the repository root (scripts/test.sh does)")
