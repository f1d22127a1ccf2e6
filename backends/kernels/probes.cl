/* Calibration probes for the planner's level ceilings (docs/model.md), in the GEMM sources'
 * C dialect (gemm_common.h): one source for CUDA (CuPy) and OpenCL. Host defines: REAL_BYTES,
 * THREADS (work-items per 1-D group, a multiple of 8); PROBE_UNROLL (16-byte loads in flight
 * per item per step, default 4); WG_X defaults to THREADS. Every load is a 16-byte vector
 * (float4 / double2: LDG.E.128 / LDS.128 on NVIDIA) into its own accumulators, so the loads of
 * one step are independent and many bytes are in flight; every item writes its sum, so nothing
 * is dead code.
 *   stream_probe: the buffer is `chunks` chunks of `chunk` vectors (chunk a multiple of
 *     THREADS * PROBE_UNROLL). In pass r group g reads chunk (g + r) mod chunks, so one pass
 *     reads the whole buffer once and a group never reads a chunk twice in a row: an SM meets a
 *     chunk again only after its other groups have read many others, so L1 serves nothing.
 *     A buffer beyond the L2 measures DRAM, one well inside it the L2. Bytes read =
 *     reps * chunks * chunk * 16.
 *   shared_probe: a local array of THREADS * PROBE_UNROLL vectors; in pass r item t reads
 *     vectors ((t + r) mod THREADS) + q THREADS, q < PROBE_UNROLL: a half-warp reads 16
 *     consecutive vectors (two wavefronts, no bank conflict). Local-memory bandwidth =
 *     groups * THREADS * reps * PROBE_UNROLL * 16 / time.
 *   fma_probe: 8 independent FMA chains per item, REPS steps: FLOPs = items * REPS * 16.
 *   acc_probe (OpenCL on a CPU: CPU_VEC, PROBE_ACC_CHAINS): that many independent vector FMA chains
 *     of CPU_VEC lanes per item, as a register micro-tile's accumulators; FLOPs = items * reps
 *     * PROBE_ACC_CHAINS * CPU_VEC * 2. The chains that fill a core's FMA pipes: latency x pipes.
 */
#include "gemm_common.h"

#ifndef PROBE_UNROLL
  #define PROBE_UNROLL 4
#endif
#define PROBE_ACC (PROBE_UNROLL * VW)

/* acc[q * VW + e] += the e-th element of the 16-byte vector v (CUDA's float4 has no +). */
#define ADD_VECTOR(acc, q, v)                                                                \
  do {                                                                                       \
    real x_[VW];                                                                             \
    VSPLIT(v, x_);                                                                           \
    UNROLL for (int e_ = 0; e_ < VW; ++e_) (acc)[(q) * VW + e_] += x_[e_];                   \
  } while (0)

INLINE real sum_acc(const real *acc)
{
  real s = ZERO;
  UNROLL for (int i = 0; i < PROBE_ACC; ++i) s += acc[i];
  return s;
}

KERNEL stream_probe(const int chunk, const int chunks, const int reps,
                    const GLOBAL real *RESTRICT src, GLOBAL real *RESTRICT out)
{
  const int tid = LOCAL_ID();
  real acc[PROBE_ACC];
  UNROLL for (int i = 0; i < PROBE_ACC; ++i) acc[i] = ZERO;
  for (int r = 0; r < reps; ++r) {
    const GLOBAL real *base = src + ((GROUP_X() + r) % chunks) * chunk * VW; /* < 2^31 reals */
    for (int i = tid; i < chunk; i += THREADS * PROBE_UNROLL) {
      UNROLL for (int q = 0; q < PROBE_UNROLL; ++q) {
        const realV v = VLOADG(base + (i + q * THREADS) * VW);
        ADD_VECTOR(acc, q, v);
      }
    }
  }
  out[GROUP_X() * THREADS + tid] = sum_acc(acc);
}

KERNEL shared_probe(const int reps, GLOBAL real *RESTRICT out)
{
  LOCAL real ALIGN16 buf[THREADS * PROBE_UNROLL * VW];
  const int tid = LOCAL_ID();
  for (int i = tid; i < THREADS * PROBE_UNROLL * VW; i += THREADS)
    buf[i] = (real)(i % 61);
  BARRIER();
  real acc[PROBE_ACC];
  UNROLL for (int i = 0; i < PROBE_ACC; ++i) acc[i] = ZERO;
  for (int r = 0; r < reps; ++r) {
    const int v0 = (tid + r) % THREADS;
    UNROLL for (int q = 0; q < PROBE_UNROLL; ++q) {
      const realV v = VLOADL(buf + (v0 + q * THREADS) * VW);
      ADD_VECTOR(acc, q, v);
    }
  }
  out[GROUP_X() * THREADS + tid] = sum_acc(acc);
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

#if defined(TILEDMM_OPENCL) && defined(CPU_VEC) && defined(PROBE_ACC_CHAINS)
KERNEL acc_probe(const int reps, const real x, GLOBAL realN *RESTRICT out)
{
  const int gid = GROUP_X() * THREADS + LOCAL_ID();
  realN c[PROBE_ACC_CHAINS];
  UNROLL for (int q = 0; q < PROBE_ACC_CHAINS; ++q) c[q] = (realN)((real)(gid + q));
  const realN a = (realN)(x), b = (realN)((real)0.5);
  for (int r = 0; r < reps; ++r) {
    UNROLL for (int q = 0; q < PROBE_ACC_CHAINS; ++q) c[q] = fma(c[q], a, b);
  }
  realN s = c[0];
  UNROLL for (int q = 1; q < PROBE_ACC_CHAINS; ++q) s += c[q];
  out[gid] = s;
}
#endif
