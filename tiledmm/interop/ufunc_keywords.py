"""NumPy's matmul keywords, decided from shapes and dtypes alone (issue 39).

:func:`check` decides a call with numpy's ufunc keywords (``axes``, ``axis``, ``keepdims``,
``casting``, ``order``, ``dtype``, ``subok``, ``signature``, and ``out``) as ``numpy.matmul``
does: each operand's core axes and the result's, the loop dtype (numpy's own type resolution,
``np.matmul.resolve_dtypes`` with the call's ``signature``/``dtype`` and ``casting``), the
output cast, the shape of the product. It reads :class:`Spec` (shape, dtype, writeable) only,
so it serves every array kind. Where numpy would raise, the same call is replayed on zero-byte
stand-ins of the operands (and an untouched ``numpy.empty`` of ``out``'s shape), so the
exception type and message are numpy's own.

:func:`layout` is the memory order numpy allocates a result in: ``order="C"``/``"F"``; ``"A"``:
F when every operand is F-contiguous; ``"K"`` (the default): the loop dimensions in the order of
the operands' strides (numpy's iterator sorts them: a stable insertion sort, C order where
operands disagree), the core dimensions innermost, C-ordered.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["KEYWORDS", "Spec", "Call", "check", "replay", "layout", "f_contiguous"]

#: numpy's matmul keywords besides ``out`` (``axis`` and ``keepdims`` always raise numpy's
#: TypeError for matmul: its core dimensions are not one shared one, its output not scalar).
KEYWORDS = frozenset(
    {"axes", "axis", "keepdims", "casting", "order", "dtype", "subok", "signature"}
)
_CASTINGS = frozenset({"no", "equiv", "safe", "same_kind", "unsafe"})


@dataclass(frozen=True)
class Spec:
    """What numpy's checks read of an array: shape, dtype (numpy's), writeable."""

    shape: tuple[int, ...]
    dtype: np.dtype
    writeable: bool = True


@dataclass(frozen=True)
class Call:
    """A call numpy accepts. ``axes``: the core axes (non-negative) of ``a``, ``b`` and the
    result (``out``'s, when given), m/k then k/n, as ``moveaxis`` takes them; ``dtype``: the
    loop's (operands are cast to it, the product computed in it, then cast to ``out`` under
    ``casting``); ``loop``: the broadcast loop shape; ``out_loop``: ``out``'s (numpy broadcasts
    a product into an ``out`` with more or longer loop dimensions); ``core``: the result's core
    shape ((m, n), (m,), (n,) or ())."""

    axes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    dtype: np.dtype
    casting: str
    order: str
    loop: tuple[int, ...]
    out_loop: tuple[int, ...]
    core: tuple[int, ...]


class _Refused(Exception):
    """numpy would raise (or tiledmm cannot be sure it would not): replay it."""


def check(a: Spec, b: Spec, out: Any, kw: dict) -> Call:
    """The :class:`Call` numpy makes of ``matmul(a, b, out=out, **kw)``, or numpy's exception.

    ``out``: None, a :class:`Spec`, a tuple of them (numpy's ``out=`` forms), or whatever else
    the caller passed (numpy then raises for it)."""
    try:
        return _check(a, b, out, kw)
    except _Refused:
        pass
    replay(a, b, out, kw)
    raise TypeError(  # numpy accepted what tiledmm refused: a gap in _check (a bug)
        f"matmul(): tiledmm cannot apply numpy's keywords {sorted(kw)} to operands of shapes "
        f"{a.shape} and {b.shape}, although numpy accepts them; please report this"
    )


def replay(a: Spec, b: Spec, out: Any, kw: dict) -> None:
    """``numpy.matmul`` on stand-ins: raises what numpy raises for this call. The operands are
    zero-stride views of one element; ``out`` an untouched ``numpy.empty`` (pages never
    written are never committed), read-only where the caller's is."""

    def stand_in(x: Any, output: bool) -> Any:
        if isinstance(x, tuple) and output:
            return tuple(stand_in(y, True) for y in x)
        if not isinstance(x, Spec):
            return x
        if output:
            r = np.empty(x.shape, x.dtype)
            r.flags.writeable = x.writeable
            return r
        return np.lib.stride_tricks.as_strided(
            np.zeros(1, x.dtype), x.shape, (0,) * len(x.shape), writeable=False
        )

    with np.errstate(all="ignore"):
        np.matmul(stand_in(a, False), stand_in(b, False), out=stand_in(out, True), **kw)


def _check(a: Spec, b: Spec, out: Any, kw: dict) -> Call:
    if set(kw) - KEYWORDS or "axis" in kw or "keepdims" in kw:
        raise _Refused
    if "subok" in kw and type(kw["subok"]) is not bool:
        raise _Refused
    casting = _word(kw.get("casting", "same_kind"))
    order = kw.get("order", "K")
    order = "K" if order is None else _word(order).upper()
    if casting not in _CASTINGS or order not in ("C", "F", "A", "K"):
        raise _Refused
    if isinstance(out, tuple):
        if len(out) != 1:
            raise _Refused
        out = out[0]
    if out is not None and (not isinstance(out, Spec) or not out.writeable):
        raise _Refused
    dtype = _loop_dtype(a.dtype, b.dtype, kw, casting)

    na, nb = len(a.shape), len(b.shape)
    if not na or not nb:
        raise _Refused
    ca, cb = min(na, 2), min(nb, 2)
    cr = (ca == 2) + (cb == 2)
    nl = max(na - ca, nb - cb)  # the broadcast loop's dimensions
    nr = len(out.shape) if out is not None else nl + cr
    if "axes" in kw:
        axes = kw["axes"]
        if not isinstance(axes, list) or len(axes) != 3:
            raise _Refused
        parts = zip(axes, (ca, cb, cr), (na, nb, nr), strict=True)
        ax = tuple(_axes_item(x, c, n) for x, c, n in parts)
    else:
        ax = (tuple(range(na - ca, na)), tuple(range(nb - cb, nb)), tuple(range(nr - cr, nr)))
    if nr < cr:
        raise _Refused
    la, core_a = _split(a.shape, ax[0])
    lb, core_b = _split(b.shape, ax[1])
    if core_a[-1] != core_b[0]:
        raise _Refused
    loop = _broadcast(la, lb)
    core = core_a[:-1] + core_b[1:]
    out_loop = loop
    if out is not None:
        out_loop, core_o = _split(out.shape, ax[2])
        if core_o != core or _broadcast(loop, out_loop) != out_loop:
            raise _Refused
        if not np.can_cast(dtype, out.dtype, casting):
            raise _Refused
    return Call(ax, dtype, casting, order, loop, out_loop, core)


def _word(x: Any) -> str:
    if isinstance(x, bytes):
        x = x.decode("latin-1")
    if not isinstance(x, str):
        raise _Refused
    return x


def _loop_dtype(da: np.dtype, db: np.dtype, kw: dict, casting: str) -> np.dtype:
    """numpy's loop for these operand dtypes (every matmul loop is one dtype: 'dd->d', ...)."""
    sig, dt = kw.get("signature"), kw.get("dtype")
    if dt is not None:
        if sig is not None:
            raise _Refused
        try:
            sig = (None, None, np.dtype(dt))
        except TypeError:
            raise _Refused from None
    try:
        more = {} if sig is None else {"signature": sig}
        loop = np.matmul.resolve_dtypes((da, db, None), casting=casting, **more)
    except (TypeError, ValueError):
        raise _Refused from None
    if not loop[0] == loop[1] == loop[2]:
        raise _Refused
    return loop[2]


def _axes_item(item: Any, core: int, ndim: int) -> tuple[int, ...]:
    """One entry of ``axes=`` (a tuple, or an int for one core dimension), made non-negative."""
    if not isinstance(item, tuple):
        if core != 1 or isinstance(item, (bool, np.bool_)):
            raise _Refused
        try:
            item = (operator.index(item),)
        except TypeError:
            raise _Refused from None
    if len(item) != core:
        raise _Refused
    found = []
    for v in item:
        if isinstance(v, (bool, np.bool_)):
            raise _Refused
        try:
            v = operator.index(v)
        except TypeError:
            raise _Refused from None
        if not -ndim <= v < ndim or v % ndim in found:
            raise _Refused
        found.append(v % ndim)
    return tuple(found)


def _split(shape: tuple[int, ...], core: tuple[int, ...]) -> tuple[tuple, tuple]:
    """(loop shape, core shape) of an array whose core axes are ``core``."""
    return tuple(d for i, d in enumerate(shape) if i not in core), tuple(shape[i] for i in core)


def _broadcast(x: tuple[int, ...], y: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    if any(p != q and 1 not in (p, q) for p, q in zip(x, y, strict=True)):
        raise _Refused
    return tuple(q if p == 1 else p for p, q in zip(x, y, strict=True))


# ------------------------------------------------------------------------------- layout


def f_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """numpy's F_CONTIGUOUS flag from shape and byte strides."""
    if 0 in shape:
        return True
    expect = itemsize
    for d, s in zip(shape, strides, strict=True):
        if d != 1:
            if s != expect:
                return False
            expect *= d
    return True


def layout(call: Call, operands: list[tuple[tuple[int, ...], tuple[int, ...] | None]],
           all_f: bool) -> list[int]:  # fmt: skip
    """The axes of the product (loop dimensions, then the core ones) from outermost to innermost
    in the memory numpy allocates for it. ``operands``: ``a``'s and ``b``'s shape and byte
    strides (None where the kind has none); ``all_f``: every operand F-contiguous (``"A"``)."""
    nd = len(call.loop) + len(call.core)
    if call.order == "F" or (call.order == "A" and all_f):
        return list(range(nd))[::-1]
    if call.order != "K" or len(call.loop) < 2:
        return list(range(nd))
    pairs = zip(operands, call.axes[:2], strict=True)
    ops = [_loop_strides(shape, st, core, len(call.loop)) for (shape, st), core in pairs if st]
    return _k_order(len(call.loop), ops) + list(range(len(call.loop), nd))


def _loop_strides(shape: tuple, strides: tuple, core: tuple, nl: int) -> list[int]:
    """An operand's strides over the broadcast loop dimensions; 0 where it has none or its
    dimension has length 1 (numpy's iterator ignores those)."""
    own = [s if d != 1 else 0 for i, (d, s) in enumerate(zip(shape, strides, strict=True))
           if i not in core]  # fmt: skip
    return [0] * (nl - len(own)) + own


def _k_order(nl: int, ops: list[list[int]]) -> list[int]:
    """numpy's ``npyiter_find_best_axis_ordering`` on the loop dimensions: outermost first."""
    perm = list(range(nl))[::-1]  # numpy's axis data runs innermost first
    for i0 in range(1, nl):
        ax0, ipos = perm[i0], i0
        for i1 in range(i0 - 1, -1, -1):
            ax1 = perm[i1]
            ambiguous, swap = True, False
            for st in ops:
                if st[ax0] and st[ax1]:
                    if abs(st[ax1]) <= abs(st[ax0]):
                        swap = False  # C order wins where operands disagree
                    elif ambiguous:
                        swap = True
                    ambiguous = False
            if not ambiguous:
                if not swap:
                    break
                ipos = i1
        if ipos != i0:
            perm.insert(ipos, perm.pop(i0))
    return perm[::-1]
