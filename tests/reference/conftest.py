"""Shared fixtures for the reference comparisons: the dsinfer binary and generated models."""

import os
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.abspath(os.path.join(ROOT, "..", "shared", "fixtures"))


@pytest.fixture(scope="session")
def dsinfer():
    path = os.environ.get("DSINFER_BIN", os.path.join(ROOT, "build", "dsinfer"))
    if not os.path.exists(path):
        pytest.fail(f"dsinfer binary not found at {path}: run scripts/build.sh first")

    def run(*args, check=True):
        result = subprocess.run([path, *map(str, args)], capture_output=True, timeout=600)
        if check and result.returncode != 0:
            raise AssertionError(f"dsinfer {' '.join(map(str, args))} failed:\n{result.stderr.decode()}")
        return result

    return run


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")
