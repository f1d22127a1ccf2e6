/* tiled: one output per work-item; the group stages a BM x BK tile of A and a BK x BN tile of
 * B in local (shared) memory per K step, so each global element is read once per group instead
 * of once per output. Edge tiles are zero-filled, so padding adds exact zeros to every sum.
 * Knobs: VEC_SMEM 1 reads four (two for double) A values per local load (needs BK % VW == 0);
 * SPLIT > 1 keeps that many partial sums per output (needs BK % SPLIT == 0);
 * B_T 1 (CPUs) stores the B tile transposed, Bs[n][k], so each work-item's dot product walks
 * both tiles along contiguous K and its SPLIT partial sums compile to one SIMD vector. */
#include "gemm_common.h"

#if B_T /* CPU layout: rows of both tiles contiguous along K; banks are no concern there */
#define AS_LD BK
#define BS_INDEX(k, n) ((n) * BK + (k))
#else
#define AS_LD (BK + (VEC_SMEM ? 0 : 1)) /* +1 breaks bank conflicts when reading scalars */
#define BS_INDEX(k, n) ((k) * BN + (n))
#endif

KERNEL GEMM_SIGNATURE
{
  LOCAL real ALIGN16 As[BM * AS_LD];
  LOCAL real ALIGN16 Bs[BK * BN];
  BATCH_PROLOGUE();
  const int tid = LOCAL_ID();
  const int tx = LOCAL_X(), ty = LOCAL_Y(); /* 2-D groups: WG_X = BN, WG_Y = BM */
  const int row0 = GROUP_Y() * BM, col0 = GROUP_X() * BN;
  real part[SPLIT]; /* SPLIT independent partial sums: breaks the FMA latency chain (CPUs) */
  UNROLL for (int p = 0; p < SPLIT; ++p) part[p] = ZERO;

  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int e = tid; e < BM * BK; e += THREADS) { /* coalesced along K */
      const int r = e / BK, c = e % BK;
      const int gr = row0 + r, gc = k0 + c;
      As[r * AS_LD + c] = (gr < M && gc < K) ? A[offA + gr * lda + gc] : ZERO;
    }
    for (int e = tid; e < BK * BN; e += THREADS) { /* coalesced along N */
      const int r = e / BN, c = e % BN;
      const int gr = k0 + r, gc = col0 + c;
      Bs[BS_INDEX(r, c)] = (gr < K && gc < N) ? B[offB + gr * ldb + gc] : ZERO;
    }
    BARRIER();
#if B_T
    /* Not unrolled on purpose: PoCL compiles a group as loops over its work-items and keeps
     * every value that crosses a barrier in per-item arrays; fully unrolled, the constant
     * addresses are hoisted above the barrier and each becomes one such array (a pointer load
     * per operand per FMA). Rolled, only the two row pointers cross it. */
    {
      const LOCAL_PTR real *a_row = &As[ty * AS_LD];
      const LOCAL_PTR real *b_col = &Bs[BS_INDEX(0, tx)];
      for (int k = 0; k < BK; k += SPLIT) {
        UNROLL
        for (int p = 0; p < SPLIT; ++p)
          part[p] = FMA(a_row[k + p], b_col[k + p], part[p]);
      }
    }
#elif VEC_SMEM
    UNROLL
    for (int k = 0; k < BK; k += VW) {
      real a[VW];
      const realV av = VLOADL(&As[ty * AS_LD + k]);
      VSPLIT(av, a);
      UNROLL
      for (int v = 0; v < VW; ++v)
        part[(k + v) % SPLIT] = FMA(a[v], Bs[(k + v) * BN + tx], part[(k + v) % SPLIT]);
    }
#else
    UNROLL
    for (int k = 0; k < BK; ++k)
      part[k % SPLIT] = FMA(As[ty * AS_LD + k], Bs[k * BN + tx], part[k % SPLIT]);
#endif
    BARRIER();
  }
  const int row = row0 + ty, col = col0 + tx;
  real acc = part[0];
  UNROLL for (int p = 1; p < SPLIT; ++p) acc += part[p];
  if (row < M && col < N)
    C[offC + row * ldc + col] = acc;
}
