/* gemv: the memory-bound path of the naive family for skinny and vector products (one output
 * side short: M or N small, or a 1-D operand). Every element of the long operand is read once,
 * in 16-byte loads where the rows allow (checked at run time: leading dimension, offset and
 * address), GEMV_U of them issued before their FMAs so enough bytes are in flight, and K split
 * over many work-items whose partial sums meet in a tree reduction in local memory.
 * GEMV_T 0 (M short, e.g. x @ B): a group owns BM rows x BN columns. Its THREADS = BN * KS
 *   items are CV = BN / GV column vectors (GV columns each: one 16-byte load of a B row) times
 *   KL = KS * GV lanes along K; a warp reads whole row segments of B, A is broadcast.
 * GEMV_T 1 (N short, e.g. A @ x): a group owns BN rows x BM columns; KS items run along K of
 *   one row (x fastest: a warp of KS = 32 reads 512 contiguous bytes of A per load) and BN
 *   rows along y; the short operand (x) is read through the cache.
 * Group shape (WG_X, WG_Y): (BN, KS) for GEMV_T 0, (KS, BN) for GEMV_T 1. KS must be a power
 * of two (the tree). Local memory: BM * BN * KS * GV elements (GEMV_T 0), BM * BN * KS (1). */
#include "gemm_common.h"

#if KS < 1 || (KS & (KS - 1)) != 0
  #error "gemv: ks must be a power of two (the partial sums meet in a tree)"
#endif
#ifndef GEMV_U
  #define GEMV_U 4 /* loads in flight per item before their FMAs */
#endif

#if GEMV_T == 0
  #if BN % VW == 0
    #define GV VW
  #else
    #define GV 1
  #endif
  #define CV (BN / GV)
  #define KL (KS * GV)
  #define RED (BM * BN * KL)
#else
  #define RED (BM * BN * KS)
#endif

KERNEL GEMM_SIGNATURE
{
  LOCAL real ALIGN16 red[RED];
  BATCH_PROLOGUE();
#if GEMV_T == 0
  const int tid = LOCAL_ID(), cv = tid % CV, kl = tid / CV;
  const int row0 = GROUP_Y() * BM, c0 = GROUP_X() * BN + cv * GV;
  real acc[BM][GV];
  UNROLL for (int r = 0; r < BM; ++r)
    UNROLL for (int q = 0; q < GV; ++q) acc[r][q] = ZERO;
  const GLOBAL real *a[BM]; /* rows past M read row M-1 and are never stored */
  UNROLL for (int r = 0; r < BM; ++r) a[r] = A + offA + IMIN(row0 + r, M - 1) * lda;
  const GLOBAL real *b = B + offB + c0;
  const int vec = GV > 1 && c0 + GV <= N && ldb % GV == 0 && PTR_ALIGNED16(b);
  int k = kl;
  if (vec) {
    for (; k + (GEMV_U - 1) * KL < K; k += GEMV_U * KL) {
      realV v[GEMV_U];
      UNROLL for (int u = 0; u < GEMV_U; ++u) v[u] = VLOADG(b + (k + u * KL) * ldb);
      UNROLL for (int u = 0; u < GEMV_U; ++u) {
        real bv[GV];
        VSPLIT(v[u], bv);
        UNROLL for (int r = 0; r < BM; ++r) {
          const real av = a[r][k + u * KL];
          UNROLL for (int q = 0; q < GV; ++q) acc[r][q] = FMA(av, bv[q], acc[r][q]);
        }
      }
    }
  }
  for (; k < K && c0 < N; k += KL) { /* the rest, and every k when the rows are unaligned */
    real bv[GV];
    UNROLL for (int q = 0; q < GV; ++q) bv[q] = c0 + q < N ? b[k * ldb + q] : ZERO;
    UNROLL for (int r = 0; r < BM; ++r) {
      const real av = a[r][k];
      UNROLL for (int q = 0; q < GV; ++q) acc[r][q] = FMA(av, bv[q], acc[r][q]);
    }
  }
  /* red[kl][r][n]: lane kl's partial sums of the group's BM x BN outputs */
  UNROLL for (int r = 0; r < BM; ++r)
    UNROLL for (int q = 0; q < GV; ++q) red[(kl * BM + r) * BN + cv * GV + q] = acc[r][q];
  BARRIER();
  for (int s = KL / 2; s > 0; s /= 2) {
    if (kl < s)
      UNROLL for (int r = 0; r < BM; ++r)
        UNROLL for (int q = 0; q < GV; ++q)
          red[(kl * BM + r) * BN + cv * GV + q] += red[((kl + s) * BM + r) * BN + cv * GV + q];
    BARRIER();
  }
  if (kl == 0)
    UNROLL for (int r = 0; r < BM; ++r)
      UNROLL for (int q = 0; q < GV; ++q)
        if (row0 + r < M && c0 + q < N)
          C[offC + (row0 + r) * ldc + c0 + q] = red[r * BN + cv * GV + q];
#else
  const int tx = LOCAL_X(), ty = LOCAL_Y();
  const int row = GROUP_Y() * BN + ty, col0 = GROUP_X() * BM;
  real acc[BM];
  UNROLL for (int c = 0; c < BM; ++c) acc[c] = ZERO;
  const GLOBAL real *a = A + offA + IMIN(row, M - 1) * lda; /* rows past M: never stored */
  const GLOBAL real *b = B + offB;
  const int cols = IMIN(N - col0, BM);
  const int vec = lda % VW == 0 && PTR_ALIGNED16(a);
  const int xv = N == 1 && ldb == 1 && PTR_ALIGNED16(b);
  int k = vec ? tx * VW : tx;
  if (vec) {
    for (; k + (GEMV_U - 1) * KS * VW + VW <= K; k += GEMV_U * KS * VW) {
      realV v[GEMV_U];
      UNROLL for (int u = 0; u < GEMV_U; ++u) v[u] = VLOADG(a + k + u * KS * VW);
      UNROLL for (int u = 0; u < GEMV_U; ++u) {
        real av[VW];
        VSPLIT(v[u], av);
        if (xv) { /* a contiguous x (N = 1): one 16-byte load for the VW elements */
          real xs[VW];
          const realV w = VLOADG(b + k + u * KS * VW);
          VSPLIT(w, xs);
          UNROLL for (int q = 0; q < VW; ++q) acc[0] = FMA(av[q], xs[q], acc[0]);
          continue;
        }
        UNROLL for (int q = 0; q < VW; ++q) {
          const GLOBAL real *x = b + (k + u * KS * VW + q) * ldb + col0;
          UNROLL for (int c = 0; c < BM; ++c)
            acc[c] = FMA(av[q], c < cols ? x[c] : ZERO, acc[c]);
        }
      }
    }
    for (; k < K; k += KS * VW) /* the tail: VW elements per item, checked */
      UNROLL for (int q = 0; q < VW; ++q)
        if (k + q < K)
          UNROLL for (int c = 0; c < BM; ++c)
            acc[c] = FMA(a[k + q], c < cols ? b[(k + q) * ldb + col0 + c] : ZERO, acc[c]);
  } else {
    for (; k < K; k += KS)
      UNROLL for (int c = 0; c < BM; ++c)
        acc[c] = FMA(a[k], c < cols ? b[k * ldb + col0 + c] : ZERO, acc[c]);
  }
  /* red[(c * BN + y) * KS + x]: the KS partial sums of output (row, col0 + c) side by side */
  UNROLL for (int c = 0; c < BM; ++c) red[(c * BN + ty) * KS + tx] = acc[c];
  BARRIER();
  for (int s = KS / 2; s > 0; s /= 2) {
    if (tx < s)
      UNROLL for (int c = 0; c < BM; ++c)
        red[(c * BN + ty) * KS + tx] += red[(c * BN + ty) * KS + tx + s];
    BARRIER();
  }
  if (tx == 0 && row < M)
    UNROLL for (int c = 0; c < BM; ++c)
      if (c < cols) C[offC + row * ldc + col0 + c] = red[(c * BN + ty) * KS];
#endif
}
