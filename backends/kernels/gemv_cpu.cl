/* gemv_cpu: the gemv path for CPUs (OpenCL on PoCL). gemv.cl's work-groups meet in local memory
 * behind barriers, which a CPU runtime emulates by splitting each item's code at the barrier;
 * here no item waits for another: every item owns whole outputs, reads its part of the long
 * operand once in native vectors (realN: CPU_VEC elements, register.cl's CPU type) and writes
 * its results. The matrix streams from memory once; that is the bound.
 * GEMV_T 1 (N short, e.g. A @ x): an item owns one row of A and the group's BM columns of B;
 *   its K loop reads the row in vectors and x's matching elements (one vector when x is
 *   contiguous, else gathered), and adds the lanes at the end. Groups of BN rows (WG_Y).
 * GEMV_T 0 (M short, e.g. x @ B): an item owns CW = NV * CPU_VEC contiguous columns and the
 *   group's BM rows of A; its K loop reads CW elements of each B row, one group per item.
 * K slices (SPLIT_K) come from the batch prologue, as in every family (splitk_reduce sums). */
#include "gemm_common.h"

#ifndef TILEDMM_OPENCL
  #error "gemv_cpu.cl is the OpenCL CPU variant of the gemv path"
#endif
/* realN, realNu: the CPU kernels' vector types (gemm_common.h) */

INLINE real lanes_sum(const realN v)
{
  real t[CPU_VEC];
  *(realNu *)t = v;
  real s = ZERO;
  UNROLL for (int i = 0; i < CPU_VEC; ++i) s += t[i];
  return s;
}

KERNEL GEMM_SIGNATURE
{
  BATCH_PROLOGUE();
#if GEMV_T == 1
  const int row = GROUP_Y() * BN + LOCAL_Y(), col0 = GROUP_X() * BM;
  if (row >= M)
    return;
  const int cols = IMIN(N - col0, BM);
  const GLOBAL real *a = A + offA + row * lda;
  const GLOBAL real *b = B + offB + col0;
  realN acc[BM];
  UNROLL for (int c = 0; c < BM; ++c) acc[c] = (realN)(ZERO);
  int k = 0;
  if (cols == 1 && ldb == 1) { /* a contiguous x */
    for (; k + CPU_VEC <= K; k += CPU_VEC)
      acc[0] = FMA(*(const GLOBAL realNu *)(a + k), *(const GLOBAL realNu *)(b + k), acc[0]);
  } else {
    for (; k + CPU_VEC <= K; k += CPU_VEC) {
      const realN av = *(const GLOBAL realNu *)(a + k);
      UNROLL for (int c = 0; c < BM; ++c) {
        real xs[CPU_VEC];
        UNROLL for (int i = 0; i < CPU_VEC; ++i) xs[i] = c < cols ? b[(k + i) * ldb + c] : ZERO;
        acc[c] = FMA(av, *(const realNu *)xs, acc[c]);
      }
    }
  }
  real rest[BM];
  UNROLL for (int c = 0; c < BM; ++c) rest[c] = ZERO;
  for (; k < K; ++k) /* the last K % CPU_VEC elements */
    UNROLL for (int c = 0; c < BM; ++c) rest[c] = FMA(a[k], c < cols ? b[k * ldb + c] : ZERO, rest[c]);
  UNROLL for (int c = 0; c < BM; ++c)
    if (c < cols)
      C[offC + row * ldc + col0 + c] = lanes_sum(acc[c]) + rest[c];
#else
  #define CW (NV * CPU_VEC)
  const int c0 = GROUP_X() * CW, row0 = GROUP_Y() * BM;
  const int rows = IMIN(M - row0, BM), cols = IMIN(N - c0, CW);
  const GLOBAL real *a[BM]; /* rows past M read row M-1 and are never stored */
  UNROLL for (int r = 0; r < BM; ++r) a[r] = A + offA + IMIN(row0 + r, M - 1) * lda;
  const GLOBAL real *b = B + offB + c0;
  realN acc[BM][NV];
  UNROLL for (int r = 0; r < BM; ++r)
    UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = (realN)(ZERO);
  for (int k = 0; k < K; ++k, b += ldb) {
    realN bv[NV];
    if (cols == CW) {
      UNROLL for (int v = 0; v < NV; ++v) bv[v] = *(const GLOBAL realNu *)(b + v * CPU_VEC);
    } else { /* right edge: the columns that exist, zeros elsewhere */
      real bs[CW];
      UNROLL for (int j = 0; j < CW; ++j) bs[j] = j < cols ? b[j] : ZERO;
      UNROLL for (int v = 0; v < NV; ++v) bv[v] = *(const realNu *)(bs + v * CPU_VEC);
    }
    UNROLL for (int r = 0; r < BM; ++r) {
      const realN av = (realN)(a[r][k]);
      UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = FMA(av, bv[v], acc[r][v]);
    }
  }
  UNROLL for (int r = 0; r < BM; ++r) {
    if (r >= rows)
      break;
    GLOBAL real *c = C + offC + (row0 + r) * ldc + c0;
    if (cols == CW) {
      UNROLL for (int v = 0; v < NV; ++v) *(GLOBAL realNu *)(c + v * CPU_VEC) = acc[r][v];
    } else {
      real cs[CW];
      UNROLL for (int v = 0; v < NV; ++v) *(realNu *)(cs + v * CPU_VEC) = acc[r][v];
      for (int j = 0; j < cols; ++j) c[j] = cs[j];
    }
  }
#endif
}
