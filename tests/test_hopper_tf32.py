"""The Hopper GEMM's TF32 path (``kernels/hopper_gemm.cu``, DTYPE 3) without a GPU: the probe's
host logic (``benches/probes/hopper_tf32.py``: defines, the B^T pack's grid and row length,
4-byte tensor-map arguments, the A fragments' addressing against the PTX layout) and, where
nvcc is installed, the build of every configuration the probe offers for sm_90a (no warnings,
no register spills, no wgmma serialization)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from tiledmm_backends.cupy_cuda import hopper

from benches.probes import hopper_tf32 as probe

# ------------------------------------------------------------------ host logic


def test_defines_of_every_config():
    for name, cfg in probe.CONFIGS.items():
        d = probe.defines(cfg)
        assert d["DTYPE"] == 3 and d["EPI"] == 0, name
        assert d["AREG"] == cfg.get("areg", 1) and d["WAIT1"] == cfg.get("wait1", 1), name
        assert (d["PRODUCER_REGS"], d["CONSUMER_REGS"]) == (40, 232), name
        assert hopper.smem_bytes(d) <= hopper.SMEM_LIMIT, name
    # a stage is (BM + BN) rows of 128 bytes, as for 16 bits: 32 floats of K per row
    big = probe.defines(probe.CONFIGS["L"])
    assert hopper.smem_bytes(big) == 4 * (384 * 128 + 16) + 1024
    assert set(probe.DEFAULT_CONFIGS.split(",")) <= set(probe.CONFIGS)


@pytest.mark.parametrize(
    "bad",
    [dict(stages=5), dict(bn=64, cluster=2), dict(cm=1, cn=1), dict(bm=512, cm=2),
     dict(cluster=3), dict(stages=1)],
)  # fmt: skip
def test_defines_reject(bad):
    with pytest.raises(ValueError, match="hopper TF32 tiles"):
        probe.defines(dict(probe.CONFIGS["L"], **bad))


def test_packed_rows_and_grid():
    assert [probe.padded_k(k) for k in (1, 3, 4, 5, 777, 4096)] == [4, 4, 4, 8, 780, 4096]
    assert probe.pack_grid(4096, 4096) == (64, 128, 1)
    assert probe.pack_grid(257, 100, 3) == (5, 4, 3)  # 100 -> 4 column tiles of 32


def test_four_byte_tensor_maps():
    """A (M x K floats) and the packed B^T (N x Kp) in boxes of 32 floats (128 bytes, the
    swizzle span); Kp's rows are 16-byte aligned, K's own need not be."""
    dims, strides, box = hopper.map_args(1000, 777, 780 * 4, 128, 4)
    assert dims == (777, 1000, 1) and strides == (3120, 3120 * 1000) and box == (32, 128, 1)
    dims, strides, box = hopper.map_args(3000, 777, 780 * 4, 64, 4, 3, 3000 * 780 * 4)
    assert dims == (777, 3000, 3) and strides[1] == 3000 * 3120 and box == (32, 64, 1)
    with pytest.raises(ValueError, match="row stride"):
        hopper.map_args(10, 777, 777 * 4, 64, 4)  # an unpadded K = 777 row: not TMA-able
    assert hopper.padded_ld(777, 4) == 780


def test_a_fragments_follow_the_ptx_layout():
    """The kernel's ldmatrix addressing of the swizzled A tile (mirrored by
    ``fragment_source``) gives each lane the m64nNk8 .tf32 A fragment: a0 (g, t), a1 (g + 8,
    t), a2 (g, t + 4), a3 (g + 8, t + 4) of its warp's 16 rows and the k-step's 8 columns."""
    for warp in range(4):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for ks in range(4):
                r, k = 16 * warp + g, 8 * ks + t
                assert probe.fragment_source(warp, lane, ks) == [
                    (r, k), (r + 8, k), (r, k + 4), (r + 8, k + 4)]  # fmt: skip


# ------------------------------------------------------------------ the kernel's build (nvcc)


def _nvcc(text: str, tmp_path) -> subprocess.CompletedProcess:
    src = tmp_path / "k.cu"
    src.write_text(text)
    return subprocess.run(
        ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-std=c++17", "-Werror",
         "all-warnings", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", sorted(probe.CONFIGS))
def test_tf32_builds_for_sm90a(name, tmp_path):
    """As NVRTC gets it (defines first, no host headers), for sm_90a: both entries (the GEMM
    and the B^T pack) build with no warnings, no spills, and no wgmma serialized by ptxas."""
    res = _nvcc(hopper.source(probe.defines(probe.CONFIGS[name])), tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    for entry in ("hopper_gemm", "hopper_tf32_pack_bt"):
        assert f"Compiling entry function '{entry}'" in res.stderr, res.stderr[-2000:]
    assert res.stderr.count(" 0 bytes spill stores") == 2, res.stderr[-2000:]
    assert "spill loads" in res.stderr and "Performance Loss" not in res.stderr, res.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_tf32_rejects_the_tma_store_epilogue(tmp_path):
    d = dict(probe.defines(probe.CONFIGS["L"]), EPI=1)
    res = _nvcc(hopper.source(d), tmp_path)
    assert res.returncode != 0 and "EPI 0" in res.stderr
