/* Calibration probes for the planner's level ceilings (docs/model.md), in the GEMM sources'
 * C dialect (gemm_common.h): one source for CUDA (CuPy) and OpenCL. Host defines: REAL_BYTES,
 * THREADS (work-items per 1-D group); WG_X defaults to THREADS.
 *   stream_probe: each item reads N reals grid-stride REPS times (offset by the pass, so no
 *     load can be hoisted) and writes one sum: DRAM bandwidth for N beyond the L2, L2
 *     bandwidth for N well inside it. Bytes read = N * REPS * REAL_BYTES.
 *   shared_probe: each item reads SHARED_N reals of a local array at conflict-free addresses,
 *     REPS passes: local-memory bandwidth = groups * THREADS * REPS * 8 * REAL_BYTES / time.
 *   fma_probe: 8 independent FMA chains per item, REPS steps: FLOPs = items * REPS * 16.
 */
#include "gemm_common.h"

#define SHARED_N (THREADS * 8)

KERNEL stream_probe(const int n, const int reps, const GLOBAL real *RESTRICT src,
                    GLOBAL real *RESTRICT out)
{
  const int stride = NUM_GROUPS_X() * THREADS;
  const int gid = GROUP_X() * THREADS + LOCAL_ID();
  real acc = ZERO;
  for (int r = 0; r < reps; ++r)
    for (int i = gid; i < n; i += stride) {
      const int j = i + r * 32 < n ? i + r * 32 : i + r * 32 - n;
      acc += src[j];
    }
  out[gid] = acc;
}

KERNEL shared_probe(const int reps, GLOBAL real *RESTRICT out)
{
  LOCAL real buf[SHARED_N];
  const int tid = LOCAL_ID();
  for (int i = tid; i < SHARED_N; i += THREADS)
    buf[i] = (real)i;
  BARRIER();
  real acc[8];
  UNROLL for (int q = 0; q < 8; ++q) acc[q] = ZERO;
  for (int r = 0; r < reps; ++r) {
    UNROLL for (int q = 0; q < 8; ++q) /* consecutive items, consecutive words: no conflict */
      acc[q] += buf[(q * THREADS + tid + r) % SHARED_N];
  }
  real s = ZERO;
  UNROLL for (int q = 0; q < 8; ++q) s += acc[q];
  out[GROUP_X() * THREADS + tid] = s;
}

KERNEL fma_probe(const int reps, const real x, GLOBAL real *RESTRICT out)
{
  const int gid = GROUP_X() * THREADS + LOCAL_ID();
  real c[8];
  UNROLL for (int q = 0; q < 8; ++q) c[q] = (real)(gid + q);
  for (int r = 0; r < reps; ++r) {
    UNROLL for (int q = 0; q < 8; ++q) c[q] = FMA(c[q], x, (real)0.5);
  }
  real s = ZERO;
  UNROLL for (int q = 0; q < 8; ++q) s += c[q];
  out[gid] = s;
}
