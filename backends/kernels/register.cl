/* register: 2D block tiling. Each work-item accumulates a TM x TN micro-tile in registers.
 *
 * USE_LOCAL 1 (GPUs): the group stages A (transposed, As[k][m]) and B (Bs[k][n]) in local
 * memory per BK step with 16-byte global loads where ALIGNED allows; the micro-tile is split
 * into VM x VN sub-blocks strided across the group (VM = TM gives contiguous rows), so each
 * local read is one 16-byte load and a warp's reads hit distinct banks. GROUP_M > 1 launches
 * blocks in column groups of GROUP_M block rows so neighbouring blocks share L2 panels;
 * STAGES 2 double-buffers the local tiles; FRAG_PREFETCH 1 the register fragments.
 * USE_LOCAL 0 (CPUs, OpenCL only): no local memory and no barriers; the micro-tile is TM rows
 * of TN / CPU_VEC native vectors, B rows are read with vloadN and A values broadcast, which is
 * the shape of a CPU BLAS micro-kernel; the group (BM x BN) keeps the B panel in cache.
 * KC > 0 walks K in blocks of KC with a barrier after each (see the kernel).
 * Edge tiles are zero-filled (local path) or clamped and never stored (CPU path).
 */
#include "gemm_common.h"

#define THREADS_N (BN / TN)
#define THREADS_M (BM / TM)

#if USE_LOCAL

#define AS_LD (BM + PAD)
#define BS_LD (BN + PAD)
#define A_VECS (BM * BK / VW)
#define B_VECS (BK * BN / VW)
#define A_LOADS ((A_VECS + THREADS - 1) / THREADS)
#define B_LOADS ((B_VECS + THREADS - 1) / THREADS)

/* Global -> registers: this thread's share of the A (BM x BK) and B (BK x BN) tiles at k0,
 * 16-byte loads where aligned and in range, zeros outside the matrix. */
INLINE void fetch_tiles(real va[A_LOADS][VW], real vb[B_LOADS][VW],
                        const GLOBAL real *RESTRICT A, const int lda,
                        const GLOBAL real *RESTRICT B, const int ldb,
                        const int M, const int N, const int K,
                        const int row0, const int col0, const int k0, const int tid)
{
  UNROLL for (int l = 0; l < A_LOADS; ++l) {
    const int e = tid + l * THREADS;
    const int r = e / (BK / VW), c = (e % (BK / VW)) * VW;
    const int gr = row0 + r, gk = k0 + c;
    if (ALIGNED && gr < M && gk + VW <= K) {
      const realV x = VLOADG(&A[gr * lda + gk]);
      VSPLIT(x, va[l]);
    } else {
      UNROLL for (int q = 0; q < VW; ++q)
        va[l][q] = (e < A_VECS && gr < M && gk + q < K) ? A[gr * lda + gk + q] : ZERO;
    }
  }
  UNROLL for (int l = 0; l < B_LOADS; ++l) {
    const int e = tid + l * THREADS;
    const int r = e / (BN / VW), c = (e % (BN / VW)) * VW;
    const int gk = k0 + r, gc = col0 + c;
    if (ALIGNED && gk < K && gc + VW <= N) {
      const realV x = VLOADG(&B[gk * ldb + gc]);
      VSPLIT(x, vb[l]);
    } else {
      UNROLL for (int q = 0; q < VW; ++q)
        vb[l][q] = (e < B_VECS && gk < K && gc + q < N) ? B[gk * ldb + gc + q] : ZERO;
    }
  }
}

/* Registers -> local memory: A transposed (As[k][m]), B as is (Bs[k][n]). */
INLINE void stash_tiles(LOCAL_PTR real *As, LOCAL_PTR real *Bs, real va[A_LOADS][VW],
                        real vb[B_LOADS][VW], const int tid)
{
  UNROLL for (int l = 0; l < A_LOADS; ++l) {
    const int e = tid + l * THREADS;
    if (A_VECS % THREADS == 0 || e < A_VECS) {
      const int r = e / (BK / VW), c = (e % (BK / VW)) * VW;
      UNROLL for (int q = 0; q < VW; ++q) As[(c + q) * AS_LD + r] = va[l][q];
    }
  }
  UNROLL for (int l = 0; l < B_LOADS; ++l) {
    const int e = tid + l * THREADS;
    if (B_VECS % THREADS == 0 || e < B_VECS) {
      const int r = e / (BN / VW), c = (e % (BN / VW)) * VW;
      UNROLL for (int q = 0; q < VW; ++q) Bs[r * BS_LD + c + q] = vb[l][q];
    }
  }
}

/* Local memory -> registers: the A column and B row fragments of this thread at step kk */
INLINE void load_fragments(real ra[TM], real rb[TN], const LOCAL_PTR real *As,
                           const LOCAL_PTR real *Bs, const int kk, const int tx, const int ty)
{
  UNROLL for (int g = 0; g < TM / VM; ++g) {
    const int m = kk * AS_LD + g * THREADS_M * VM + ty * VM;
#if VM == VW
    const realV x = VLOADL(&As[m]);
    VSPLIT(x, &ra[g * VM]);
#else
    UNROLL for (int q = 0; q < VM; ++q) ra[g * VM + q] = As[m + q];
#endif
  }
  UNROLL for (int g = 0; g < TN / VN; ++g) {
    const int n = kk * BS_LD + g * THREADS_N * VN + tx * VN;
#if VN == VW
    const realV x = VLOADL(&Bs[n]);
    VSPLIT(x, &rb[g * VN]);
#else
    UNROLL for (int q = 0; q < VN; ++q) rb[g * VN + q] = Bs[n + q];
#endif
  }
}

/* acc += As^T Bs over one BK step: per k, the fragments into ra/rb, then TM x TN FMAs.
 * FRAG_PREFETCH 1 loads step kk + 1's fragments before step kk's FMAs (two register sets),
 * so the local loads' latency hides behind the FMAs whatever order the compiler keeps. */
INLINE void tile_product(real acc[TM][TN], const LOCAL_PTR real *As, const LOCAL_PTR real *Bs,
                         const int tx, const int ty)
{
#if FRAG_PREFETCH
  real ra[2][TM], rb[2][TN];
  load_fragments(ra[0], rb[0], As, Bs, 0, tx, ty);
  UNROLL for (int kk = 0; kk < BK; ++kk) {
    if (kk + 1 < BK)
      load_fragments(ra[(kk + 1) & 1], rb[(kk + 1) & 1], As, Bs, kk + 1, tx, ty);
    UNROLL for (int i = 0; i < TM; ++i)
      UNROLL for (int j = 0; j < TN; ++j)
        acc[i][j] = FMA(ra[kk & 1][i], rb[kk & 1][j], acc[i][j]);
  }
#else
  UNROLL for (int kk = 0; kk < BK; ++kk) {
    real ra[TM], rb[TN];
    load_fragments(ra, rb, As, Bs, kk, tx, ty);
    UNROLL for (int i = 0; i < TM; ++i)
      UNROLL for (int j = 0; j < TN; ++j) acc[i][j] = FMA(ra[i], rb[j], acc[i][j]);
  }
#endif
}

KERNEL GEMM_SIGNATURE
{
  /* STAGES 2: double buffering. The next tile is fetched into registers while this one is
   * multiplied, then stored to the other buffer: one barrier per BK step instead of two. */
  LOCAL real ALIGN16 As[STAGES * BK * AS_LD];
  LOCAL real ALIGN16 Bs[STAGES * BK * BS_LD];
  BATCH_PROLOGUE();
  const int tid = LOCAL_ID();
  const int tx = tid % THREADS_N, ty = tid / THREADS_N;
  A += offA;
  B += offB;

  /* launch order: consecutive block ids walk GROUP_M block rows before moving right */
  int bx = GROUP_X(), by = GROUP_Y();
#if GROUP_M > 1
  {
    const int gx = NUM_GROUPS_X(), gy = NUM_GROUPS_Y();
    const int bid = by * gx + bx, per_group = GROUP_M * gx;
    const int first = (bid / per_group) * GROUP_M;
    const int rows = IMIN(gy - first, GROUP_M);
    by = first + (bid % per_group) % rows;
    bx = (bid % per_group) / rows;
  }
#endif
  const int row0 = by * BM, col0 = bx * BN;

  real acc[TM][TN];
  UNROLL for (int i = 0; i < TM; ++i)
    UNROLL for (int j = 0; j < TN; ++j) acc[i][j] = ZERO;
  real va[A_LOADS][VW], vb[B_LOADS][VW];

#if STAGES == 2
  fetch_tiles(va, vb, A, lda, B, ldb, M, N, K, row0, col0, 0, tid); /* zeros when K == 0 */
  stash_tiles(As, Bs, va, vb, tid);
  BARRIER();
  for (int k0 = 0; k0 < K; k0 += BK) {
    const int more = k0 + BK < K, buf = (k0 / BK) & 1;
    if (more)
      fetch_tiles(va, vb, A, lda, B, ldb, M, N, K, row0, col0, k0 + BK, tid);
    tile_product(acc, As + buf * BK * AS_LD, Bs + buf * BK * BS_LD, tx, ty);
    if (more)
      stash_tiles(As + (buf ^ 1) * BK * AS_LD, Bs + (buf ^ 1) * BK * BS_LD, va, vb, tid);
    BARRIER();
  }
#else
  for (int k0 = 0; k0 < K; k0 += BK) {
    fetch_tiles(va, vb, A, lda, B, ldb, M, N, K, row0, col0, k0, tid);
    stash_tiles(As, Bs, va, vb, tid);
    BARRIER();
    tile_product(acc, As, Bs, tx, ty);
    BARRIER();
  }
#endif

  UNROLL for (int i = 0; i < TM; ++i) {
    const int row = row0 + (i / VM) * THREADS_M * VM + ty * VM + i % VM;
    if (row >= M)
      continue;
    UNROLL for (int g = 0; g < TN / VN; ++g) {
      const int col = col0 + g * THREADS_N * VN + tx * VN;
      UNROLL for (int q = 0; q < VN; ++q)
        if (col + q < N)
          C[offC + row * ldc + col + q] = acc[i][g * VN + q];
    }
  }
}

#else /* USE_LOCAL == 0: the CPU micro-kernel */

#ifndef TILEDMM_OPENCL
  #error "the USE_LOCAL=0 (CPU) variant of the register family is OpenCL only"
#endif
#define NV (TN / CPU_VEC) /* realN, realNu: gemm_common.h */

/* acc += A[row.., k0:k1] @ B[k0:k1, col..]: the micro-kernel over one K block */
INLINE void micro_kernel(realN acc[TM][NV], const GLOBAL real *a[TM], const GLOBAL real *b,
                         const int ldb, const int k0, const int k1, const int cols)
{
  if (cols >= TN) {
    for (int k = k0; k < k1; ++k, b += ldb) {
      realN bv[NV];
      UNROLL for (int v = 0; v < NV; ++v) bv[v] = ((const GLOBAL realNu *)b)[v];
      UNROLL for (int i = 0; i < TM; ++i) {
        const realN av = (realN)(a[i][k]);
        UNROLL for (int v = 0; v < NV; ++v) acc[i][v] = FMA(av, bv[v], acc[i][v]);
      }
    }
  } else { /* right edge: gather the columns that exist, zeros elsewhere */
    for (int k = k0; k < k1; ++k, b += ldb) {
      real bs[TN];
      UNROLL for (int j = 0; j < TN; ++j) bs[j] = (j < cols) ? b[j] : ZERO;
      realN bv[NV];
      UNROLL for (int v = 0; v < NV; ++v) bv[v] = ((const realNu *)bs)[v];
      UNROLL for (int i = 0; i < TM; ++i) {
        const realN av = (realN)(a[i][k]);
        UNROLL for (int v = 0; v < NV; ++v) acc[i][v] = FMA(av, bv[v], acc[i][v]);
      }
    }
  }
}

KERNEL GEMM_SIGNATURE
{
  BATCH_PROLOGUE();
  const int tid = LOCAL_ID();
  const int tx = tid % THREADS_N, ty = tid / THREADS_N;
  const int row = GROUP_Y() * BM + ty * TM, col = GROUP_X() * BN + tx * TN;
  const int live = row < M && col < N; /* dead items stay for the barriers (KC > 0) */
  const GLOBAL real *a[TM];
  UNROLL for (int i = 0; i < TM; ++i) /* rows past M read row M-1; they are never stored */
    a[i] = A + offA + IMIN(row + i, M - 1) * lda;
  realN acc[TM][NV];
  UNROLL for (int i = 0; i < TM; ++i)
    UNROLL for (int v = 0; v < NV; ++v) acc[i][v] = (realN)(ZERO);
  /* K in blocks of KC (KC 0: one block) with a barrier after each: PoCL runs the group's
   * work-items one after another between barriers, so the group's A and B panels for one
   * block stay in cache while every item of the group uses them. */
  const int kc = KC ? KC : K;
  for (int k0 = 0; k0 < K; k0 += kc) {
    if (live)
      micro_kernel(acc, a, B + offB + col + k0 * ldb, ldb, k0, IMIN(k0 + kc, K), N - col);
#if KC
    BARRIER();
#endif
  }
  if (!live)
    return;
  UNROLL for (int i = 0; i < TM; ++i) {
    if (row + i >= M)
      break;
    GLOBAL real *c = C + offC + (row + i) * ldc + col;
    if (col + TN <= N) {
      UNROLL for (int v = 0; v < NV; ++v) ((GLOBAL realNu *)c)[v] = acc[i][v];
    } else {
      real cs[TN];
      UNROLL for (int v = 0; v < NV; ++v) ((realNu *)cs)[v] = acc[i][v];
      for (int j = 0; j < N - col; ++j) c[j] = cs[j];
    }
  }
}

#endif /* USE_LOCAL */
