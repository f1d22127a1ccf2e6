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
 * of two (the tree). Local memory: BM * BN * KS * GV elements (GEMV_T 0), BM * BN * KS (1).
 * GEMV_ONEPASS (with SPLIT_K > 1): one launch instead of slices + splitk_reduce. Every group
 * writes its K slice's partial sums to the workspace (C, slice stride sCk) as split-K does;
 * then it counts itself in its output block's counter (cnt: zero before the launch), and the
 * last of the SPLIT_K groups to arrive adds the slices in slice order (the same sum whichever
 * group is last) into Out and sets the counter back to zero for the next launch. */
#include "gemm_common.h"

#ifndef GEMV_ONEPASS
  #define GEMV_ONEPASS 0
#endif
#if GEMV_ONEPASS
  #if SPLIT_K < 2
    #error "gemv: the one-pass reduction needs split_k > 1"
  #endif
  #undef GEMM_EXTRA_PARAMS
  #define GEMM_EXTRA_PARAMS , GLOBAL real *RESTRICT Out, int offO, const int ldo, const int sO0, \
      const int sO1, volatile GLOBAL unsigned *RESTRICT cnt
  /* after the partial sums are stored: groups other than the block's last one return; the last
   * sees every slice (fences on both sides of the counter) through w_ (the slice-0 workspace)
   * and writes Out at offO (its batch matrix) */
  #define GEMV_LAST_GROUP()                                                                   \
    GLOBAL_FENCE();                                                                           \
    BARRIER();                                                                                \
    if (LOCAL_ID() == 0) {                                                                    \
      volatile GLOBAL unsigned *c_ = cnt + ((GROUP_Z() / SPLIT_K) * NUM_GROUPS_Y() +          \
                                            GROUP_Y()) * NUM_GROUPS_X() + GROUP_X();         \
      last_ = ATOMIC_INC(c_) == (unsigned)(SPLIT_K - 1);                                       \
      if (last_)                                                                              \
        *c_ = 0;                                                                              \
    }                                                                                         \
    BARRIER();                                                                                \
    if (!last_)                                                                               \
      return;                                                                                 \
    GLOBAL_FENCE();                                                                           \
    offO += (GROUP_Z() / SPLIT_K / nb1) * sO0 + (GROUP_Z() / SPLIT_K % nb1) * sO1;            \
    const volatile GLOBAL real *w_ = C + offC - (GROUP_Z() % SPLIT_K) * sCk
  /* the sum over the slices of workspace element e (slice order: deterministic); the last
   * group spreads its outputs over all its items, so their loads are in flight together */
  #define SLICES_SUM(e, out)                                                                  \
    do {                                                                                      \
      real s_ = ZERO;                                                                         \
      for (int i_ = 0; i_ < SPLIT_K; ++i_)                                                    \
        s_ += w_[i_ * sCk + (e)];                                                             \
      (out) = s_;                                                                             \
    } while (0)
#endif

#if KS < 1 || (KS & (KS - 1)) != 0
  #error "gemv: ks must be a power of two (the partial sums meet in a tree)"
#endif
#ifndef GEMV_U
  #define GEMV_U 4 /* loads in flight per item before their FMAs */
#endif

/* GEMV_SHFL: the partial sums meet in warp shuffles (CUDA: a warp is 32 items in linear
 * order) where a warp's lanes of one output are 32 / CV (x @ B) or KS <= 32 (A @ x) apart in
 * powers of two; OpenCL keeps the tree in local memory (no portable shuffle). */
#ifndef GEMV_SHFL
  #define GEMV_SHFL 1
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
#if GEMV_T == 0
  #if CV > 32 || 32 % CV || THREADS % 32
    #undef GEMV_SHFL
  #endif
#elif KS > 32
  #undef GEMV_SHFL
#endif
#if !defined(TILEDMM_CUDA) || !defined(GEMV_SHFL)
  #undef GEMV_SHFL
  #define GEMV_SHFL 0
#endif

KERNEL GEMM_SIGNATURE
{
#if GEMV_T == 0 || !GEMV_SHFL /* (A @ x by shuffles needs no local memory) */
  LOCAL real ALIGN16 red[RED];
#endif
#if GEMV_ONEPASS
  LOCAL int last_;
#endif
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
#if GEMV_SHFL
  /* a warp holds 32 / CV lanes of each column vector: shuffles add them, then each warp's
   * first CV items leave the warp's sums in red[w][r][n] and BM * BN items add the warps' */
  UNROLL for (int o = 16; o >= CV; o /= 2)
    UNROLL for (int r = 0; r < BM; ++r)
      UNROLL for (int q = 0; q < GV; ++q) acc[r][q] += WARP_DOWN(acc[r][q], o);
  if (tid % 32 < CV)
    UNROLL for (int r = 0; r < BM; ++r)
      UNROLL for (int q = 0; q < GV; ++q)
        red[((tid / 32) * BM + r) * BN + cv * GV + q] = acc[r][q];
  BARRIER();
  for (int e = tid; e < BM * BN; e += THREADS) {
    real s_ = ZERO;
    for (int w = 0; w < THREADS / 32; ++w) s_ += red[w * BM * BN + e];
    if (row0 + e / BN < M && GROUP_X() * BN + e % BN < N)
      C[offC + (row0 + e / BN) * ldc + GROUP_X() * BN + e % BN] = s_;
  }
#else
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
#endif
#if GEMV_ONEPASS
  GEMV_LAST_GROUP();
  for (int e = tid; e < BM * BN; e += THREADS) { /* one output per item: all loads in flight */
    const int r = row0 + e / BN, col = GROUP_X() * BN + e % BN;
    if (r < M && col < N)
      SLICES_SUM(r * ldc + col, Out[offO + r * ldo + col]);
  }
#endif
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
#if GEMV_SHFL
  /* KS <= 32 items of a row are lanes of one warp (x fastest): shuffles, no barrier */
  UNROLL for (int o = KS / 2; o > 0; o /= 2)
    UNROLL for (int c = 0; c < BM; ++c) acc[c] += WARP_DOWN(acc[c], o);
  if (tx == 0 && row < M)
    UNROLL for (int c = 0; c < BM; ++c)
      if (c < cols) C[offC + row * ldc + col0 + c] = acc[c];
#else
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
#if GEMV_ONEPASS
  GEMV_LAST_GROUP();
  for (int e = LOCAL_ID(); e < BM * BN; e += THREADS) {
    const int r = GROUP_Y() * BN + e / BM, c = e % BM;
    if (r < M && c < cols)
      SLICES_SUM(r * ldc + col0 + c, Out[offO + r * ldo + col0 + c]);
  }
#endif
#endif
}
