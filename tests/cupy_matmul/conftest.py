"""CuPy's own matmul tests, run unchanged against tiledmm (issue 39).

``test_matmul.py`` is CuPy v14.2.0's ``tests/cupy_tests/math_tests/test_matmul.py`` and
``test_product.py`` the matmul part of its ``tests/cupy_tests/linalg_tests/test_product.py``
(``matrix_power`` and ``linalg.matmul``; see README.md). For every test in this folder,
``cupy.matmul``, ``cupy.linalg.matmul`` and ``cupy.ndarray.__matmul__`` are
``tiledmm.matmul(..., backend="cupy")`` (:mod:`tests.cupy_matmul.harness`); the tests compare
against NumPy as CuPy's own suite does.

Without CuPy or a CUDA device the two files are not collected at all (nothing imported, nothing
run: a CPU machine pays only the ``find_spec`` below); with them, their tests are marked
``gpu``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CUPY_FILES = ["test_matmul.py", "test_product.py"]


def _why_not() -> str | None:
    """Why CuPy's tests cannot run here, or None."""
    if importlib.util.find_spec("cupy") is None:
        return "cupy is not installed"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as e:  # noqa: BLE001 - CUDARuntimeError, a missing driver, ...
        return f"no usable CUDA device ({type(e).__name__}: {e})"
    return None


WHY_NOT = _why_not()
collect_ignore = CUPY_FILES if WHY_NOT else []


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.parent == HERE and item.path.name in CUPY_FILES:
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(autouse=True)
def _tiledmm_in_cupy(request):
    """cupy's matmul entry points are tiledmm's for CuPy's tests (the harness test: not)."""
    if request.path.name not in CUPY_FILES:
        yield
        return
    import cupy

    import tiledmm
    from tests.cupy_matmul.harness import install

    undo = install(cupy, tiledmm.matmul, backend="cupy")
    try:
        yield
    finally:
        undo()
