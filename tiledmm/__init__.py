"""tiledmm: tiled matrix multiplication on any device.

    import tiledmm
    c = tiledmm.matmul(a, b, backend="numpy", kernel="register")
    print(tiledmm.plan(4096, 4096, 4096, backend="numpy"))

The core never imports a device library; backends do that lazily.
"""

from .api import matmul
from .core.backend import Backend
from .core.dispatch import plan
from .core.hookspecs import hookimpl, hookspec
from .core.registry import (
    BackendEntry,
    PluginInfo,
    backends,
    get_backend,
    plugins,
    register_backend,
)
from .device.calibration import CalibrationWarning
from .device.host import host_cpu
from .device.spec import DeviceSpec
from .planner.geometry import KERNEL_FAMILIES, Geometry
from .planner.make import make_plan
from .planner.plans import Occupancy, Plan, PlanError

__version__ = "0.1.0"  # the one source: pyproject.toml reads it (setuptools dynamic)

__all__ = [
    "matmul",
    "plan",
    "make_plan",
    "backends",
    "get_backend",
    "plugins",
    "register_backend",
    "Backend",
    "BackendEntry",
    "Geometry",
    "DeviceSpec",
    "CalibrationWarning",
    "Plan",
    "PlanError",
    "Occupancy",
    "PluginInfo",
    "KERNEL_FAMILIES",
    "host_cpu",
    "hookimpl",
    "hookspec",
    "__version__",
]
