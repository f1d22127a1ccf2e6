/* naive: one output per work-item, a row of A and a column of B straight from global memory.
 * A group covers BM x BN outputs; the fast index runs along N so B reads coalesce and each
 * A element is broadcast across the group's row. No reuse beyond what caches give. */
#include "gemm_common.h"

KERNEL GEMM_SIGNATURE
{
  BATCH_PROLOGUE();
  const int col = GROUP_X() * BN + LOCAL_X(); /* 2-D groups: WG_X = BN, WG_Y = BM */
  const int row = GROUP_Y() * BM + LOCAL_Y();
  if (row >= M || col >= N)
    return;
  const GLOBAL real *a = A + offA + row * lda;
  const GLOBAL real *b = B + offB + col;
  real acc = ZERO;
  for (int k = 0; k < K; ++k)
    acc = FMA(a[k], b[k * ldb], acc);
  C[offC + row * ldc + col] = acc;
}
