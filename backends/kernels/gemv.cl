/* gemv: the memory-bound path of the naive family for skinny and vector products (one output
 * side short: M or N small, or a 1-D operand). Every element of the long operand is read once
 * per group of outputs and the K loop is split across KS work-items whose partial sums meet in
 * local memory, so even a single output row or column keeps enough loads in flight.
 * GEMV_T 0 (M short, e.g. x @ B): a group owns BM rows x BN columns; items run along N (BN of
 *   them: coalesced B reads, A broadcast) and along K (KS of them).
 * GEMV_T 1 (N short, e.g. A @ x): a group owns BN rows x BM columns; items run along K (KS of
 *   them: coalesced A reads) and along M (BN of them).
 * Group shape (WG_X, WG_Y): (BN, KS) for GEMV_T 0, (KS, BN) for GEMV_T 1. */
#include "gemm_common.h"

KERNEL GEMM_SIGNATURE
{
  LOCAL real red[BM * BN * KS];
  BATCH_PROLOGUE();
  const int tx = LOCAL_X(), ty = LOCAL_Y(), tid = LOCAL_ID();
  real acc[BM];
  UNROLL for (int r = 0; r < BM; ++r) acc[r] = ZERO;
#if GEMV_T == 0
  const int row0 = GROUP_Y() * BM, col = GROUP_X() * BN + tx;
  if (col < N) {
    for (int k = ty; k < K; k += KS) {
      const real bv = B[offB + k * ldb + col];
      UNROLL for (int r = 0; r < BM; ++r)
        if (row0 + r < M) acc[r] = FMA(A[offA + (row0 + r) * lda + k], bv, acc[r]);
    }
  }
  /* red[(r * BN + x) * KS + y]: the KS partial sums of output (row0 + r, x) side by side */
  UNROLL for (int r = 0; r < BM; ++r) red[(r * BN + tx) * KS + ty] = acc[r];
#else
  const int row = GROUP_Y() * BN + ty, col0 = GROUP_X() * BM;
  if (row < M) {
    for (int k = tx; k < K; k += KS) {
      const real av = A[offA + row * lda + k];
      UNROLL for (int c = 0; c < BM; ++c)
        if (col0 + c < N) acc[c] = FMA(av, B[offB + k * ldb + col0 + c], acc[c]);
    }
  }
  /* red[(c * BN + y) * KS + x]: the KS partial sums of output (row, col0 + c) side by side */
  UNROLL for (int c = 0; c < BM; ++c) red[(c * BN + ty) * KS + tx] = acc[c];
#endif
  BARRIER();
  for (int o = tid; o < BM * BN; o += KS * BN) {
    real s = ZERO;
    for (int p = 0; p < KS; ++p) s += red[o * KS + p];
#if GEMV_T == 0
    const int r = row0 + o / BN, c = GROUP_X() * BN + o % BN;
#else
    const int r = GROUP_Y() * BN + o % BN, c = col0 + o / BN;
#endif
    if (r < M && c < N) C[offC + r * ldc + c] = s;
  }
}
