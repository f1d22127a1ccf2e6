"""numba-cuda's paths for skinny and small products (issue 11): the gemv kernel body (the naive
family with ``gemv``), and split-K, whose K slices write partial products into a workspace
that the reduction kernel (family ``reduce``, in the GEMM signature) sums into the output.

Sources are generated as in ``kernels.py`` (constants baked in, unsigned 32-bit indices);
:mod:`.splitk` launches the split-K pair, on the engine's ``Launcher``.
"""

from __future__ import annotations

from .codegen import KernelSpec, indent, k_end, k_start

__all__ = ["GEMV_UNROLL", "REDUCE_THREADS", "gemv_body", "reduce_body"]

#: gemv: loads issued per thread before their FMAs (memory-level parallelism)
GEMV_UNROLL = 8
REDUCE_THREADS = 256  # threads per block of the split-K reduction

# Per orientation: how a thread finds its short-side outputs, the loads of one K step (``{kk}``
# the K index; ``{i}`` the short-side output), its partial sum's slot in shared memory (``{ln}``
# its lane along K) and its store. gemv 1 (M short, x @ B): thread ``lane + BN * kl`` walks K
# from ``kl`` for column ``lane``: a warp reads consecutive columns of a B row, A's element is
# broadcast. gemv 2 (N short, A @ x): thread ``lane + KS * ty`` walks row ``ty``'s K from
# ``lane``: a warp reads consecutive elements of an A row.
_ORIENT = {
    1: dict(
        setup=["lane = u32(tid % u32({bn}))", "kl = u32(tid // u32({bn}))",
               "row0 = u32(u32(cuda.blockIdx.y) * u32({bm}))",
               "c = u32(u32(cuda.blockIdx.x) * u32({bn}) + lane)",
               "cc = c if c < n else u32(n - u32(1))"],
        per="p{i} = u32(offA + min(u32(row0 + u32({i})), u32(m - u32(1))) * k)",
        long="B[u32(offB + {kk} * n + cc)]", short="A[u32(p{i} + {kk})]",
        slot="u32(u32({ln} * u32({bm}) + u32({i})) * u32({bn}) + lane)",
        store="C[u32(offC + u32(row0 + u32({i})) * n + c)]",
        step="kl", first="row0", count="m", ok="c < n",
    ),
    2: dict(
        setup=["lane = u32(tid % u32({ks}))", "ty = u32(tid // u32({ks}))",
               "r = u32(u32(cuda.blockIdx.y) * u32({bn}) + ty)",
               "col0 = u32(u32(cuda.blockIdx.x) * u32({bm}))",
               "p = u32(offA + min(r, u32(m - u32(1))) * k)"],
        per="q{i} = u32(offB + min(u32(col0 + u32({i})), u32(n - u32(1))))",
        long="A[u32(p + {kk})]", short="B[u32(q{i} + {kk} * n)]",
        slot="u32(u32(u32({i}) * u32({bn}) + ty) * u32({ks}) + {ln})",
        store="C[u32(offC + r * n + col0 + u32({i}))]",
        step="lane", first="col0", count="n", ok="r < m",
    ),
}  # fmt: skip


def gemv_body(s: KernelSpec) -> list[str]:
    """The gemv kernel body: one short output side (BM outputs of it per block), BN outputs of
    the long side per block, KS threads along K per output, each issuing GEMV_UNROLL loads
    before their FMAs; the KS partial sums meet in a tree in shared memory. Rows/columns past
    the matrix read its last one and are not stored."""
    bm, bn, ks, u = s.bm, s.bn, s.ks, GEMV_UNROLL
    if ks < 1 or ks & (ks - 1):
        raise ValueError(f"gemv: ks must be a power of two, got {ks}")
    o, dims = _ORIENT[s.gemv], dict(bm=bm, bn=bn, ks=ks)
    step, kend = o["step"], k_end(s)

    def slot(i: int, ln: str) -> str:
        return o["slot"].format(i=i, ln=ln, **dims)

    def fma(i: int, kk: str, v: str) -> str:
        return f"acc{i} += {o['short'].format(i=i, kk=kk)} * {v}"

    lines = [f"red = cuda.shared.array({bm * bn * ks}, DT)", "tid = u32(cuda.threadIdx.x)"]
    lines += [x.format(**dims) for x in o["setup"]] + [o["per"].format(i=i) for i in range(bm)]
    lines += [f"acc{i} = DT(0)" for i in range(bm)] + [f"kk = u32({k_start(s)} + {step})"]
    kks = [f"u32(kk + u32({j * ks}))" for j in range(u)]
    body = [f"v{j} = {o['long'].format(kk=kks[j])}" for j in range(u)]
    body += [fma(i, kks[j], f"v{j}") for j in range(u) for i in range(bm)]
    lines += [f"while u32(kk + u32({(u - 1) * ks})) < {kend}:"]
    lines += indent(body + [f"kk = u32(kk + u32({u * ks}))"], 1)
    tail = [f"v0 = {o['long'].format(kk='kk')}"] + [fma(i, "kk", "v0") for i in range(bm)]
    lines += [f"while kk < {kend}:"] + indent(tail + [f"kk = u32(kk + u32({ks}))"], 1)
    lines += [f"red[{slot(i, step)}] = acc{i}" for i in range(bm)] + ["cuda.syncthreads()"]
    half = ks // 2
    while half:
        other = f"u32({step} + u32({half}))"
        add = [f"red[{slot(i, step)}] += red[{slot(i, other)}]" for i in range(bm)]
        lines += [f"if {step} < u32({half}):"] + indent(add, 1) + ["cuda.syncthreads()"]
        half //= 2
    out = []
    for i in range(bm):
        out += [f"if u32({o['first']} + u32({i})) < {o['count']}:",
                f"    {o['store'].format(i=i)} = red[{slot(i, 'u32(0)')}]"]  # fmt: skip
    return lines + [f"if {step} == u32(0) and {o['ok']}:"] + indent(out, 1)


def reduce_body(s: KernelSpec) -> list[str]:
    """The split-K reduction, in the GEMM signature: C's matrix z (offC, from sc0/sc1) is the
    sum over ``k`` slices of the workspace A's matrix z (offA, from sa0/sa1), slices ``sb0``
    elements apart; one output element per thread (``bn`` threads per block)."""
    return [
        f"e = u32(u32(cuda.blockIdx.x) * u32({s.bn}) + u32(cuda.threadIdx.x))",
        "if e < u32(m * n):",
        "    w = u32(offA + e)",
        "    acc = DT(0)",
        "    for _ in range(k):",
        "        acc += A[w]",
        "        w = u32(w + sb0)",
        "    C[u32(offC + e)] = acc",
    ]
