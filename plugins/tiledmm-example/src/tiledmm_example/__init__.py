"""The smallest useful tiledmm plugin: a row-blocked NumPy backend named "example".

It defines only ``name``, ``kernels`` and ``run``; everything else (host CPU device, float32 and
float64, NumPy arrays, always available, planner-default tiles) comes from ``tiledmm.Backend``.
"""

from __future__ import annotations

import numpy as np

import tiledmm


class ExampleBackend(tiledmm.Backend):
    name = "example"
    kernels = ("naive",)

    def run(self, plan, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """One block of ``plan.block_tile[0]`` rows of C at a time, each row a vector-matrix
        product of a row of A with B."""
        rows = plan.block_tile[0]
        for i0 in range(0, out.shape[0], rows):
            block = a[i0 : i0 + rows]
            out[i0 : i0 + rows] = (block[:, :, None] * b[None, :, :]).sum(axis=1)


@tiledmm.hookimpl
def register_backends(register) -> None:
    register(ExampleBackend())
