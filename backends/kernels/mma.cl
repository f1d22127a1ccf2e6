/* mma: register tiling whose micro-kernel is a warp-level tensor-core multiply-accumulate.
 *
 * The block computes a BM x BN tile of C with WARPS_M x WARPS_N warps; each warp owns a
 * (BM/WARPS_M) x (BN/WARPS_N) sub-tile made of MI x NI fragments of FM x FN (the mma.sync
 * shape), and walks K in steps of FK. A (BM x BK, row-major) and B (BK x BN, row-major) stage
 * tiles live in shared memory, STAGES deep: cp.async copies tile kt+STAGES-1 while tile kt is
 * multiplied (one barrier per BK step). Rows are padded (SA_LD, SB_LD from mma_spec.py) so the
 * fragment loads hit distinct banks. Edge tiles are zero-filled by cp.async's src-size operand.
 *
 * MMA_KIND 1: f64 in/out, DMMA (FM x FN x FK = 8x8x4, 16x8x4, 16x8x8 or 16x8x16); every
 *   fragment register is one 8-byte shared load straight into the instruction's register tuple
 *   (loads that needed shuffling into the tuple made the compiler rebuild it for every DMMA).
 * MMA_KIND 2/3: f16/bf16 in (stored as 16-bit words), f32 accumulate, f16/bf16 out; 16x8x16
 *   with ldmatrix.x4 (A) and ldmatrix.x4.trans (B).
 * MMA_KIND 4: f32 in/out, inputs rounded to TF32 (TF32_RNA: cvt.rna or cvt.rn, per fragment
 *   register or once per stage in shared memory), 16x8x8; FRAG_PIPE double-buffers fragments
 *   across the stage boundary.
 *
 * MMA_PTX (CUDA; OpenCL only with MMA_PTX_OPENCL, an experiment for NVIDIA's compiler) uses the
 * PTX instructions. Otherwise (PoCL in CI, or MMA_SCALAR 1) the same tile walk, stages, padded
 * layout and C-fragment ownership run with plain FMAs: each work-item computes the elements its
 * lane owns in the mma C fragment from the shared tiles, so the index arithmetic is exercised.
 * Signature as gemm_common.h's GEMM_SIGNATURE (A, B, C typed per kind); the batch walks grid z
 * like BATCH_PROLOGUE, without K slices (sCk is ignored).
 */
#include "gemm_common.h"

#if (defined(TILEDMM_CUDA) && !MMA_SCALAR) || (defined(TILEDMM_OPENCL) && defined(MMA_PTX_OPENCL))
  #define MMA_PTX 1
#else
  #define MMA_PTX 0
#endif

#if MMA_KIND == 1
  typedef double elem_t;
  typedef double out_t;
  typedef double acc_t;
#elif MMA_KIND == 4
  typedef float elem_t;
  typedef float out_t;
  typedef float acc_t;
#else
  typedef unsigned short elem_t; /* f16 / bf16 bits */
  typedef unsigned short out_t;
  typedef float acc_t;
#endif

#ifdef TILEDMM_OPENCL
  #define F2U(x) as_uint(x)
  #define U2F(x) as_float(x)
#else
  #define F2U(x) __float_as_uint(x)
  #define U2F(x) __uint_as_float(x)
#endif

#define WM (BM / WARPS_M)
#define WN (BN / WARPS_N)
#define MI (WM / FM)
#define NI (WN / FN)
#define CF (FM * FN / 32)      /* accumulator elements per lane per fragment */
#define CH (16 / ELEM_BYTES)   /* elements per 16-byte chunk */
#define VA (ALIGNED_A ? CH : 1) /* elements per copy */
#define VB (ALIGNED_B ? CH : 1)
#define A_PIECES (BM * BK / VA)
#define B_PIECES (BK * BN / VB)
#define A_ITERS ((A_PIECES + THREADS - 1) / THREADS)
#define B_ITERS ((B_PIECES + THREADS - 1) / THREADS)
#ifndef GROUP_M
  #define GROUP_M 1
#endif
#ifndef SMEM_CVTA_ASM
  #define SMEM_CVTA_ASM 0
#endif
/* KK_UNROLL 0: the FK steps of a stage fully unrolled (fragment loads of later steps hoisted:
 * more registers, more overlap); 1: one step at a time (fewer registers; the DMMA pipe is slow
 * enough that the next step's shared loads hide behind the current step's multiplies). */
#ifndef KK_UNROLL
  #define KK_UNROLL 0
#endif
/* COPY_AFTER: FK steps of the stage multiplied before the next stage's cp.async copies are
 * issued (0: copies first, right after the barrier). The copies and ldmatrix are volatile asm,
 * so with 0 every fragment load of the stage waits behind the copies in the memory pipe. */
#ifndef COPY_AFTER
  #define COPY_AFTER 0
#endif
#if COPY_AFTER * FK < BK
  #define COPY_AT (COPY_AFTER * FK)
#else
  #define COPY_AT BK
#endif
/* TF32 (MMA_KIND 4) input rounding: 1 every fragment register rounded by cvt.rna as it is
 * loaded (sm_90 emulates cvt.rna with a compare and an add: two instructions per HMMA in the
 * inner loop); 2 each thread rounds the pieces it copied in place in the stage tile, once, after
 * its cp.async wait and before the barrier (ties away as cvt.rna; about a quarter of the
 * conversions for 64x64 warp tiles, outside the HMMA stream); 0 the raw float32 bits, which the
 * tensor core truncates. 3 and 4 round to nearest even (cvt.rn.tf32.f32: one F2FP instruction
 * on sm_90, the integer code before sm_90 and off CUDA): 3 every fragment register as 1; 4 in
 * the stage tile as 2, but off the barrier's path: halfway through multiplying stage kt
 * (TF32_ROUND_AT k-steps in, after the next copies are issued) each thread waits for its own
 * copies of stage kt+1 and rounds them, so the rounding overlaps the other warps' HMMAs and the
 * next barrier publishes it. */
#ifndef TF32_RNA
  #define TF32_RNA 1
#endif
#define TF32_IN_LOOP (MMA_KIND == 4 && (TF32_RNA == 1 || TF32_RNA == 3))
#define TF32_IN_STAGE (MMA_KIND == 4 && (TF32_RNA == 2 || TF32_RNA == 4))
#define TF32_EVEN (TF32_RNA == 3 || TF32_RNA == 4)
#if defined(TILEDMM_CUDA) && defined(__CUDA_ARCH__)
  #define TF32_CVT_RN (__CUDA_ARCH__ >= 900) /* cvt.rn.tf32.f32 exists from sm_90 */
#else
  #define TF32_CVT_RN 0
#endif
/* TF32_LDSM 1: A fragments by one ldmatrix.x4 each instead of four 4-byte shared loads (B has
 * no 32-bit transposing ldmatrix: it keeps the 4-byte loads) */
#ifndef TF32_LDSM
  #define TF32_LDSM 0
#endif
/* TF32_BVEC 1 (warp tiles 8 fragments wide): a lane's n slot g of fragment j is column
 * g * NI + j of the warp tile, so its B values for all NI fragments of a k row are NI
 * consecutive floats: two 16-byte loads per row instead of NI 4-byte loads. The B stage rows
 * are unpadded (SB_LD = BN) and their 16-byte chunks XOR-swizzled by the row (BSWZ: chunk c of
 * row k is stored at c ^ (k&1 | (k&2)<<1)), so the 8 lanes of a quarter-warp, rows t and chunks
 * 2g (+1), hit 8 distinct bank groups. C columns follow the same map (CCOL). */
#ifndef TF32_BVEC
  #define TF32_BVEC 0
#endif
#if MMA_KIND == 4 && TF32_BVEC
  #if NI != 8 || BN % 32
    #error "mma.cl: TF32_BVEC needs warp tiles of 8 fragments (64 columns) and BN % 32 == 0"
  #endif
  #define CCOL(j, s) ((s) * NI + (j))
  #define BSWZ(k) (((k) & 1) | (((k) & 2) << 1))
  #define BS_COL(k, c) (((((c) >> 2) ^ BSWZ(k)) << 2) | ((c) & 3))
#else
  #define CCOL(j, s) ((j) * FN + (s)) /* column of n slot s of fragment j in the warp tile */
  #define BS_COL(k, c) (c)            /* where column c of B stage row k is stored */
#endif
/* TF32_RNA 4: k-steps of stage kt multiplied before stage kt+1 is awaited and rounded (at
 * least COPY_AT: the wait counts the copies issued this iteration; default half the stage) */
#ifndef TF32_ROUND_AT
  #define TF32_ROUND_AT (BK / FK / 2)
#endif
#if TF32_ROUND_AT * FK < COPY_AT
  #define ROUND_AT COPY_AT
#elif TF32_ROUND_AT * FK < BK
  #define ROUND_AT (TF32_ROUND_AT * FK)
#else
  #define ROUND_AT BK
#endif
/* FRAG_PIPE (TF32: option tf32_pipe; float16/bfloat16: frag_pipe): fragments double-buffered in registers, each k-step's loads issued before the
 * previous k-step's multiplies, across the stage boundary too. The barrier comes once the
 * stage's last fragments are in registers, so after it the stage just read takes the copies of
 * tile kt+STAGES (STAGES tiles in flight, not STAGES-1) and the next tile's first fragments
 * load; the last k-step is multiplied after that (1) or before the barrier (2). 3: after the
 * barrier only the next fragments load and the last k-step multiplies; the copies (of tile
 * kt+STAGES-1, into the stage of tile kt-1) wait until the next tile's first k-step is issued
 * (STAGES-1 tiles in flight, as without the pipe); 4: 3 with the last k-step as in 2 (ptxas
 * then interleaves its multiplies with the next tile's fragment loads after the barrier). Stage rounding (TF32_RNA 2, 4) happens
 * TF32_ROUND_AT k-steps into the stage (2: just before the barrier).
 * (Half the last k-step on either side of the barrier spills at 64x64 warp tiles.) */
#ifndef FRAG_PIPE
  #define FRAG_PIPE 0
#endif
#if FRAG_PIPE && MMA_KIND < 2
  #error "mma.cl: FRAG_PIPE is for TF32, float16 and bfloat16 (MMA_KIND 2-4)"
#endif
#define PIPE_DEFER (FRAG_PIPE >= 3)                       /* copies after the next k-step */
#define PIPE_MMA_FIRST (FRAG_PIPE == 2 || FRAG_PIPE == 4) /* last k-step before the barrier */
#if FRAG_PIPE && ((BK / FK) % 2 || (COPY_AFTER && !PIPE_DEFER))
  #error "mma.cl: FRAG_PIPE needs an even number of k-steps per stage (and COPY_AFTER only in 3)"
#endif
/* FRAG_PIPE 3: k-steps multiplied before A's copies (COPY_AFTER, default 1) and B's (TF32_COPY_B,
 * default the same); both before the last k-step, whose wait counts them */
#if COPY_AFTER > 0
  #define PIPE_COPY_A COPY_AFTER
#else
  #define PIPE_COPY_A 1
#endif
#ifdef TF32_COPY_B
  #define PIPE_COPY_B TF32_COPY_B
#else
  #define PIPE_COPY_B PIPE_COPY_A
#endif
#define PIPE_COPY_LAST (PIPE_COPY_A > PIPE_COPY_B ? PIPE_COPY_A : PIPE_COPY_B)
#if PIPE_DEFER && (PIPE_COPY_LAST >= BK / FK || PIPE_COPY_A < 1 || PIPE_COPY_B < 1)
  #error "mma.cl: FRAG_PIPE 3 issues its copies after 1 .. BK/FK-1 k-steps"
#endif
#if TF32_RNA == 4 && PIPE_DEFER && TF32_ROUND_AT < PIPE_COPY_LAST
  #define PIPE_ROUND_KS PIPE_COPY_LAST /* after this iteration's copies: the wait counts them */
#elif TF32_RNA == 4 && TF32_ROUND_AT < BK / FK
  #define PIPE_ROUND_KS TF32_ROUND_AT
#else
  #define PIPE_ROUND_KS (BK / FK - 1)
#endif
#if PIPE_DEFER
  #define PIPE_PRO (STAGES - 1) /* tiles loaded ahead of the loop */
#else
  #define PIPE_PRO STAGES
#endif
#if KK_UNROLL == 1
  #define KK_LOOP _Pragma("unroll 1")
#else
  #define KK_LOOP UNROLL
#endif

/* ---------------------------------------------------------------- element conversions */

/* IEEE half bits <-> float (round to nearest even), bfloat16 likewise, TF32 rounding (ties
 * away, as cvt.rna). Plain integer code: the same on every compiler, no half type needed. */
INLINE float h2f(const unsigned short h)
{
  const unsigned s = ((unsigned)h & 0x8000u) << 16, e = ((unsigned)h >> 10) & 0x1fu;
  const unsigned m = (unsigned)h & 0x3ffu;
  if (e == 0)
    return (s ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f; /* m * 2^-24 */
  if (e == 31)
    return U2F(s | 0x7f800000u | (m << 13));
  return U2F(s | ((e + 112u) << 23) | (m << 13));
}

INLINE unsigned short f2h(const float f)
{
  const unsigned x = F2U(f), s = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)
    return (unsigned short)(s | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) /* >= 65520: rounds to infinity */
    return (unsigned short)(s | 0x7c00u);
  if (ax < 0x38800000u) /* below 2^-14: a subnormal half, m = round(|f| * 2^24) */
    return (unsigned short)(s | (unsigned)rint(U2F(ax) * 16777216.0f));
  unsigned h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
  const unsigned rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
    ++h;
  return (unsigned short)(s | h);
}

INLINE float bf2f(const unsigned short h) { return U2F((unsigned)h << 16); }

INLINE unsigned short f2bf(const float f)
{
  const unsigned x = F2U(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

INLINE float tf32_round(const float f)
{
  const unsigned x = F2U(f);
  if ((x & 0x7f800000u) == 0x7f800000u)
    return f;
  return U2F((x + 0x1000u) & 0xffffe000u);
}

INLINE float tf32_round_even(const float f)
{
  const unsigned x = F2U(f);
  if ((x & 0x7f800000u) == 0x7f800000u)
    return f;
  return U2F((x + 0xfffu + ((x >> 13) & 1u)) & 0xffffe000u);
}

#if MMA_KIND == 1
  #define TO_ACC(x) (x)
  #define TO_OUT(x) (x)
#elif MMA_KIND == 2
  #define TO_ACC(x) h2f(x)
  #define TO_OUT(x) out16(x)
#elif MMA_KIND == 3
  #define TO_ACC(x) bf2f(x)
  #define TO_OUT(x) out16(x)
#elif TF32_IN_STAGE /* the stage tiles hold rounded values already (round_stage) */
  #define TO_ACC(x) (x)
  #define TO_OUT(x) (x)
#elif TF32_RNA == 1
  #define TO_ACC(x) tf32_round(x)
  #define TO_OUT(x) (x)
#elif TF32_RNA == 3
  #define TO_ACC(x) tf32_round_even(x)
  #define TO_OUT(x) (x)
#else /* truncation, as the tensor core reads raw float32 bits */
  #define TO_ACC(x) U2F(F2U(x) & 0xffffe000u)
  #define TO_OUT(x) (x)
#endif

/* float -> f16/bf16 bits for the epilogue: one cvt under CUDA, the integer code elsewhere */
#if MMA_KIND == 2 || MMA_KIND == 3
INLINE unsigned short out16(const float f)
{
  #if defined(TILEDMM_CUDA) && !MMA_SCALAR
  unsigned short h;
    #if MMA_KIND == 2
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
    #else
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
    #endif
  return h;
  #elif MMA_KIND == 2
  return f2h(f);
  #else
  return f2bf(f);
  #endif
}
#endif

/* ---------------------------------------------------------------- PTX building blocks */

#if MMA_PTX
  #define STR_(x) #x
  #define STR(x) STR_(x)

/* The shared-window address of p. The builtin lets the compiler fold the constant offsets of
 * the fragment and copy addresses (f16 main loop: 232 instructions per 64 HMMAs instead of 322
 * with the inline cvta); SMEM_CVTA_ASM 1 is the inline-PTX fallback for a compiler without it. */
INLINE unsigned smem_addr(const LOCAL_PTR void *p)
{
  #if defined(TILEDMM_CUDA) && !SMEM_CVTA_ASM
  return (unsigned)__cvta_generic_to_shared(p);
  #elif defined(TILEDMM_CUDA)
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
  #else
  return (unsigned)(size_t)p; /* OpenCL local pointers are shared-window addresses */
  #endif
}

/* global -> shared copy of one piece (VA or VB elements), the first n elements valid, the rest
 * zero-filled (src-size); n == 0 copies nothing from src. */
  #define CP_ASYNC_16(dst, src, nbytes)                                                       \
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),    \
                 "r"(nbytes))
  #define CP_ASYNC_ELEM(dst, src, nbytes)                                                     \
    asm volatile("cp.async.ca.shared.global [%0], [%1], " STR(ELEM_BYTES) ", %2;\n" ::"r"(dst), \
                 "l"(src), "r"(nbytes))
  #define CP_COMMIT() asm volatile("cp.async.commit_group;\n" ::: "memory")
  #define CP_WAIT() asm volatile("cp.async.wait_group " STR(MMA_WAIT) ";\n" ::: "memory")
  #define MMA_WAIT (STAGES - 2)
  #define CP_WAIT_FIRST() asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1) : "memory")
#else
  #define CP_COMMIT() do { } while (0)
  #define CP_WAIT() do { } while (0)
  #define CP_WAIT_FIRST() do { } while (0)
#endif

INLINE void copy_piece(LOCAL_PTR elem_t *dst, const GLOBAL elem_t *src, const int n, const int v)
{
#if MMA_PTX && ELEM_BYTES >= 4
  if (v == CH)
    CP_ASYNC_16(smem_addr(dst), src, n * ELEM_BYTES);
  else
    CP_ASYNC_ELEM(smem_addr(dst), src, n * ELEM_BYTES);
#elif MMA_PTX /* 16-bit elements: no 2-byte cp.async, unaligned rows are copied in place */
  if (v == CH)
    CP_ASYNC_16(smem_addr(dst), src, n * ELEM_BYTES);
  else
    dst[0] = n ? src[0] : (elem_t)0;
#else
  for (int q = 0; q < v; ++q)
    dst[q] = q < n ? src[q] : (elem_t)0;
#endif
}

/* This thread's copy plan, fixed for the whole K walk: its A pieces are rows ar + l * A_RSTEP
 * of the tile at column ac (pointer ga at k = 0, ga_step between pieces, a_rows rows left in
 * the matrix below ar), its B pieces rows br + l * B_RSTEP at column bc (gb, gb_step; b_n
 * elements of a piece inside N). A handful of registers, whatever the piece count. */
#define A_RSTEP (THREADS / (BK / VA))
#define B_RSTEP (THREADS / (BN / VB))
#if THREADS % (BK / VA) || THREADS % (BN / VB)
  #error "mma.cl: THREADS must be a multiple of the pieces per tile row (BK/VA and BN/VB)"
#endif

/* An interior piece: every element in range, no zero fill. */
INLINE void copy_full(LOCAL_PTR elem_t *dst, const GLOBAL elem_t *src, const int v)
{
#if MMA_PTX && ELEM_BYTES >= 4
  if (v == CH)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], " STR(ELEM_BYTES) ";\n"
                 ::"r"(smem_addr(dst)), "l"(src));
#elif MMA_PTX
  if (v == CH)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
  else
    dst[0] = src[0];
#else
  for (int q = 0; q < v; ++q)
    dst[q] = src[q];
#endif
}

/* Stage k0 of A and B into as / bs; ``full``: the tile is inside the matrices (no checks). */
/* ``parts``: 1 A's pieces, 2 B's, 3 both (load_stage) */
INLINE void load_parts(LOCAL_PTR elem_t *as, LOCAL_PTR elem_t *bs, const GLOBAL elem_t *RESTRICT A,
                       const GLOBAL elem_t *RESTRICT B, const GLOBAL elem_t *ga, const int ga_step,
                       const int a_rows, const GLOBAL elem_t *gb, const int gb_step,
                       const int b_n, const int ldb, const int K, const int k0, const int full,
                       const int ar, const int ac, const int br, const int bc, const int parts)
{
  if (full) { /* interior stages (almost all of them): no bounds, no zero fill */
    if (parts & 1)
      UNROLL for (int l = 0; l < A_ITERS; ++l)
        if (A_PIECES % THREADS == 0 || ar + l * A_RSTEP < BM)
          copy_full(as + (ar + l * A_RSTEP) * SA_LD + ac, ga + l * ga_step + k0, VA);
    if (parts & 2)
      UNROLL for (int l = 0; l < B_ITERS; ++l)
        if (B_PIECES % THREADS == 0 || br + l * B_RSTEP < BK)
          copy_full(bs + (br + l * B_RSTEP) * SB_LD + BS_COL(br + l * B_RSTEP, bc),
                    gb + l * gb_step + k0 * ldb, VB);
    return;
  }
  int n = K - k0 - ac;
  const int a_n = n < 0 ? 0 : (n > VA ? VA : n);
  if (parts & 1)
    UNROLL for (int l = 0; l < A_ITERS; ++l)
      if (A_PIECES % THREADS == 0 || ar + l * A_RSTEP < BM) {
        n = l * A_RSTEP < a_rows ? a_n : 0;
        copy_piece(as + (ar + l * A_RSTEP) * SA_LD + ac, n ? ga + l * ga_step + k0 : A, n, VA);
      }
  if (parts & 2)
    UNROLL for (int l = 0; l < B_ITERS; ++l)
      if (B_PIECES % THREADS == 0 || br + l * B_RSTEP < BK) {
        n = k0 + br + l * B_RSTEP < K ? b_n : 0;
        copy_piece(bs + (br + l * B_RSTEP) * SB_LD + BS_COL(br + l * B_RSTEP, bc),
                   n ? gb + l * gb_step + k0 * ldb : B, n, VB);
      }
}
#define load_stage(...) load_parts(__VA_ARGS__, 3)

/* ---------------------------------------------------------------- the micro-kernel */

#if MMA_PTX && MMA_KIND >= 2
/* register fragments of the warp MMA (float16, bfloat16, TF32): A 4 and B 2 registers */
  #define FRAG_A unsigned
  #define FRAG_A_DIMS [4]
  #define FRAG_B unsigned
  #define FRAG_B_DIMS [2]
/* four 8x8 b16 matrices of shared memory into r (lane l addresses row l of matrix l / 8) */
INLINE void ldsm_x4(unsigned r[4], const unsigned p)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(p));
}
#endif

#if MMA_PTX && MMA_KIND == 1

/* K offset (within an FK step) of this lane's fragment K slot q: t + 4q, the PTX order */
  #define KQ(q, t) ((t) + 4 * (q))
  #define AF (FM * FK / 32)
  #define BF (FK / 4)

INLINE void mma_f64(double c[CF], const double a[AF], const double b[BF])
{
  #if FM == 8
  asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
      : "+d"(c[0]), "+d"(c[1]) : "d"(a[0]), "d"(b[0]));
  #elif FK == 4
  asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};\n"
      : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3]) : "d"(a[0]), "d"(a[1]), "d"(b[0]));
  #elif FK == 8
  asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
  #else
  asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
      "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
      : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]),
        "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
  #endif
}

INLINE void compute_stage(acc_t acc[MI][NI][CF], const LOCAL_PTR elem_t *as,
                          const LOCAL_PTR elem_t *bs, const int wr, const int wc, const int lane,
                          const int k_lo, const int k_hi)
{
  const int g = lane >> 2, t = lane & 3;
  KK_LOOP for (int kk = k_lo; kk < k_hi; kk += FK) {
    double a[MI][AF], b[NI][BF];
    UNROLL for (int i = 0; i < MI; ++i) { /* one 8-byte load per register of the tuple */
      const LOCAL_PTR double *pa = as + (wr + i * FM + g) * SA_LD + kk;
      UNROLL for (int q = 0; q < FK / 4; ++q) {
        a[i][q * (FM / 8)] = pa[KQ(q, t)];
  #if FM == 16
        a[i][q * 2 + 1] = pa[8 * SA_LD + KQ(q, t)];
  #endif
      }
    }
    UNROLL for (int j = 0; j < NI; ++j)
      UNROLL for (int q = 0; q < BF; ++q) b[j][q] = bs[(kk + KQ(q, t)) * SB_LD + wc + j * FN + g];
    UNROLL for (int i = 0; i < MI; ++i)
      UNROLL for (int j = 0; j < NI; ++j) mma_f64(acc[i][j], a[i], b[j]);
  }
}

#elif MMA_PTX && (MMA_KIND == 2 || MMA_KIND == 3)

  #if MMA_KIND == 2
    #define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
  #else
    #define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
  #endif

/* the fragments of k-step kk: A by ldmatrix.x4 (MI x 4 registers), B by ldmatrix.x4.trans
 * (two n8 fragments per instruction: NI x 2) */
INLINE void load_frag(unsigned a[MI][4], unsigned b[NI][2], const LOCAL_PTR elem_t *as,
                      const LOCAL_PTR elem_t *bs, const int wr, const int wc, const int lane,
                      const int kk)
{
  UNROLL for (int i = 0; i < MI; ++i) {
    ldsm_x4(a[i], smem_addr(as + (wr + i * 16 + (lane & 15)) * SA_LD + kk + (lane >> 4) * 8));
  }
  UNROLL for (int j = 0; j < NI; j += 2) {
    const unsigned p = smem_addr(bs + (kk + (lane & 15)) * SB_LD + wc + j * 8 + (lane >> 4) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]), "=r"(b[j + 1][1])
                 : "r"(p));
  }
}


#elif MMA_PTX && MMA_KIND == 4
  #define MMA_OP "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"

/* the fragment register of x: rounded here (TF32_RNA 1: ties away, 3: to even), already rounded
 * in the stage tile (2, 4) or truncated by the tensor core (0) */
INLINE unsigned to_tf32(const float x)
{
  #if TF32_RNA == 1
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
  #elif TF32_RNA == 3 && TF32_CVT_RN
  unsigned r;
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
  #elif TF32_RNA == 3
  return F2U(tf32_round_even(x));
  #else
  return F2U(x);
  #endif
}

/* the fragments of k-step kk: A (MI x 4 registers), B (NI x 2) */
INLINE void load_frag(unsigned a[MI][4], unsigned b[NI][2], const LOCAL_PTR elem_t *as,
                      const LOCAL_PTR elem_t *bs, const int wr, const int wc, const int lane,
                      const int kk)
{
  const int g = lane >> 2, t = lane & 3;
  {
    UNROLL for (int i = 0; i < MI; ++i) { /* a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4) */
  #if TF32_LDSM
      /* the four 8x4-float blocks of the fragment are ldmatrix's four 8x8 b16 matrices: lane
       * (g, t) gets word t of row g of each, exactly a0..a3 (rows 16 bytes, SA_LD 4 mod 32) */
      ldsm_x4(a[i], smem_addr(as + (wr + i * 16 + (lane & 15)) * SA_LD + kk + (lane >> 4) * 4));
    #if TF32_IN_LOOP
      UNROLL for (int q = 0; q < 4; ++q) a[i][q] = to_tf32(U2F(a[i][q]));
    #endif
  #else
      const LOCAL_PTR float *pa = as + (wr + i * 16 + g) * SA_LD + kk + t;
      a[i][0] = to_tf32(pa[0]);
      a[i][1] = to_tf32(pa[8 * SA_LD]);
      a[i][2] = to_tf32(pa[4]);
      a[i][3] = to_tf32(pa[8 * SA_LD + 4]);
  #endif
    }
  #if TF32_BVEC /* b0 (t, g), b1 (t+4, g) of all 8 fragments: columns g*8 .. g*8+7 */
    UNROLL for (int h = 0; h < 2; ++h) {
      const int kr = kk + t + 4 * h;
      UNROLL for (int q = 0; q < 2; ++q) {
        const int c = BS_COL(kr, wc + g * 8 + 4 * q);
        const float4 v = *(const LOCAL_PTR float4 *)(bs + kr * SB_LD + c);
        b[4 * q][h] = to_tf32(v.x);
        b[4 * q + 1][h] = to_tf32(v.y);
        b[4 * q + 2][h] = to_tf32(v.z);
        b[4 * q + 3][h] = to_tf32(v.w);
      }
    }
  #else
    UNROLL for (int j = 0; j < NI; ++j) { /* b0 (t, g), b1 (t+4, g) */
      const LOCAL_PTR float *pb = bs + (kk + t) * SB_LD + wc + j * 8 + g;
      b[j][0] = to_tf32(pb[0]);
      b[j][1] = to_tf32(pb[4 * SB_LD]);
    }
  #endif
  }
}


#else /* the scalar micro-kernel: same ownership, plain FMAs over the shared tiles */

INLINE void compute_stage(acc_t acc[MI][NI][CF], const LOCAL_PTR elem_t *as,
                          const LOCAL_PTR elem_t *bs, const int wr, const int wc, const int lane,
                          const int k_lo, const int k_hi)
{
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j)
      for (int e = 0; e < CF; ++e) {
        const int r = wr + i * FM + g + 8 * (e >> 1), c = wc + CCOL(j, 2 * t + (e & 1));
        acc_t s = acc[i][j][e];
        for (int k = k_lo; k < k_hi; ++k)
          s = FMA(TO_ACC(as[r * SA_LD + k]), TO_ACC(bs[k * SB_LD + BS_COL(k, c)]), s);
        acc[i][j][e] = s;
      }
}

  #if MMA_KIND == 4 || FRAG_PIPE
/* the values of k-step kk this lane's C elements need (rows g, g+8 of each A fragment, n slots
 * 2t, 2t+1 of each B fragment), read from the stage when loaded, as the registers of the PTX
 * path are (FRAG_PIPE: the stage may be overwritten before they are multiplied) */
  #define FRAG_A acc_t
  #define FRAG_A_DIMS [2][FK]
  #define FRAG_B acc_t
  #define FRAG_B_DIMS [2][FK]
INLINE void load_frag(acc_t a[MI][2][FK], acc_t b[NI][2][FK], const LOCAL_PTR elem_t *as,
                      const LOCAL_PTR elem_t *bs, const int wr, const int wc, const int lane,
                      const int kk)
{
  const int g = lane >> 2, t = lane & 3;
  for (int q = 0; q < FK; ++q) {
    for (int i = 0; i < MI; ++i)
      for (int h = 0; h < 2; ++h)
        a[i][h][q] = TO_ACC(as[(wr + i * FM + g + 8 * h) * SA_LD + kk + q]);
    for (int j = 0; j < NI; ++j)
      for (int h = 0; h < 2; ++h)
        b[j][h][q] = TO_ACC(bs[(kk + q) * SB_LD + BS_COL(kk + q, wc + CCOL(j, 2 * t + h))]);
  }
}

INLINE void mma_frag(acc_t acc[MI][NI][CF], acc_t a[MI][2][FK], acc_t b[NI][2][FK],
                     const int i_lo, const int i_hi)
{
  for (int i = i_lo; i < i_hi; ++i)
    for (int j = 0; j < NI; ++j)
      for (int e = 0; e < CF; ++e) {
        acc_t s = acc[i][j][e];
        for (int q = 0; q < FK; ++q)
          s = FMA(a[i][e >> 1][q], b[j][e & 1][q], s);
        acc[i][j][e] = s;
      }
}
  #endif

#endif

#if MMA_PTX && MMA_KIND >= 2
/* float16, bfloat16, TF32: one m16n8 warp MMA (MMA_OP) per pair of A and B fragments */
INLINE void mma_frag(acc_t acc[MI][NI][CF], unsigned a[MI][4], unsigned b[NI][2], const int i_lo,
                     const int i_hi)
{
  UNROLL for (int i = i_lo; i < i_hi; ++i)
    UNROLL for (int j = 0; j < NI; ++j) {
      float *c = acc[i][j];
      asm(MMA_OP " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]),
            "r"(b[j][1]));
    }
}

INLINE void compute_stage(acc_t acc[MI][NI][CF], const LOCAL_PTR elem_t *as,
                          const LOCAL_PTR elem_t *bs, const int wr, const int wc, const int lane,
                          const int k_lo, const int k_hi)
{
  UNROLL for (int kk = k_lo; kk < k_hi; kk += FK) {
    unsigned a[MI][4], b[NI][2];
    load_frag(a, b, as, bs, wr, wc, lane, kk);
    mma_frag(acc, a, b, 0, MI);
  }
}
#endif

/* ---------------------------------------------------------------- TF32 stage rounding */

#if TF32_IN_STAGE
INLINE float rna_tf32(const float x)
{
  #if MMA_PTX && TF32_EVEN && TF32_CVT_RN
  unsigned r;
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return U2F(r);
  #elif TF32_EVEN
  return tf32_round_even(x);
  #elif MMA_PTX && defined(TILEDMM_CUDA)
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return U2F(r);
  #else
  return tf32_round(x);
  #endif
}

INLINE void round_piece(LOCAL_PTR float *p, const int v)
{
  if (v == 4) { /* one 16-byte chunk: rows and columns of pieces are 16-byte aligned */
    float4 q = *(LOCAL_PTR float4 *)p;
    q.x = rna_tf32(q.x);
    q.y = rna_tf32(q.y);
    q.z = rna_tf32(q.z);
    q.w = rna_tf32(q.w);
    *(LOCAL_PTR float4 *)p = q;
  } else {
    p[0] = rna_tf32(p[0]);
  }
}

/* Round the pieces this thread copied into a stage (its copy plan: the same slots every stage;
 * its own cp.async writes are visible to it after its wait, everyone's after the barrier). */
INLINE void round_stage(LOCAL_PTR float *as, LOCAL_PTR float *bs, const int ar, const int ac,
                        const int br, const int bc)
{
  UNROLL for (int l = 0; l < A_ITERS; ++l)
    if (A_PIECES % THREADS == 0 || ar + l * A_RSTEP < BM)
      round_piece(as + (ar + l * A_RSTEP) * SA_LD + ac, VA);
  UNROLL for (int l = 0; l < B_ITERS; ++l)
    if (B_PIECES % THREADS == 0 || br + l * B_RSTEP < BK)
      round_piece(bs + (br + l * B_RSTEP) * SB_LD + BS_COL(br + l * B_RSTEP, bc), VB);
}
#endif

/* ---------------------------------------------------------------- the kernel */

#define MMA_SIGNATURE                                                                        \
  gemm(const int M, const int N, int K, const GLOBAL elem_t *RESTRICT A, const int offA,    \
       const int lda, const GLOBAL elem_t *RESTRICT B, const int offB, const int ldb,       \
       GLOBAL out_t *RESTRICT C, const int offC, const int ldc, const int nb1, const int sA0, \
       const int sA1, const int sB0, const int sB1, const int sC0, const int sC1,           \
       const int sCk)

KERNEL MMA_SIGNATURE
{
#ifdef TILEDMM_CUDA
  extern __shared__ __align__(16) unsigned char mma_smem[];
  elem_t *smem = (elem_t *)mma_smem; /* SMEM_ELEMS elements: dynamic, sized by the host */
#else
  LOCAL elem_t ALIGN16 smem[SMEM_ELEMS];
#endif
  LOCAL_PTR elem_t *As = smem, *Bs = smem + STAGES * BM * SA_LD;
  { /* this group's matrix of the batch (z = z0 * nb1 + z1); no K slices in this family */
    const int z0 = GROUP_Z() / nb1, z1 = GROUP_Z() % nb1;
    A += offA + z0 * sA0 + z1 * sA1;
    B += offB + z0 * sB0 + z1 * sB1;
    C += offC + z0 * sC0 + z1 * sC1;
  }
  const int tid = LOCAL_ID(), lane = tid & 31, warp = tid >> 5;
  const int wr = (warp / WARPS_N) * WM, wc = (warp % WARPS_N) * WN;

  /* launch order: consecutive block ids walk GROUP_M block rows before moving right (L2) */
  int bx = GROUP_X(), by = GROUP_Y();
#if GROUP_M > 1
  {
    const int gx = NUM_GROUPS_X(), gy = NUM_GROUPS_Y(), id = by * gx + bx;
    const int band = id / (GROUP_M * gx), in = id % (GROUP_M * gx);
    const int rows = IMIN(gy - band * GROUP_M, GROUP_M);
    by = band * GROUP_M + in % rows;
    bx = in / rows;
  }
#endif
  const int row0 = by * BM, col0 = bx * BN;

  acc_t acc[MI][NI][CF];
  UNROLL for (int i = 0; i < MI; ++i)
    UNROLL for (int j = 0; j < NI; ++j)
      UNROLL for (int e = 0; e < CF; ++e) acc[i][j][e] = (acc_t)0;

  const int ar = tid / (BK / VA), ac = (tid % (BK / VA)) * VA;
  const int br = tid / (BN / VB), bc = (tid % (BN / VB)) * VB;
  const int a_rows = M - row0 - ar, ga_step = A_RSTEP * lda, gb_step = B_RSTEP * ldb;
  const GLOBAL elem_t *ga = A + (a_rows > 0 ? (row0 + ar) * lda + ac : 0);
  const int b_left = N - col0 - bc, b_n = b_left < 0 ? 0 : (b_left > VB ? VB : b_left);
  const GLOBAL elem_t *gb = B + br * ldb + (b_left > 0 ? col0 + bc : 0);
  const int inside = row0 + BM <= M && col0 + BN <= N;

  const int kt_n = (K + BK - 1) / BK;
#if FRAG_PIPE
  UNROLL for (int s = 0; s < PIPE_PRO; ++s) { /* tiles in flight */
    if (s < kt_n)
      load_stage(As + s * BM * SA_LD, Bs + s * BK * SB_LD, A, B, ga, ga_step, a_rows, gb, gb_step,
                 b_n, ldb, K, s * BK, inside && (s + 1) * BK <= K, ar, ac, br, bc);
    CP_COMMIT();
  }
  #if PIPE_DEFER
  CP_WAIT(); /* this thread's copies of tile 0 */
  #else
  CP_WAIT_FIRST();
  #endif
  #if TF32_IN_STAGE
  round_stage(As, Bs, ar, ac, br, bc);
  #endif
  BARRIER();
  FRAG_A fa[2][MI] FRAG_A_DIMS;
  FRAG_B fb[2][NI] FRAG_B_DIMS;
  load_frag(fa[0], fb[0], As, Bs, wr, wc, lane, 0);
  int rd = 0;
  for (int kt = 0; kt < kt_n; ++kt) {
    const int nx = rd + 1 == STAGES ? 0 : rd + 1; /* the stage of tile kt+1 */
    UNROLL for (int ks = 0; ks < BK / FK; ++ks) {
  #if TF32_IN_STAGE
      if (ks == PIPE_ROUND_KS && kt + 1 < kt_n) { /* this thread's copies of tile kt+1 */
        CP_WAIT();
        round_stage(As + nx * BM * SA_LD, Bs + nx * BK * SB_LD, ar, ac, br, bc);
      }
  #endif
      if (ks + 1 < BK / FK) { /* the next k-step's loads, then this one's multiplies */
        load_frag(fa[(ks + 1) & 1], fb[(ks + 1) & 1], As + rd * BM * SA_LD, Bs + rd * BK * SB_LD,
                  wr, wc, lane, (ks + 1) * FK);
      } else if (kt + 1 < kt_n) {
  #if PIPE_MMA_FIRST /* the last k-step's multiplies ahead of the barrier in the source (ptxas
                      * moves most past it, among the next tile's fragment loads) */
        mma_frag(acc, fa[1], fb[1], 0, MI);
  #endif
  #if !TF32_IN_STAGE
        CP_WAIT(); /* this thread's copies of tile kt+1 */
  #endif
        BARRIER(); /* tile kt+1 is everyone's; tile kt is in everyone's registers */
  #if !PIPE_DEFER
        const int nt = kt + STAGES; /* into the stage of tile kt, read by no one now */
        if (nt < kt_n)
          load_stage(As + rd * BM * SA_LD, Bs + rd * BK * SB_LD, A, B, ga, ga_step, a_rows, gb,
                     gb_step, b_n, ldb, K, nt * BK, inside && (nt + 1) * BK <= K, ar, ac, br, bc);
        CP_COMMIT();
  #endif
        load_frag(fa[0], fb[0], As + nx * BM * SA_LD, Bs + nx * BK * SB_LD, wr, wc, lane, 0);
      }
  #if PIPE_MMA_FIRST
      if (ks + 1 < BK / FK || kt + 1 == kt_n)
  #endif
        mma_frag(acc, fa[ks & 1], fb[ks & 1], 0, MI);
  #if PIPE_DEFER
      /* tile kt+STAGES-1 into the stage of tile kt-1 (free since the barrier): A's pieces after
       * PIPE_COPY_A k-steps, B's after PIPE_COPY_B, one commit group */
      if (ks + 1 == PIPE_COPY_A || ks + 1 == PIPE_COPY_B) {
        const int nt = kt + STAGES - 1, wt = rd == 0 ? STAGES - 1 : rd - 1;
        if (nt < kt_n)
          load_parts(As + wt * BM * SA_LD, Bs + wt * BK * SB_LD, A, B, ga, ga_step, a_rows, gb,
                     gb_step, b_n, ldb, K, nt * BK, inside && (nt + 1) * BK <= K, ar, ac, br, bc,
                     (ks + 1 == PIPE_COPY_A ? 1 : 0) | (ks + 1 == PIPE_COPY_B ? 2 : 0));
        if (ks + 1 == PIPE_COPY_LAST)
          CP_COMMIT();
      }
  #endif
    }
    rd = nx;
  }
#else
  UNROLL for (int s = 0; s < STAGES - 1; ++s) {
    if (s < kt_n)
      load_stage(As + s * BM * SA_LD, Bs + s * BK * SB_LD, A, B, ga, ga_step, a_rows, gb, gb_step,
                 b_n, ldb, K, s * BK, inside && (s + 1) * BK <= K, ar, ac, br, bc);
    CP_COMMIT();
  }
  int rd = 0, wt = STAGES - 1; /* stage read now, stage written next */
#if MMA_KIND == 4 && TF32_RNA == 4 /* stage 0 rounded here, stage kt+1 during iteration kt */
  CP_WAIT();
  round_stage(As, Bs, ar, ac, br, bc);
#endif
  for (int kt = 0; kt < kt_n; ++kt) {
#if !(MMA_KIND == 4 && TF32_RNA == 4)
    CP_WAIT(); /* tile kt has landed (this thread's copies) ... */
#endif
#if MMA_KIND == 4 && TF32_RNA == 2
    round_stage(As + rd * BM * SA_LD, Bs + rd * BK * SB_LD, ar, ac, br, bc);
#endif
    BARRIER(); /* ... everyone's, and everyone is done with the stage overwritten next */
    const int nxt = kt + STAGES - 1;
#if COPY_AT > 0 /* the first COPY_AT FK steps' fragment loads go ahead of the copies */
    compute_stage(acc, As + rd * BM * SA_LD, Bs + rd * BK * SB_LD, wr, wc, lane, 0, COPY_AT);
#endif
    if (nxt < kt_n)
      load_stage(As + wt * BM * SA_LD, Bs + wt * BK * SB_LD, A, B, ga, ga_step, a_rows, gb,
                 gb_step, b_n, ldb, K, nxt * BK, inside && (nxt + 1) * BK <= K, ar, ac, br, bc);
    CP_COMMIT();
#if MMA_KIND == 4 && TF32_RNA == 4
  #if COPY_AT < ROUND_AT
    compute_stage(acc, As + rd * BM * SA_LD, Bs + rd * BK * SB_LD, wr, wc, lane, COPY_AT,
                  ROUND_AT);
  #endif
    if (kt + 1 < kt_n) { /* this thread's copies of tile kt+1 have landed: round them */
      CP_WAIT();
      const int r1 = rd + 1 == STAGES ? 0 : rd + 1;
      round_stage(As + r1 * BM * SA_LD, Bs + r1 * BK * SB_LD, ar, ac, br, bc);
    }
  #if ROUND_AT < BK
    compute_stage(acc, As + rd * BM * SA_LD, Bs + rd * BK * SB_LD, wr, wc, lane, ROUND_AT, BK);
  #endif
#elif COPY_AT < BK
    compute_stage(acc, As + rd * BM * SA_LD, Bs + rd * BK * SB_LD, wr, wc, lane, COPY_AT, BK);
#endif
    rd = rd + 1 == STAGES ? 0 : rd + 1;
    wt = wt + 1 == STAGES ? 0 : wt + 1;
  }
#endif

  /* C fragment (i, j), element e of this lane: row g (+8 for e >= 2), n slot 2t + (e & 1)
   * (column CCOL); two adjacent columns are one store where C's rows keep pairs aligned */
  const int g = lane >> 2, t = lane & 3;
#if MMA_PTX && defined(TILEDMM_CUDA)
  const int pairs = !(ldc & 1) && !(((size_t)C) & (2 * sizeof(out_t) - 1));
#else
  const int pairs = 0;
#endif
#if MMA_KIND == 4 && TF32_BVEC /* adjacent columns: fragments j, j+1 at one n slot */
  #define EP_H 2
  #define EP_JSTEP 2
  #define EP_LO(i, j, e2, h) acc[i][j][2 * (e2) + (h)]
  #define EP_HI(i, j, e2, h) acc[i][(j) + 1][2 * (e2) + (h)]
#else /* adjacent columns: n slots 2t, 2t+1 of one fragment */
  #define EP_H 1
  #define EP_JSTEP 1
  #define EP_LO(i, j, e2, h) acc[i][j][2 * (e2)]
  #define EP_HI(i, j, e2, h) acc[i][j][2 * (e2) + 1]
#endif
  UNROLL for (int i = 0; i < MI; ++i)
    UNROLL for (int e2 = 0; e2 < CF / 2; ++e2) {
      const int row = row0 + wr + i * FM + g + 8 * e2;
      if (row >= M)
        continue;
      UNROLL for (int h = 0; h < EP_H; ++h)
      UNROLL for (int j = 0; j < NI; j += EP_JSTEP) {
        const int col = col0 + wc + CCOL(j, 2 * t + h);
        const out_t lo = TO_OUT(EP_LO(i, j, e2, h)), hi = TO_OUT(EP_HI(i, j, e2, h));
        if (pairs && col + 1 < N) {
#if MMA_KIND == 1 && defined(TILEDMM_CUDA)
          *(double2 *)(C + row * ldc + col) = make_double2(lo, hi);
#elif MMA_KIND == 4 && defined(TILEDMM_CUDA)
          *(float2 *)(C + row * ldc + col) = make_float2(lo, hi);
#elif defined(TILEDMM_CUDA)
          *(unsigned *)(C + row * ldc + col) = (unsigned)lo | ((unsigned)hi << 16);
#endif
          continue;
        }
        if (col < N)
          C[row * ldc + col] = lo;
        if (col + 1 < N)
          C[row * ldc + col + 1] = hi;
      }
    }
}
