"""Forked processes, threads and interrupts on the CPU backends (issue 40).

A child forked after a real first call either computes (numpy; numba-cpu, whose threading
layer is a fork-safe one) or says at once why it cannot and what to do (OpenCL: PoCL's threads
do not exist in the child, a fresh context hangs too); ``multiprocessing.Pool`` with the
``fork`` start method finishes. Every script runs in its own session under a timeout, and the
whole session is killed when it runs out: a hang fails the test instead of hanging the run.
A ``KeyboardInterrupt`` during numba-cpu's first call (numba imported lazily inside it) leaves
the backend usable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.conftest import backend_reason, requires_backend

CPU = [b for b in ("numpy", "opencl", "numba-cpu") if backend_reason(b) is None]
#: what a child forked after a first call prints on each backend
CHILD = {"numpy": "child ok 8.0", "numba-cpu": "child ok 8.0", "opencl": "child error"}


def run_script(code: str, *args: str, timeout: float = 240, env: dict | None = None) -> str:
    """stdout of ``python script.py args`` (``code`` in a fresh folder) in a session of its
    own; its whole process group is killed (and the test fails) if it outlives ``timeout``."""
    full = dict(os.environ, **(env or {}))
    full = {k: v for k, v in full.items() if v is not None}  # None: unset it
    folder = tempfile.mkdtemp(prefix="tiledmm-fork-test-")
    script = Path(folder) / "script.py"  # a file: a spawn child imports its functions from it
    script.write_text(textwrap.dedent(code))
    p = subprocess.Popen([sys.executable, str(script), *args], env=full, cwd=folder,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)  # fmt: skip
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"hung for {timeout} s; stdout: {out[-2000:]} stderr: {err[-2000:]}")
    assert p.returncode == 0, err[-3000:]
    return out


FORK_CHILD = """
import os, sys, numpy as np, tiledmm
backend = sys.argv[1]
a = np.ones((8, 8), np.float32)
tiledmm.matmul(a, a, backend=backend)  # a real first call
pid = os.fork()
if pid == 0:
    try:
        r = tiledmm.matmul(a, a, backend=backend)
        print("child ok", r[0, 0], flush=True)
    except Exception as exc:
        print("child error", type(exc).__name__, exc, flush=True)
        row = next(r for r in tiledmm.backends() if r.name == backend)
        print("available", row.available, row.reason[:40], flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child status", status)
print("parent ok", tiledmm.matmul(a, a, backend=backend)[0, 0])
"""


@pytest.mark.parametrize("backend", CPU)
def test_a_child_forked_after_a_first_call_computes_or_says_why(backend):
    out = run_script(FORK_CHILD, backend, timeout=120)
    assert CHILD[backend] in out, out
    assert "child status 0" in out and "parent ok 8.0" in out, out
    if backend == "opencl":
        assert "RuntimeError OpenCL cannot run in this process: it was forked" in out
        assert "'spawn'" in out and "available False OpenCL cannot run in this process" in out


POOL = """
import multiprocessing as mp, sys, numpy as np, tiledmm
backend, method = sys.argv[1], sys.argv[2]
a = np.ones((16, 16), np.float32)

def work(i):
    try:
        return float(tiledmm.matmul(a + i, a, backend=backend)[0, 0])
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

if __name__ == "__main__":
    tiledmm.matmul(a, a, backend=backend)  # a real first call in the parent
    with mp.get_context(method).Pool(2) as pool:
        print(pool.map(work, range(4)))
"""


@pytest.mark.parametrize("backend", CPU)
def test_a_fork_pool_after_a_first_call_finishes(backend):
    out = run_script(POOL, backend, "fork", timeout=180)
    if backend == "opencl":
        assert out.count("RuntimeError: OpenCL cannot run in this process") == 4, out
    else:
        assert out.strip() == "[16.0, 32.0, 48.0, 64.0]", out


@requires_backend("opencl")
def test_opencl_runs_in_a_spawn_pool_as_the_message_says():
    out = run_script(POOL, "opencl", "spawn", timeout=240)
    assert out.strip() == "[16.0, 32.0, 48.0, 64.0]", out


def _gnu_openmp() -> bool:
    try:
        from numba.np.ufunc import omppool
    except ImportError:
        return False
    return getattr(omppool, "openmp_vendor", "") == "GNU"


@requires_backend("numba-cpu")
def test_numba_cpu_on_gnu_openmp_refuses_in_a_forked_child_instead_of_dying():
    if not _gnu_openmp():
        pytest.skip("numba has no GNU OpenMP threading layer here")
    out = run_script(FORK_CHILD + "import numba; print('layer', numba.threading_layer())",
                     "numba-cpu", env={"NUMBA_THREADING_LAYER": "omp"})  # fmt: skip
    assert "layer omp" in out and "child status 0" in out, out
    assert "child error RuntimeError backend 'numba-cpu'" in out
    assert "numba-cpu cannot run in this process: it was forked" in out
    assert "'spawn'" in out and "NUMBA_THREADING_LAYER" in out


@requires_backend("numba-cpu")
def test_numba_cpu_from_many_threads_on_its_fork_safe_layer():
    code = """
    import threading, numpy as np, numba, tiledmm
    a = np.random.default_rng(0).random((96, 96)).astype(np.float32)
    bad = []
    def work():
        for k in ("naive", "tiled", "register") * 3:
            if not np.allclose(tiledmm.matmul(a, a, backend="numba-cpu", kernel=k), a @ a,
                               rtol=1e-4):
                bad.append(k)
    def guarded():
        try:
            work()
        except Exception as exc:
            bad.append(repr(exc))
    ts = [threading.Thread(target=guarded) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print(numba.threading_layer(), bad)
    """
    out = run_script(code, env={"NUMBA_THREADING_LAYER": None})
    layer, bad = out.split(maxsplit=1)
    assert layer in ("workqueue", "tbb") and bad.strip() == "[]", out


INTERRUPT = """
import importlib.abc, sys
class Interrupt(importlib.abc.MetaPathFinder):  # Ctrl-C while the module is being imported
    fired = False
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1] and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
import numpy as np, tiledmm
a = np.ones((8, 8), np.float32)
try:
    tiledmm.matmul(a, a, backend="numba-cpu")
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
print("second", tiledmm.matmul(a, a, backend="numba-cpu")[0, 0])
print("third", tiledmm.matmul(a, a, backend="numba-cpu", kernel="tiled")[0, 0])
"""


@requires_backend("numba-cpu")
@pytest.mark.parametrize(
    "module",
    ["numba.core.typing.templates", "numba.core.registry", "llvmlite.binding",
     "tiledmm_numba_cpu.kernels"],
)  # fmt: skip
def test_an_interrupted_first_numba_cpu_call_leaves_it_usable(module):
    out = run_script(INTERRUPT, module)  # a fresh process: numba not imported yet
    assert out.split("\n")[:3] == ["interrupted", "second 8.0", "third 8.0"], out


def test_a_child_forked_while_a_thread_holds_tiledmms_locks_does_not_deadlock():
    code = """
    import os, threading, numpy as np, tiledmm
    from tiledmm.core import dispatch, registry
    from tiledmm.util.atomicfile import locked
    from pathlib import Path
    a = np.ones((8, 8), np.float32)
    tiledmm.matmul(a, a, backend="numpy")
    held, done = threading.Event(), threading.Event()
    def holder():  # another thread is inside tiledmm when the process forks
        with dispatch._plans._lock, registry._LOCK, locked(Path(os.environ["TMPDIR"]) / "x"):
            held.set()
            done.wait()
    t = threading.Thread(target=holder)
    t.start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        dispatch.clear_caches()
        registry.reload()
        print("child", tiledmm.matmul(a, a, backend="numpy")[0, 0], flush=True)
        with locked(Path(os.environ["TMPDIR"]) / "y"):
            print("child locked", flush=True)
        os._exit(0)
    done.set()
    t.join()
    print("status", os.waitpid(pid, 0)[1])
    """
    out = run_script(code, env={"TMPDIR": tempfile.mkdtemp()}, timeout=90)
    assert "child 8.0" in out and "child locked" in out and "status 0" in out, out
