/* splitk_reduce: C = the sum of SPLIT slices of a split-K workspace W laid out [S][Z][M][N]
 * (S slices of Z contiguous M x N partial products, slice stride sW elements). Grid: x over
 * the M*N elements (THREADS per group), z over the batch; C's batch index z = z0 * nb1 + z1
 * with element strides sC0/sC1, as in the GEMM kernels. */
#include "gemm_common.h"

KERNEL splitk_reduce(const int M, const int N, const int S,
                     const GLOBAL real *RESTRICT W, const int sW,
                     GLOBAL real *RESTRICT C, const int offC, const int ldc,
                     const int nb1, const int sC0, const int sC1)
{
  const int e = GROUP_X() * THREADS + LOCAL_X(), z = GROUP_Z();
  if (e >= M * N)
    return;
  const GLOBAL real *w = W + z * M * N + e;
  real acc = ZERO;
  for (int s = 0; s < S; ++s)
    acc += w[s * sW];
  C[offC + (z / nb1) * sC0 + (z % nb1) * sC1 + (e / N) * ldc + e % N] = acc;
}
