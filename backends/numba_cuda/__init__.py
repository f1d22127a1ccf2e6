"""Placeholder: this backend is being written; it registers as unavailable."""

from tiledmm import Backend, hookimpl


class _Pending(Backend):
    name = "numba-cuda"
    kernels = ("naive", "tiled", "register")

    def unavailable_reason(self):
        return "it is not implemented yet"

    def run(self, plan, a, b, out):
        raise RuntimeError(self.unavailable_reason())


@hookimpl
def register_backends(register):
    register(_Pending())
