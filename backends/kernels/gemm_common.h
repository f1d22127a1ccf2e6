/* tiledmm GEMM kernels: the common C dialect shared by OpenCL and CUDA.
 *
 * The family sources (naive.cl, tiled.cl, register.cl) are written against these macros only,
 * so one source compiles as OpenCL C (PyOpenCL) and as CUDA C (CuPy RawModule, nvcc), the way
 * CLBlast runs its OpenCL kernels on CUDA. Parameters arrive as #defines from the host:
 *   REAL_BYTES 4|8, BM BN BK (block tile), TM TN (micro-tile), THREADS (work-items per group),
 * plus family knobs documented in each source. Every kernel has the same signature:
 *   gemm(M, N, K, A, offA, lda, B, offB, ldb, C, offC, ldc, nb1, sA0, sA1, sB0, sB1, sC0,
 *        sC1, sCk)
 * C = A @ B, row-major, offsets and leading dimensions in elements. The grid's third dimension
 * walks a batch (and SPLIT_K slices of K): BATCH_PROLOGUE() moves A, B and C to this group's
 * matrix (batch index z = z0 * nb1 + z1, element strides sX0/sX1 per operand, 0 for a broadcast
 * operand) and, with SPLIT_K > 1, to its K slice, writing the slice's partial product at
 * C + slice * sCk (a workspace that reduce.cl sums).
 */
#ifndef TILEDMM_GEMM_COMMON_H
#define TILEDMM_GEMM_COMMON_H

#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
  #define TILEDMM_OPENCL 1
  #if REAL_BYTES == 8
    #pragma OPENCL EXTENSION cl_khr_fp64 : enable
  #endif
  #define KERNEL __kernel void __attribute__((reqd_work_group_size(WG_X, WG_Y, 1)))
  #define GLOBAL __global
  #define LOCAL __local
  #define LOCAL_PTR __local /* address space of a pointer parameter into local memory */
  #define RESTRICT restrict
  #define INLINE static inline
  #define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
  #define LOCAL_X() ((int)get_local_id(0))
  #define LOCAL_Y() ((int)get_local_id(1))
  #define GROUP_X() ((int)get_group_id(0))
  #define GROUP_Y() ((int)get_group_id(1))
  #define NUM_GROUPS_X() ((int)get_num_groups(0))
  #define NUM_GROUPS_Y() ((int)get_num_groups(1))
  #define GROUP_Z() ((int)get_group_id(2))
  #define UNROLL _Pragma("unroll")
  /* a*b+c, not fma()/mad(): some PoCL builds call builtins out of line; compilers contract
   * this into an FMA where the device has one (OpenCL allows FP_CONTRACT by default). */
  #define FMA(a, b, c) ((a) * (b) + (c))
#else /* CUDA C */
  #define TILEDMM_CUDA 1
  #ifdef MIN_BLOCKS /* resident blocks per SM the register allocation must allow */
    #define KERNEL extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
  #else
    #define KERNEL extern "C" __global__ void __launch_bounds__(THREADS)
  #endif
  #define GLOBAL
  #define LOCAL __shared__
  #define LOCAL_PTR /* shared pointers are generic pointers in CUDA */
  #define RESTRICT __restrict__
  #define INLINE __device__ __forceinline__
  #define BARRIER() __syncthreads()
  #define LOCAL_X() ((int)threadIdx.x)
  #define LOCAL_Y() ((int)threadIdx.y)
  #define GROUP_X() ((int)blockIdx.x)
  #define GROUP_Y() ((int)blockIdx.y)
  #define NUM_GROUPS_X() ((int)gridDim.x)
  #define NUM_GROUPS_Y() ((int)gridDim.y)
  #define GROUP_Z() ((int)blockIdx.z)
  #define UNROLL _Pragma("unroll")
  #define FMA(a, b, c) fma((a), (b), (c))
#endif

/* Element type and the 16-byte vector (float4 / double2): VW elements per vector. */
#if REAL_BYTES == 8
  #define REAL_NAME double
  typedef double real;
  typedef double2 realV;
  #define VW 2
#else
  #define REAL_NAME float
  typedef float real;
  typedef float4 realV;
  #define VW 4
#endif

/* 16-byte loads and stores (G: global, L: local memory). p must be 16-byte aligned: the host
 * selects ALIGNED variants only then, and local tiles are declared ALIGN16. Plain pointer casts
 * rather than vload/vstore, which some PoCL builds call out of line. */
#ifdef TILEDMM_OPENCL
  #define ALIGN16 __attribute__((aligned(16)))
  #define VLOADG(p) (*(const GLOBAL realV *)(p))
  #define VLOADL(p) (*(const LOCAL realV *)(p))
  #define VSTOREL(v, p) (*(LOCAL realV *)(p) = (v))
#else
  #define ALIGN16 __align__(16)
  #define VLOADG(p) (*(const realV *)(p))
  #define VLOADL(p) (*(const realV *)(p))
  #define VSTOREL(v, p) (*(realV *)(p) = (v))
#endif

/* Between work-groups: an atomic increment of an unsigned counter (returns the old value) and
 * a fence that orders this item's global writes before its later accesses (gemv.cl's one-pass
 * split-K: the last group of a column block to finish sums the slices). */
#ifdef TILEDMM_OPENCL
  #define ATOMIC_INC(p) atomic_inc(p)
  #define GLOBAL_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#else
  #define ATOMIC_INC(p) atomicAdd((unsigned *)(p), 1u)
  #define GLOBAL_FENCE() __threadfence()
  /* v of the lane o above in the warp (CUDA only: gemv.cl's GEMV_SHFL reductions) */
  #define WARP_DOWN(v, o) __shfl_down_sync(0xffffffffu, (v), (o))
#endif

/* Whether pointer p is 16-byte aligned (kernels that decide at run time, e.g. gemv.cl). */
#define PTR_ALIGNED16(p) ((((size_t)(p)) & 15) == 0)

/* Unpack a 16-byte vector into r[0..VW-1]. */
#if VW == 4
  #define VSPLIT(v, r) do { (r)[0] = (v).x; (r)[1] = (v).y; (r)[2] = (v).z; (r)[3] = (v).w; } while (0)
#else
  #define VSPLIT(v, r) do { (r)[0] = (v).x; (r)[1] = (v).y; } while (0)
#endif

/* Work-group shape: WG_X x WG_Y work-items (1-D unless the host says otherwise). The linear id
 * is the same on both sides: x fastest, as CUDA numbers threads in a warp. */
#ifndef WG_X
  #define WG_X THREADS
  #define WG_Y 1
#endif
#define LOCAL_ID() (LOCAL_Y() * WG_X + LOCAL_X())

#define ZERO ((real)0)
#define IMIN(a, b) ((a) < (b) ? (a) : (b))

/* The CPU kernels' vectors (OpenCL with CPU_VEC: register.cl's USE_LOCAL 0, gemv_cpu.cl):
 * realN holds CPU_VEC elements; realNu is the same type aligned to one element only, for
 * unaligned vector loads and stores without vloadN calls. */
#if defined(TILEDMM_OPENCL) && defined(CPU_VEC)
  #define CAT_(a, b) a##b
  #define CAT(a, b) CAT_(a, b)
  #define realN CAT(REAL_NAME, CPU_VEC)
typedef realN __attribute__((aligned(REAL_BYTES))) realNu;
#endif

#ifndef NO_BATCH
  #define NO_BATCH 0
#endif
#ifndef SPLIT_K
  #define SPLIT_K 1 /* K slices per product (partial products into a workspace) */
#endif

/* The common kernel signature: row-major C[M,N] = A[M,K] @ B[K,N], batched over grid z.
 * A source may append parameters (a comma first) by redefining GEMM_EXTRA_PARAMS. */
#define GEMM_EXTRA_PARAMS
#define GEMM_SIGNATURE                                                                       \
  gemm(const int M, const int N, int K,                                                     \
       const GLOBAL real *RESTRICT A, int offA, const int lda,                              \
       const GLOBAL real *RESTRICT B, int offB, const int ldb,                              \
       GLOBAL real *RESTRICT C, int offC, const int ldc,                                    \
       const int nb1, const int sA0, const int sA1, const int sB0, const int sB1,           \
       const int sC0, const int sC1, const int sCk GEMM_EXTRA_PARAMS)

/* K per slice: a multiple of BK (so 16-byte alignment and the tile loop are kept). */
#define K_SLICE(K) (((((K) + SPLIT_K - 1) / SPLIT_K) + BK - 1) / BK * BK)

/* This group's matrix of the batch, and its K slice (see the header comment). Slices past the
 * end of K get K = 0 and write zeros, so the reduction sums every slice. The batch moves the
 * 32-bit element offsets, not the pointers: A, B and C stay kernel parameters, which kept
 * NVRTC's register allocation of the 128x64 (8x4) register kernel at 87 instead of 107
 * (2 resident blocks per SM either way at 256 threads; see docs/kernels.md). */
#if NO_BATCH /* a single product without split-K: the prologue is empty (K stays constant) */
#define BATCH_PROLOGUE() do { } while (0)
#else
#define BATCH_PROLOGUE()                                                                     \
  do {                                                                                       \
    const int z_ = GROUP_Z() / SPLIT_K, ks_ = GROUP_Z() % SPLIT_K;                           \
    const int z0_ = z_ / nb1, z1_ = z_ % nb1;                                                \
    offA += z0_ * sA0 + z1_ * sA1;                                                           \
    offB += z0_ * sB0 + z1_ * sB1;                                                           \
    offC += z0_ * sC0 + z1_ * sC1 + ks_ * sCk;                                               \
    if (SPLIT_K > 1) {                                                                       \
      const int kb_ = ks_ * K_SLICE(K);                                                      \
      const int kn_ = K - kb_ < K_SLICE(K) ? K - kb_ : K_SLICE(K);                           \
      K = kn_ > 0 ? kn_ : 0;                                                                 \
      offA += K ? kb_ : 0;                                                                   \
      offB += K ? kb_ * ldb : 0;                                                             \
    }                                                                                        \
  } while (0)
#endif

#endif /* TILEDMM_GEMM_COMMON_H */
