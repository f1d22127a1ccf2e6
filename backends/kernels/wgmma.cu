// Hopper (sm_90a) warpgroup-MMA TF32 GEMM for tiledmm (issue 14): C = A @ B, float32 in/out.
//
// Compiled by NVRTC with -arch=sm_90a (wgmma exists only on the "a" target). For TF32 wgmma
// takes both operands from shared memory K-major, so a pre-pass (tf32_pack_a / tf32_pack_bt)
// writes A (M x K) and B^T (N x K) rounded to TF32 (cvt.rn / cvt.rna, as mma.cl) into buffers
// padded with zeros to whole tiles: the GEMM kernel then loads without bounds checks and only
// its stores are guarded. Pack kernels' time belongs to the product's time.
//
// GEMM block: NWG warpgroups (128 threads each) stacked along M, each owning WG_M m64 slabs
// x BN columns (accumulators: WG_M * BN / 2 floats per thread); BK = 32 (one 128-byte row of
// K per tile row). Stage tiles arrive by 16-byte cp.async in a STAGES-deep ring; a tile row is
// 128 bytes, laid out either with the 128-byte swizzle (SWIZZLE 1: 16-byte chunk c of row r at
// chunk c ^ (r % 8)) or as no-swizzle core matrices (SWIZZLE 0: 8 rows x 16 bytes contiguous,
// K-adjacent core matrices 128 bytes apart, 8-row groups 1024 bytes apart). WAIT1 1 keeps one
// wgmma group in flight across the loop barrier (prefetch distance STAGES - 2), else 0.
//
// Defines (all set by the host): BN (64/128/256), WG_M (1/2), NWG (1..3), STAGES, SWIZZLE,
// WAIT1, GROUP_M (block raster: GROUP_M tile rows per column sweep), MINB (blocks per SM),
// NS_SWAP (no-swizzle only: swap the two byte offsets; a layout check), ROUND (1 rn, 2 rna,
// 0 none: for measuring),
// TMA 1: also the kernel wgmma_gemm_tma (tensor-memory-accelerator copies, a producer
// warpgroup, mbarriers; CLUSTER 1 or 2 blocks along M sharing B by multicast; SWIZZLE 1 only).

#ifndef BN
#define BN 256
#endif
#ifndef WG_M
#define WG_M 1
#endif
#ifndef NWG
#define NWG 2
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef SWIZZLE
#define SWIZZLE 1
#endif
#ifndef WAIT1
#define WAIT1 1
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef MINB
#define MINB 1
#endif
#ifndef NS_SWAP
#define NS_SWAP 0
#endif
#ifndef ROUND
#define ROUND 1
#endif
#ifndef TMA
#define TMA 0
#endif
#ifndef CLUSTER
#define CLUSTER 1
#endif
#ifndef HALF
#define HALF 0
#endif

#define THREADS (128 * NWG)
#define BM (64 * WG_M * NWG)
#define BK 32
#define A_BYTES (BM * BK * 4)
#define B_BYTES (BN * BK * 4)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define PF (WAIT1 ? STAGES - 2 : STAGES - 1)
#define NACC (BN / 2)

__device__ __forceinline__ float to_tf32(float x)
{
  unsigned r;
#if ROUND == 0
  r = __float_as_uint(x);  // no rounding (the tensor cores then ignore the low 13 bits)
#elif ROUND == 2
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
#else
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
#endif
  return __uint_as_float(r);
}

// Ap[Mp x Kp] = tf32(A[M x K], strides lda, sa in elements), zero outside; 4 k per thread.
extern "C" __global__ void tf32_pack_a(const float *__restrict__ a, float *__restrict__ ap, int m,
                                       int k, long long lda, long long sa, int mp, int kp)
{
  long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  int kq = kp >> 2;
  if (q >= (long long)mp * kq) return;
  int r = (int)(q / kq), c = (int)(q % kq) * 4;
  float4 v;
  const float *row = a + r * lda;
  bool in = r < m;
  v.x = in && c < k ? to_tf32(row[c * sa]) : 0.f;
  v.y = in && c + 1 < k ? to_tf32(row[(c + 1) * sa]) : 0.f;
  v.z = in && c + 2 < k ? to_tf32(row[(c + 2) * sa]) : 0.f;
  v.w = in && c + 3 < k ? to_tf32(row[(c + 3) * sa]) : 0.f;
  *reinterpret_cast<float4 *>(ap + (long long)r * kp + c) = v;
}

// Bt[Np x Kp] = tf32(B[K x N], strides ldb, sb in elements)^T, zero outside; 32x32 tiles,
// block (32, 8).
extern "C" __global__ void tf32_pack_bt(const float *__restrict__ b, float *__restrict__ bt, int k,
                                        int n, long long ldb, long long sb, int np, int kp)
{
  __shared__ float t[32][33];
  int k0 = blockIdx.y * 32, n0 = blockIdx.x * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {
    int kk = k0 + i, nn = n0 + threadIdx.x;
    t[i][threadIdx.x] = kk < k && nn < n ? to_tf32(b[kk * ldb + nn * sb]) : 0.f;
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    int nn = n0 + i, kk = k0 + threadIdx.x;
    if (nn < np && kk < kp) bt[(long long)nn * kp + kk] = t[threadIdx.x][i];
  }
}

// The same packs, faster (the library's; screen 2: 0.31 ms at 8192^3 against ~0.55 for the two
// above, which stay for benches/wgmma_probe.py's screen-1 variants): A by float4 loads where its
// rows allow (vec: unit column stride, 16-byte aligned rows), a 2-D grid (x: 4-float chunks of a
// row, y: rows, striding); B^T by 32 (k) x 64 (n) tiles, 8 elements per thread. Grids: a2 (ceil(kp
// / 512), min(mp, 65535)) of 128 threads; bt2 (np / 64, kp / 32) of (32, 8).
extern "C" __global__ void tf32_pack_a2(const float *__restrict__ a, float *__restrict__ ap, int m,
                                        int k, long long lda, long long sa, int mp, int kp,
                                        int vec)
{
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (c >= kp) return;
  for (int r = blockIdx.y; r < mp; r += gridDim.y) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < m) {
      const float *row = a + r * lda;
      if (vec && c + 3 < k) {
        v = *reinterpret_cast<const float4 *>(row + c);
        v.x = to_tf32(v.x), v.y = to_tf32(v.y), v.z = to_tf32(v.z), v.w = to_tf32(v.w);
      } else {
        if (c < k) v.x = to_tf32(row[c * sa]);
        if (c + 1 < k) v.y = to_tf32(row[(c + 1) * sa]);
        if (c + 2 < k) v.z = to_tf32(row[(c + 2) * sa]);
        if (c + 3 < k) v.w = to_tf32(row[(c + 3) * sa]);
      }
    }
    *reinterpret_cast<float4 *>(ap + (long long)r * kp + c) = v;
  }
}

// Bt[Np x Kp] as tf32_pack_bt, in 32 (k) x 64 (n) tiles (sm90_sync.cuh's pack_bt_tile)
extern "C" __global__ void tf32_pack_bt2(const float *__restrict__ b, float *__restrict__ bt,
                                         int k, int n, long long ldb, long long sb, int np, int kp)
{
  pack_bt_tile(b, bt, k, n, ldb, sb, np, kp, [](float v) { return to_tf32(v); });
}

// ---- wgmma m64nBNk8 TF32, both operands by shared-memory descriptor ----
// One wrapper per instruction shape, written once (WGMMA_WRAPPER): the BN / 2 accumulators per
// thread are operands %0 .. %(BN/2 - 1), then the two descriptors and the scale-d flag.
#define WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                 "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D32(i) WG_D8(i), WG_D8(i + 8), WG_D8(i + 16), WG_D8(i + 24)
#define WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "             \
              "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_R32 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_R64 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
               "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "  \
               "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "              \
               "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, "          \
               "%120, %121, %122, %123, %124, %125, %126, %127"
#if BN == 64
  #define WG_N 32
  #define WG_DOUT WG_D32(0)
  #define WG_REGS WG_R0
  #define WG_DESCS "%32, %33"
  #define WG_FLAG "%34"
  #define WG_SHAPE "m64n64"
#elif BN == 128
  #define WG_N 64
  #define WG_DOUT WG_D32(0), WG_D32(32)
  #define WG_REGS WG_R0 ", " WG_R32
  #define WG_DESCS "%64, %65"
  #define WG_FLAG "%66"
  #define WG_SHAPE "m64n128"
#elif BN == 256
  #define WG_N 128
  #define WG_DOUT WG_D32(0), WG_D32(32), WG_D32(64), WG_D32(96)
  #define WG_REGS WG_R0 ", " WG_R32 ", " WG_R64
  #define WG_DESCS "%128, %129"
  #define WG_FLAG "%130"
  #define WG_SHAPE "m64n256"
#endif
// name: the function; kind: the instruction after the shape (k8.f32.tf32.tf32, ...); tail: the
// immediates after scale-d (scale-a, scale-b[, transpose-a, transpose-b]).
#define WGMMA_WRAPPER(name, kind, tail)                                                        \
  __device__ __forceinline__ void name(float (&d)[WG_N], unsigned long long da,               \
                                       unsigned long long db, int sd)                         \
  {                                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " WG_FLAG ", 0;\n"                         \
                 "wgmma.mma_async.sync.aligned." WG_SHAPE kind " {" WG_REGS "}, " WG_DESCS     \
                 ", p, " tail ";\n}\n"                                                          \
                 : WG_DOUT                                                                     \
                 : "l"(da), "l"(db), "r"(sd));                                                 \
  }
WGMMA_WRAPPER(wgmma_tf32, "k8.f32.tf32.tf32", "1, 1")

__device__ __forceinline__ unsigned long long desc(unsigned addr)
{
#if SWIZZLE
  const unsigned long long lbo = 16, sbo = 1024, mode = 1;  // 128-byte swizzle
#elif NS_SWAP
  const unsigned long long lbo = 1024, sbo = 128, mode = 0;
#else
  const unsigned long long lbo = 128, sbo = 1024, mode = 0;  // no swizzle: K step 128 B
#endif
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32)
         | (mode << 62);
}

// byte offset of 16-byte chunk c (K) of tile row r
__device__ __forceinline__ unsigned chunk_off(int r, int c)
{
#if SWIZZLE
  return r * 128 + ((c ^ (r & 7)) << 4);
#else
  return ((r >> 3) * 8 + c) * 128 + (r & 7) * 16;
#endif
}

// byte offset of k-step ks (8 TF32) inside a tile
#if SWIZZLE
#define KSTEP_BYTES 32
#else
#define KSTEP_BYTES 256
#endif

__device__ __forceinline__ void cp_async16(unsigned dst, const void *src)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

template <int N> __device__ __forceinline__ void cp_async_wait()
{
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int N> __device__ __forceinline__ void wgmma_wait()
{
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void fence_acc(float (&d)[NACC])
{
#pragma unroll
  for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// C[M x N] (row stride ldc) = Ap[Mp x Kp] @ Bt[Np x Kp]^T; grid: tiles_m * tiles_n blocks.
// ---------------------------------------------------------------- what every kernel shares

// The block's tile (tm, tn): blocks take GROUP_M tile rows at a time, column by column, so
// the B tiles a group reads stay in the L2 while its rows are done
__device__ __forceinline__ void group_tile(int tiles_m, int tiles_n, int &tm, int &tn)
{
  const int bid = blockIdx.x, per_group = GROUP_M * tiles_n;
  const int first_m = (bid / per_group) * GROUP_M;
  const int gsize = min(tiles_m - first_m, GROUP_M);
  tm = first_m + (bid % per_group) % gsize;
  tn = (bid % per_group) / gsize;
}

__device__ __forceinline__ void zero_acc(float (&acc)[WG_M][NACC])
{
#pragma unroll
  for (int mi = 0; mi < WG_M; ++mi)
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[mi][i] = 0.f;
}

// One stage's MMAs (``mmas()``) as one wgmma group, then at most WAIT groups left in flight;
// the accumulators fenced on both sides
template <int WAIT, class Mmas>
__device__ __forceinline__ void mma_group(float (&acc)[WG_M][NACC], Mmas mmas)
{
#pragma unroll
  for (int mi = 0; mi < WG_M; ++mi) fence_acc(acc[mi]);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  mmas();
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  wgmma_wait<WAIT>();
#pragma unroll
  for (int mi = 0; mi < WG_M; ++mi) fence_acc(acc[mi]);
}

// A TF32 stage (A at sa, B at sb): warpgroup wg's WG_M 64-row slices of A against all of B
__device__ __forceinline__ void tf32_mmas(float (&acc)[WG_M][NACC], unsigned sa, unsigned sb,
                                          int wg)
{
#pragma unroll
  for (int ks = 0; ks < BK / 8; ++ks) {
#pragma unroll
    for (int mi = 0; mi < WG_M; ++mi)
      wgmma_tf32(acc[mi], desc(sa + (wg * WG_M + mi) * 64 * 128 + ks * KSTEP_BYTES),
                 desc(sb + ks * KSTEP_BYTES), 1);
  }
}

// The block's product over kt_n K tiles through STAGES cp.async stages, PF tiles ahead:
// load(kt, s) issues tile kt's copies into stage s, stage(s) its MMAs (a mma_group)
template <class Load, class Stage>
__device__ __forceinline__ void cp_async_pipeline(int kt_n, Load load, Stage stage)
{
#pragma unroll
  for (int s = 0; s < PF; ++s) {
    if (s < kt_n) load(s, s);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  for (int kt = 0; kt < kt_n; ++kt) {
    cp_async_wait<PF - 1>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (kt + PF < kt_n) load(kt + PF, (kt + PF) % STAGES);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    stage(kt % STAGES);
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
}

// Every accumulator pair of thread tid's m64nBN fragments with its C row and first column:
// f(row, col, value at col, value at col + 1)
template <class F>
__device__ __forceinline__ void each_pair(const float (&acc)[WG_M][NACC], int tm, int tn,
                                          int tid, F f)
{
  const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < WG_M; ++mi) {
    const int r0 = tm * BM + (wg * WG_M + mi) * 64 + warp * 16 + g;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = tn * BN + 8 * j + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        f(r0 + 8 * h, col, acc[mi][4 * j + 2 * h], acc[mi][4 * j + 2 * h + 1]);
    }
  }
}

// float C: 8-byte pair stores where N, ldc and C allow, rows past M and columns past N skipped
__device__ __forceinline__ void store_f32(const float (&acc)[WG_M][NACC], float *c, int m, int n,
                                          long long ldc, int tm, int tn, int tid)
{
  const bool pairs = n % 2 == 0 && ldc % 2 == 0 && ((unsigned long long)c & 7) == 0;
  each_pair(acc, tm, tn, tid, [&](int r, int col, float v0, float v1) {
    if (r >= m)
      return;
    float *p = c + r * ldc + col;
    if (pairs && col + 1 < n) {
      *reinterpret_cast<float2 *>(p) = make_float2(v0, v1);
    } else {
      if (col < n) p[0] = v0;
      if (col + 1 < n) p[1] = v1;
    }
  });
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
    wgmma_gemm(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c,
               int m, int n, int kp, long long ldc, int tiles_m, int tiles_n)
{
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, wg = tid >> 7;
  int tm, tn;
  group_tile(tiles_m, tiles_n, tm, tn);
  const float *ablk = a + (long long)tm * BM * kp;
  const float *bblk = b + (long long)tn * BN * kp;

  auto load = [&](int kt, int s) {
    const unsigned sa = base + s * STAGE_BYTES, sb = sa + A_BYTES;
    const float *ag = ablk + kt * BK, *bg = bblk + kt * BK;
#pragma unroll
    for (int i = tid; i < BM * 8; i += THREADS)
      cp_async16(sa + chunk_off(i >> 3, i & 7), ag + (long long)(i >> 3) * kp + (i & 7) * 4);
#pragma unroll
    for (int i = tid; i < BN * 8; i += THREADS)
      cp_async16(sb + chunk_off(i >> 3, i & 7), bg + (long long)(i >> 3) * kp + (i & 7) * 4);
  };

  float acc[WG_M][NACC];
  zero_acc(acc);
  cp_async_pipeline(kp / BK, load, [&](int s) {
    const unsigned sa = base + s * STAGE_BYTES;
    mma_group<WAIT1>(acc, [&] { tf32_mmas(acc, sa, sa + A_BYTES, wg); });
  });
  store_f32(acc, c, m, n, ldc, tm, tn, tid);
}

#if TMA
// ---- TMA variant: one producer warpgroup (one thread issues the copies), NWG consumer
// warpgroups; STAGES-deep ring with full/empty mbarriers; CLUSTER (1 or 2) blocks along M
// share the B tile: each loads BN / CLUSTER rows of it and multicasts them to both. The tensor
// maps (128-byte CUtensorMap, 128-byte swizzle, boxes of 32 floats x rows) come by value.

#define TMA_THREADS (128 * (NWG + 1))
#define BAR_OFF (STAGES * STAGE_BYTES)

// arrive on the barrier at CTA-relative address ``bar`` of cluster block ``rank``
__device__ __forceinline__ void mbar_arrive_at(unsigned bar, unsigned rank)
{
  asm volatile("{\n.reg .b32 r;\nmapa.shared::cluster.u32 r, %0, %1;\n"
               "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [r];\n}\n"
               ::"r"(bar), "r"(rank) : "memory");
}

__device__ __forceinline__ void tma_load(unsigned dst, const TmaMap *map, int x, int y,
                                         unsigned bar)
{
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}

__device__ __forceinline__ void tma_load_mc(unsigned dst, const TmaMap *map, int x, int y,
                                            unsigned bar, unsigned short mask)
{
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n"
               ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar), "h"(mask) : "memory");
}

__device__ __forceinline__ void cluster_sync()
{
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
               ::: "memory");
}

// C[M x N] = Ap[Mp x Kp] @ Bt[Np x Kp]^T through the maps ma (box 32 x BM) and mb
// (box 32 x BN / CLUSTER); tiles_m is a multiple of CLUSTER (Mp padded to it).
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(TMA_THREADS, 1)
    wgmma_gemm_tma(const __grid_constant__ TmaMap ma, const __grid_constant__ TmaMap mb,
                   float *__restrict__ c, int m, int n, int kp, long long ldc, int tiles_m,
                   int tiles_n)
{
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const unsigned full = base + BAR_OFF, empty = full + 8 * STAGES;
  const int tid = threadIdx.x;
#if CLUSTER > 1
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#endif

  int tm, tn;
  group_tile(tiles_m, tiles_n, tm, tn);
  const int kt_n = kp / BK;

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, NWG * CLUSTER);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
#if CLUSTER > 1
  cluster_sync();
#endif

  const int wg = tid >> 7;
  if (wg == NWG) {  // producer warpgroup: one thread
    if ((tid & 127) == 0) {
      for (int kt = 0; kt < kt_n; ++kt) {
        const int s = kt % STAGES;
        mbar_wait(empty + 8 * s, ((kt / STAGES) & 1) ^ 1);
        const unsigned sa = base + s * STAGE_BYTES, bar = full + 8 * s;
        mbar_expect(bar, STAGE_BYTES);
        tma_load(sa, &ma, kt * BK, tm * BM, bar);
#if CLUSTER > 1
        tma_load_mc(sa + A_BYTES + rank * (B_BYTES / CLUSTER), &mb, kt * BK,
                    tn * BN + rank * (BN / CLUSTER), bar, (unsigned short)((1 << CLUSTER) - 1));
#else
        tma_load(sa + A_BYTES, &mb, kt * BK, tn * BN, bar);
#endif
      }
    }
  } else {
    float acc[WG_M][NACC];
    zero_acc(acc);
    for (int kt = 0; kt < kt_n; ++kt) {
      const int s = kt % STAGES;
      mbar_wait(full + 8 * s, (kt / STAGES) & 1);
      const unsigned sa = base + s * STAGE_BYTES;
      mma_group<1>(acc, [&] { tf32_mmas(acc, sa, sa + A_BYTES, wg); });
      if (kt > 0 && (tid & 127) == 0)
        for (unsigned r = 0; r < CLUSTER; ++r) mbar_arrive_at(empty + 8 * ((kt - 1) % STAGES), r);
    }
    wgmma_wait<0>();
    store_f32(acc, c, m, n, ldc, tm, tn, tid);
  }
#if CLUSTER > 1
  // no block leaves while its peer may still signal or write its memory (not .aligned: the
  // producer warp's lanes took different paths)
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}
#endif

#if HALF
// ---- float16 (HALF 1) / bfloat16 (HALF 2) experiment (benches/wgmma_probe.py only): A row-major
// (K-major), B row-major read as N-major (wgmma's transpose bit: no pack), f32 accumulators,
// 16-bit result; BK 64 (128-byte rows of A); cp.async ring as wgmma_gemm. The B tile is stored
// as 64-column (128-byte) panels of BK rows, 128-byte swizzled per 8 rows; HB_LBO / HB_SBO are
// the descriptor's two byte offsets (panel stride 64 * 128 bytes, 8-row stride 1024 bytes; which
// field takes which is what the screen finds out). K and N multiples of 8 (16-byte rows).
#if HALF == 2
#define HTYPE "bf16"
#define HCVT "cvt.rn.bf16.f32"
#else
#define HTYPE "f16"
#define HCVT "cvt.rn.f16.f32"
#endif
#ifndef HB_LBO
#define HB_LBO 8192
#endif
#ifndef HB_SBO
#define HB_SBO 1024
#endif
#define HBK 64
#define HB_BYTES (HBK * BN * 2)
#define HSTAGE (A_BYTES + HB_BYTES)

WGMMA_WRAPPER(wgmma_h, "k16.f32." HTYPE "." HTYPE, "1, 1, 0, 1")

__device__ __forceinline__ unsigned long long desc_mn(unsigned addr)
{
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(HB_LBO >> 4) << 16)
         | ((unsigned long long)(HB_SBO >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void cp_async16z(unsigned dst, const void *src, bool in)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(in ? 16 : 0) : "memory");
}

__device__ __forceinline__ unsigned short to_half(float x)
{
  unsigned short h;
  asm(HCVT " %0, %1;" : "=h"(h) : "f"(x));
  return h;
}

// C[M x N] (row stride ldc) = A[M x K] (row stride lda) @ B[K x N] (row stride ldb); rows
// 16-byte aligned; A's columns K..K rounded up to 8 must be readable and finite (zero padding).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    wgmma_gemm_h(const unsigned short *__restrict__ a, const unsigned short *__restrict__ b,
                 unsigned short *__restrict__ c, int m, int n, int k, long long lda,
                 long long ldb, long long ldc, int tiles_m, int tiles_n)
{
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, wg = tid >> 7;
  int tm, tn;
  group_tile(tiles_m, tiles_n, tm, tn);
  const unsigned short *ablk = a + tm * BM * lda, *bblk = b + tn * BN;

  // out-of-range 16-byte chunks are zero-filled (src-size 0): rows past M, K past K, columns
  // past N (K and N multiples of 8, rows 16-byte aligned: the host's business)
  auto load = [&](int kt, int s) {
    const unsigned sa = base + s * HSTAGE, sb = sa + A_BYTES;
    const int k0 = kt * HBK;
#pragma unroll
    for (int i = tid; i < BM * 8; i += THREADS) {
      const int r = i >> 3, kk = k0 + (i & 7) * 8;
      const bool in = tm * BM + r < m && kk < k;
      cp_async16z(sa + chunk_off(r, i & 7), in ? ablk + r * lda + kk : a, in);
    }
#pragma unroll
    for (int i = tid; i < HBK * BN / 8; i += THREADS) {
      const int kr = i / (BN / 8), j = i % (BN / 8), cc = j & 7;
      const bool in = k0 + kr < k && tn * BN + j * 8 < n;
      cp_async16z(sb + (j >> 3) * (HBK * 128) + kr * 128 + ((cc ^ (kr & 7)) << 4),
                  in ? bblk + (k0 + kr) * ldb + j * 8 : b, in);
    }
  };

  float acc[WG_M][NACC];
  zero_acc(acc);
  cp_async_pipeline((k + HBK - 1) / HBK, load, [&](int s) {
    const unsigned sa = base + s * HSTAGE, sb = sa + A_BYTES;
    mma_group<WAIT1>(acc, [&] {
#pragma unroll
      for (int ks = 0; ks < HBK / 16; ++ks) {
#pragma unroll
        for (int mi = 0; mi < WG_M; ++mi)
          wgmma_h(acc[mi], desc(sa + (wg * WG_M + mi) * 64 * 128 + ks * 32),
                  desc_mn(sb + ks * 16 * 128), 1);
      }
    });
  });

  const bool pairs = ldc % 2 == 0 && ((unsigned long long)c & 3) == 0;  // 4-byte aligned pairs
  each_pair(acc, tm, tn, tid, [&](int r, int col, float v0, float v1) {
    if (r >= m || col >= n)
      return;
    const unsigned lo = to_half(v0), hi = to_half(v1);
    unsigned short *p = c + r * ldc + col;
    if (col + 1 < n && pairs) {
      *reinterpret_cast<unsigned *>(p) = lo | (hi << 16);
    } else {
      p[0] = (unsigned short)lo;
      if (col + 1 < n) p[1] = (unsigned short)hi;
    }
  });
}
#endif
