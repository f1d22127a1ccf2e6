"""The code generator's vocabulary, shared by :mod:`.kernels` (the three families) and
:mod:`.skinny` (gemv, the split-K reduction): a kernel's compile-time constants
(:class:`KernelSpec`) and the line helpers. Imports no numba."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KernelSpec", "indent", "k_start", "k_end"]


@dataclass(frozen=True)
class KernelSpec:
    """Everything that is a compile-time constant of one kernel."""

    family: str
    dtype: str  # "float32" | "float64"
    bm: int
    bn: int
    bk: int = 1
    tm: int = 1
    tn: int = 1
    layout: str = "strided"  # register family: "strided" or "contig" micro-tile rows/columns
    pad: int = 0  # shared-memory row padding of the transposed A tile (bank conflicts)
    unroll_k: bool = True  # unroll the BK loop in the source (else a constant-bound range loop)
    stages: int = 1  # register family: 2 double-buffers the shared tiles (one barrier per step)
    single: bool = False  # one product per launch (no batch prologue; grid z = the K slices)
    split_k: int = 1  # K slices: grid z holds batch x slices, partial products to a workspace
    gemv: int = 0  # naive family's gemv path: 1 = M short (x @ B), 2 = N short (A @ x)
    ks: int = 1  # gemv: threads along K per output (a power of two: a tree reduction)

    @property
    def threads(self) -> int:
        if self.gemv:
            return self.bn * self.ks
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def name(self) -> str:
        d = "f32" if self.dtype == "float32" else "f64"
        s = f"{self.family}_{d}_{self.bm}x{self.bn}x{self.bk}_{self.tm}x{self.tn}"
        if self.family == "register":
            s += f"_{self.layout}_p{self.pad}" + ("" if self.unroll_k else "_loopk")
            s += "_s2" if self.stages == 2 else ""
        if self.gemv:
            s += f"_gemv{self.gemv}_ks{self.ks}"
        s += f"_split{self.split_k}" if self.split_k > 1 else ""
        return s + ("_single" if self.single else "")


def indent(lines: list[str], depth: int) -> list[str]:
    return ["    " * depth + s for s in lines]


def k_start(s: KernelSpec) -> str:
    """The first K index of this block's slice (0 without split-K)."""
    return "kbeg" if s.split_k > 1 else "u32(0)"


def k_end(s: KernelSpec) -> str:
    """The end of this block's K slice (``k`` without split-K)."""
    return "kend" if s.split_k > 1 else "k"
