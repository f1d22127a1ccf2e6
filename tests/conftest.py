"""Shared test setup: hypothesis profiles and the list of backends that can run here."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# First-use tuning (tiledmm.tune.first_use) times tiles on a class's first call and writes the user
# tuning database: off for the suite (slow, host-speed dependent, and the database is the
# user's); tests/test_first_use.py turns it on for its own tests, in a temporary cache.
os.environ["TILEDMM_FIRST_USE_TUNING"] = "0"
# First-use calibration (tiledmm.tune.first_calibration) measures the device and the backend's
# per-call host cost on its first call and writes the calibration cache: off for the suite as
# well, also where a test turns first-use tuning on; tests/test_first_calibration.py turns it
# on for its own tests, in a temporary cache.
os.environ["TILEDMM_FIRST_USE_CALIBRATION"] = "0"

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def tuning_cache(tmp_path, monkeypatch):
    """A fresh, empty user cache (tuning database, logs), the shipped tables visible, and no
    cached plans before or after: for tests of the tuner and the tuning database."""
    from tiledmm.core import dispatch, tuning

    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(tuning.IGNORE_SHIPPED, raising=False)
    dispatch.clear_caches()
    yield tmp_path
    dispatch.clear_caches()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def backend_reason(name: str) -> str | None:
    """Why backend ``name`` cannot run here (not registered, or unavailable), or None."""
    import tiledmm

    for entry in tiledmm.backends():
        if entry.name == name:
            return None if entry.available else entry.reason
    return f"backend {name!r} is not registered"


def requires_backend(name: str) -> pytest.MarkDecorator:
    """The one way tests skip for a missing backend: ``@requires_backend("cupy")``."""
    why = backend_reason(name)
    return pytest.mark.skipif(why is not None, reason=f"{name} unavailable: {why}")


@pytest.fixture(scope="module")
def torch_cuda():
    """torch with a CUDA device (the GPU interop tests), else the test skips."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    return torch
