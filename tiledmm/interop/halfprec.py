"""float16 / bfloat16 CUDA tensors on a backend's tensor cores (issue 14).

:func:`tiledmm.interop.bridge.matmul_foreign` delegates operand dtypes outside ``RUN_DTYPES`` to the
caller's library; before it does, :func:`matmul` takes a pair of CUDA PyTorch tensors of the
same 16-bit dtype to a backend that lists that dtype in ``mma_dtypes`` (the CuPy backend):

- the operands (and ``out=``) become CuPy views over the tensors' memory, any strides: float16
  as float16, bfloat16 (which CuPy has no dtype for) as ``uint16`` words; the kernels take
  16-bit words and the plan's dtype (``"bfloat16"``) says what they hold;
- the result is allocated by torch (``a``'s dtype and device: float16 -> float16, bfloat16 ->
  bfloat16, as ``torch.matmul`` returns), the plan is ``plan_for(be, m, n, k, dtype, "mma")``
  and the batch goes to the backend's ``run_batched``, else matrix by matrix over broadcast
  views (NumPy's broadcasting and 1-D promotion);
- launches go to torch's current stream (``TorchStream`` on a non-default one), on the
  tensors' device.

Everything else is delegated to ``torch.matmul`` as before (None from :func:`matmul`): CPU
tensors, autograd, mixed or other dtypes, empty products, ``out=`` of another shape or dtype
or with internal overlap, ``precision=`` or NumPy keywords, a backend without ``mma`` for the
dtype or that cannot read CUDA memory. A kernel family other than ``"auto"``/``"mma"`` asked by
name for such a pair is the same ``ValueError`` CuPy float16 arrays get (``"... runs on tensor
cores only"``). :func:`run` is the device-independent part (tests run it on CPU tensors).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np

from ..core.dispatch import choose_backend, plan_for, tensor_core_family
from ..core.engine import run_batch
from ..core.semantics import check_kernel, matmul_shapes, result_shape, result_shape_of
from .kinds import Kind, optional_module
from .streams import TorchStream, stream_for

__all__ = [
    "HALF",
    "half_dtype",
    "storage_dtype",
    "matmul",
    "run",
    "words",
]

#: torch dtype name -> (plan dtype name, NumPy dtype of the CuPy view over its words)
HALF = {"float16": ("float16", np.dtype(np.float16)), "bfloat16": ("bfloat16", np.dtype(np.uint16))}


def half_dtype(torch: Any, a: Any, b: Any, out: Any = None) -> str | None:
    """The plan dtype (``"float16"``/``"bfloat16"``) when tensors ``a``, ``b`` (and ``out``)
    are a product this path runs, device aside: the same 16-bit dtype, at least 1-D, no
    autograd, no lazy negation or conjugation, a non-empty product of compatible shapes, and
    ``out`` (if any) of the result's dtype and shape without internal overlap; else None."""
    tensor = torch.Tensor
    if not (isinstance(a, tensor) and isinstance(b, tensor)) or a.dtype != b.dtype:
        return None
    name = str(a.dtype).rpartition(".")[2]
    if name not in HALF:
        return None
    shape = result_shape(tuple(a.shape), tuple(b.shape))
    if shape is None or 0 in a.shape or 0 in b.shape or 0 in shape:
        return None  # a mismatch (torch's own error) or an empty product (torch's own result)
    if out is not None:
        if not isinstance(out, tensor) or out.dtype != a.dtype or tuple(out.shape) != shape:
            return None
        if any(st == 0 and d > 1 for st, d in zip(out.stride(), out.shape, strict=True)):
            return None  # elements written twice: torch raises its own error
    grad = torch.is_grad_enabled()
    for x in (a, b) if out is None else (a, b, out):
        if (x.requires_grad and grad) or x.is_neg() or x.is_conj():
            return None
    return HALF[name][0]


def storage_dtype(name: str) -> np.dtype:
    """The NumPy dtype of the backend's view of a ``name`` tensor (bfloat16: uint16 words)."""
    return HALF[name][1]


def matmul(kind: Kind, a: Any, b: Any, out: Any, kwargs: dict, cuda_view: Callable) -> Any:
    """``a @ b`` for CUDA tensors of one 16-bit dtype on a backend's tensor cores, as a tensor
    of that dtype (``out`` itself when given); None: not handled here (the caller delegates).
    ``cuda_view(tensor)``: a CuPy array over a CUDA tensor's memory and strides (the bridge's
    own, handed in: this module imports neither the bridge nor the API)."""
    if kind.lib != "torch" or kind.device != "cuda" or kwargs.get("precision") is not None:
        return None
    if set(kwargs) - {"backend", "kernel", "precision"}:
        return None  # NumPy's ufunc keywords: delegated as before
    torch = sys.modules["torch"]
    name = half_dtype(torch, a, b, out)
    if name is None:
        return None
    idx = kind.index
    if any(not x.is_cuda or x.get_device() != idx for x in (a, b, out) if x is not None):
        return None
    cp = optional_module("cupy")
    if cp is None:
        return None
    backend, kernel = kwargs.get("backend", "auto"), kwargs.get("kernel", "auto")
    h = stream_for(kind)
    with cp.cuda.Device(idx), TorchStream(idx, h) if h else nullcontext():
        return run(torch, a, b, out, name, backend, kernel, words(torch, cuda_view, name))


def words(torch: Any, view: Callable, name: str) -> Callable[[Any], Any]:
    """``view`` for ``name`` tensors: as it is for float16; for bfloat16, ``view`` of the tensor
    as int16 (a dtype torch and NumPy share), its result seen as uint16 words."""
    if name != "bfloat16":
        return view
    return lambda t: view(t.view(torch.int16)).view(storage_dtype(name))


def run(torch: Any, a: Any, b: Any, out: Any, name: str, backend: str, kernel: str,
        view: Callable[[Any], Any]) -> Any:  # fmt: skip
    """``a @ b`` (into ``out`` when given) for tensors that :func:`half_dtype` names ``name``,
    on ``backend``'s tensor-core family, with ``view(tensor)`` the backend's array over a
    tensor's memory; None when the backend has no ``mma`` for ``name`` or does not take the
    views (then the caller delegates)."""
    check_kernel(kernel)
    batch, m, n, k, a1, b1, pa, pb = matmul_shapes(tuple(a.shape), tuple(b.shape))
    a2, b2 = a.unsqueeze(0) if a1 else a, b.unsqueeze(-1) if b1 else b  # NumPy's 1-D promotion
    A, B = view(a2), view(b2)
    be = choose_backend(backend, A, B, m, n, k, name, kernel)
    if name not in be.mma_dtypes and name not in be.dtypes:
        return None
    if not be.accepts(A):
        return None
    fam = tensor_core_family(be, name, kernel)
    plan = plan_for(be, m, n, k, name, fam, batch=math.prod(batch))
    direct = out is not None and not (_shares(out, a) or _shares(out, b))
    R = out if direct else torch.empty(result_shape_of(batch, m, n, a1, b1), dtype=a.dtype,
                                       device=a.device)  # fmt: skip
    R2 = R.unsqueeze(-1) if b1 else R  # (batch..., m, n) over the result's own memory
    R2 = R2.unsqueeze(-2) if a1 else R2
    C = view(R2)
    run_batch(be, plan, A, B, C, batch, pa, pb)
    if out is not None and not direct:
        out.copy_(R)
        return out
    return R


def _shares(x: Any, y: Any) -> bool:
    """Whether tensors ``x`` and ``y`` live in the same storage (conservatively: overlap)."""
    return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
