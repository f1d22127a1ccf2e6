// Hopper (sm_90a) float16 / bfloat16 / TF32 GEMM for tiledmm (issue 38): C = A @ B with
// float32 sums, C in the input dtype (float32 for TF32). A is M x K and B is K x N, both
// row-major as NumPy holds them.
//
// What runs (the order of the fast Hopper GEMMs: TMA + wgmma, warp specialization, persistent
// tiles, raw mbarriers; optional 2-block clusters sharing B by multicast):
// - a producer warpgroup (warpgroup 0; one thread issues everything) copies stage tiles by TMA
//   (cp.async.bulk.tensor.2d) into a STAGES-deep ring, each stage guarded by a "full" mbarrier
//   (the copies' bytes) and an "empty" one (every consumer warp of the cluster has finished
//   reading it);
// - CM x CN consumer warpgroups own WM x WN of the BM x BN block tile (WM = 64 WGM), and issue
//   wgmma.mma_async.m64nWNk16 with both operands read from shared memory: A K-major, B
//   N-major (the instruction's transpose bit: B is read as NumPy stores it, no transpose pass);
//   one wgmma group stays in flight while the next stage is awaited (WAIT1);
// - setmaxnreg moves registers from the producer (PRODUCER_REGS) to the consumers
//   (CONSUMER_REGS);
// - the grid is persistent: block b takes tiles b, b + G, b + 2G ... of a grouped order
//   (group_m tile rows at a time, column by column, so a group's B tiles stay in the L2); the
//   ring's stage and phase run on across tiles, so the producer fetches the next tile's first
//   stages while the consumers store the last one.
// Stage layout (1024-byte aligned, 128-byte swizzle as TMA writes it: 16-byte chunk c of a
// 128-byte row r sits at chunk c ^ (r % 8)): A: BM rows of 64 K-elements (128 bytes); B: BN / 64
// panels, each 64 K-rows of 64 N-elements (8 KiB). Descriptors: A SBO 1024 (8-row groups), k-step
// +32 bytes; B LBO 8192 (next 64-column panel), SBO 1024 (next 8 K-rows), k-step +2048 bytes.
// Edges: TMA fills what lies outside M, N, K with zeros (tensor maps carry the true extents);
// B panels wholly right of N and A tiles wholly below M are not fetched (their accumulators are
// never stored); stores are guarded. Rows must start 16-byte aligned (the host copies others).
// Batches: one launch; the maps' third dimension is the matrix, the persistent tiles run over
// every matrix's tiles (matrix by matrix, each in the grouped order).
//
// TF32 (DTYPE 3: float32 A, B and C, products of TF32-rounded inputs, float32 sums): TF32 wgmma
// (m64nWNk8) has no transpose bit, so both of its shared-memory operands are K-major. B is
// packed once per call by hopper_tf32_pack_bt into B^T (N x Kp floats, Kp = K rounded up to 4
// for 16-byte rows, rounded with cvt.rna.tf32.f32) and loaded by TMA like A: a stage holds A as
// BM rows and B^T as BN rows of BK = 32 floats (128 bytes, the same swizzle; B^T's 64-row panels
// are 8 KiB as the 16-bit path's), both descriptors K-major (SBO 1024, k8 step +32 bytes). A
// (AREG 1) is read by wgmma from registers: each consumer thread loads its fragments (rows 16
// warp + g and + 8, columns t and t + 4 of each k8 step; g = lane / 4, t = lane % 4) with
// ldmatrix from the swizzled tile and rounds them with cvt.rna, so A needs no pack; the
// fragments are double-buffered (the group in flight reads the previous stage's), the k-loop
// running two stages per pass. AREG 0 reads A by descriptor instead (the host then rounds it,
// e.g. a TFLOAT32 tensor map). C is stored from registers as float2 pairs (EPI 0 only).
//
// The host puts sm90_sync.cuh (the tensor map, shared addresses, mbarrier init / expect / wait,
// shared with wgmma.cu) between its defines and this text (hopper.source).
// Defines (set by the host, backends/cupy_cuda/hopper.py): DTYPE 1 float16 / 2 bfloat16 / 3
// TF32 (then AREG 1: A from registers, 0: by descriptor; EPI 0 only); BM, BN; CM, CN (consumer
// warpgroups along M and N); STAGES; CLUSTER 1 or 2 (two blocks along M take B halves and
// multicast them to both); WAIT1; PRODUCER_REGS / CONSUMER_REGS (0: no setmaxnreg); EPI 0: C
// stored from registers (guarded), 1: through shared memory and TMA stores where the launch
// says C's rows allow (c_tma), else from registers.

#ifndef DTYPE
#define DTYPE 1
#endif
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef CM
#define CM 2
#endif
#ifndef CN
#define CN 1
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef CLUSTER
#define CLUSTER 1
#endif
#ifndef WAIT1
#define WAIT1 1
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 232
#endif
#ifndef EPI
#define EPI 0
#endif

#define NCONS (CM * CN)
#define THREADS (128 * (NCONS + 1))
#define WM (BM / CM)
#define WGM (WM / 64)
#define WN (BN / CN)
#define NACC (WN / 2)
#if DTYPE == 3
#define BK 32
#define CTYPE float
#else
#define BK 64
#define CTYPE unsigned short
#endif
#define PANELS (BN / 64)
#define PANEL_BYTES 8192
#define A_BYTES (BM * 128)
#define B_BYTES (BN * 128)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define EMPTY_COUNT (4 * NCONS * CLUSTER)
// EPI 1: each consumer's C sub-tile is staged in shared memory (WGM x WN / 64 swizzled panels
// of 64 rows x 128 bytes) and written by TMA stores, which run on while the next tile starts
#define C_BYTES (EPI ? WGM * (WN / 64) * PANEL_BYTES : 0)
#define C_OFF (STAGES * STAGE_BYTES)
#define BAR_OFF (C_OFF + NCONS * C_BYTES)

#if WM % 64 || WGM > 2 || (WN != 64 && WN != 128 && WN != 256) || WGM * NACC > 128
#error "hopper_gemm.cu: each consumer owns 1-2 m64 slabs of 64, 128 or 256 columns"
#endif
#if CLUSTER != 1 && CLUSTER != 2
#error "hopper_gemm.cu: CLUSTER is 1 or 2"
#endif
#if CLUSTER == 2 && PANELS % 2
#error "hopper_gemm.cu: a 2-block cluster splits B's panels in halves"
#endif
#if DTYPE == 3 && EPI
#error "hopper_gemm.cu: DTYPE 3 (TF32) stores C from registers only (EPI 0)"
#endif
#ifndef AREG
#define AREG 1
#endif

#if DTYPE == 2
#define HTYPE "bf16"
#define HCVT2 "cvt.rn.bf16x2.f32"
#else
#define HTYPE "f16"
#define HCVT2 "cvt.rn.f16x2.f32"
#endif

// ---------------------------------------------------------------- mbarriers and TMA

// the consumer warps' release of a stage: on this block's barrier, or on every cluster block's
__device__ __forceinline__ void mbar_release(unsigned bar)
{
#if CLUSTER == 1
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
#pragma unroll
  for (unsigned r = 0; r < CLUSTER; ++r)
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n"
                 ::"r"(bar), "r"(r) : "memory");
#endif
}

// the maps are 3-D: {columns, rows, matrices of the batch}; z picks the matrix
__device__ __forceinline__ void tma_load(unsigned dst, const TmaMap *map, int x, int y, int z,
                                         unsigned bar)
{
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];\n"
               ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar) : "memory");
}

__device__ __forceinline__ void tma_load_mc(unsigned dst, const TmaMap *map, int x, int y,
                                            int z, unsigned bar, unsigned short mask)
{
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
               ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar), "h"(mask) : "memory");
}

#if EPI
__device__ __forceinline__ void tma_store(const TmaMap *map, unsigned src, int x, int y, int z)
{
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group"
               " [%0, {%2, %3, %4}], [%1];\n"
               ::"l"(map), "r"(src), "r"(x), "r"(y), "r"(z) : "memory");
}
#endif

// ---------------------------------------------------------------- wgmma m64nWNk16

#define HG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                 "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define HG_D32(i) HG_D8(i), HG_D8(i + 8), HG_D8(i + 16), HG_D8(i + 24)
#define HG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "             \
              "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define HG_R32 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define HG_R64 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
               "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "  \
               "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "              \
               "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, "          \
               "%120, %121, %122, %123, %124, %125, %126, %127"
#if WN == 64
#define HG_DOUT HG_D32(0)
#define HG_REGS HG_R0
#define HG_TAIL "%32, %33, p"
#define HG_FLAG "%34"
#define HG_SHAPE "m64n64k16"
#elif WN == 128
#define HG_DOUT HG_D32(0), HG_D32(32)
#define HG_REGS HG_R0 ", " HG_R32
#define HG_TAIL "%64, %65, p"
#define HG_FLAG "%66"
#define HG_SHAPE "m64n128k16"
#else
#define HG_DOUT HG_D32(0), HG_D32(32), HG_D32(64), HG_D32(96)
#define HG_REGS HG_R0 ", " HG_R32 ", " HG_R64
#define HG_TAIL "%128, %129, p"
#define HG_FLAG "%130"
#define HG_SHAPE "m64n256k16"
#endif

// d (+)= A(desc da, K-major) x B(desc db, N-major: transpose bit); sd 0: d = product
__device__ __forceinline__ void wgmma16(float (&d)[NACC], unsigned long long da,
                                        unsigned long long db, int sd)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " HG_FLAG ", 0;\n"
               "wgmma.mma_async.sync.aligned." HG_SHAPE ".f32." HTYPE "." HTYPE
               " {" HG_REGS "}, " HG_TAIL ", 1, 1, 0, 1;\n}\n"
               : HG_DOUT
               : "l"(da), "l"(db), "r"(sd));
}

#if DTYPE == 3
// ---------------------------------------------------------------- wgmma m64nWNk8 TF32
// the same accumulator operands; then (AREG 1) A's four fragment registers, B's descriptor and
// the scale-d flag, or (AREG 0) the two descriptors and the flag
#if WN == 64
#define TF_SHAPE "m64n64k8"
#define TF_RS_TAIL "{%32, %33, %34, %35}, %36, p"
#define TF_RS_FLAG "%37"
#elif WN == 128
#define TF_SHAPE "m64n128k8"
#define TF_RS_TAIL "{%64, %65, %66, %67}, %68, p"
#define TF_RS_FLAG "%69"
#else
#define TF_SHAPE "m64n256k8"
#define TF_RS_TAIL "{%128, %129, %130, %131}, %132, p"
#define TF_RS_FLAG "%133"
#endif

// d (+)= A (fragment a: rows 16 warp + g and + 8, columns t and t + 4 of the k8 step, g = lane
// / 4, t = lane % 4, already TF32) x B (desc db, K-major); sd 0: d = product
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[NACC], const unsigned (&a)[4],
                                              unsigned long long db, int sd)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " TF_RS_FLAG ", 0;\n"
               "wgmma.mma_async.sync.aligned." TF_SHAPE ".f32.tf32.tf32"
               " {" HG_REGS "}, " TF_RS_TAIL ", 1, 1;\n}\n"
               : HG_DOUT
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(sd));
}

// d (+)= A (desc da, K-major) x B (desc db, K-major): both from shared memory (AREG 0)
__device__ __forceinline__ void wgmma_tf32_ss(float (&d)[NACC], unsigned long long da,
                                              unsigned long long db, int sd)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " HG_FLAG ", 0;\n"
               "wgmma.mma_async.sync.aligned." TF_SHAPE ".f32.tf32.tf32"
               " {" HG_REGS "}, " HG_TAIL ", 1, 1;\n}\n"
               : HG_DOUT
               : "l"(da), "l"(db), "r"(sd));
}

// four 8 x 4 float matrices (rows of 16 bytes; lane l gives the row address of matrix l / 8)
// into a[0..3]: lane l gets row l / 4, float l % 4 of each
__device__ __forceinline__ void ldsm_x4(unsigned (&a)[4], unsigned addr)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr)
               : "memory");
}

// float32 -> TF32, to nearest (ties away), as cuBLAS and the repo's other TF32 paths round
__device__ __forceinline__ unsigned tf32_rna(unsigned x)
{
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
}
#endif

// shared-memory matrix descriptor, 128-byte swizzle
__device__ __forceinline__ unsigned long long sdesc(unsigned addr, unsigned lbo, unsigned sbo)
{
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)
         | ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void fence_acc(float (&d)[WGM][NACC])
{
#pragma unroll
  for (int mi = 0; mi < WGM; ++mi)
#pragma unroll
    for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(d[mi][i])::"memory");
}

template <int N> __device__ __forceinline__ void wgmma_wait()
{
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// a stage's wgmma group committed; WAIT1: wait until it alone is in flight and release the
// stage the group before it read (``prev``), else wait for it and release its own stage ``s``;
// ``waited()`` runs right after the wait (TF32: keeps the fragments that group read)
template <class F>
__device__ __forceinline__ void retire(float (&acc)[WGM][NACC], unsigned empty, unsigned s,
                                       int &prev, int lane, F waited)
{
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#if WAIT1
  wgmma_wait<1>();
  fence_acc(acc);
  waited();
  if (prev >= 0 && lane == 0) mbar_release(empty + 8 * prev);
  prev = (int)s;
#else
  wgmma_wait<0>();
  fence_acc(acc);
  waited();
  if (lane == 0) mbar_release(empty + 8 * s);
#endif
}

// the end of a tile's K walk (WAIT1): wait for its last group and release that stage
template <class F>
__device__ __forceinline__ void drain(float (&acc)[WGM][NACC], unsigned empty, int prev, int lane,
                                      F waited)
{
#if WAIT1
  wgmma_wait<0>();
  fence_acc(acc);
  waited();
  if (prev >= 0 && lane == 0) mbar_release(empty + 8 * prev);
#endif
}

// ---------------------------------------------------------------- schedule and epilogue

// tile t of the grouped order over tiles_m x tiles_n (units: cluster tiles along M)
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int group_m, int &tm,
                                        int &tn)
{
  const int per_group = group_m * tiles_n, first = (t / per_group) * group_m;
  const int gsize = min(tiles_m - first, group_m), r = t % per_group;
  tm = first + r % gsize;
  tn = r / gsize;
}

#if DTYPE == 3
// columns col and col + 1 of a float32 C row: one float2 where ``pairs`` (C's rows and base
// allow) and both lie inside, else one by one, guarded
__device__ __forceinline__ void put2(float *crow, int col, int n, float lo, float hi, bool pairs)
{
  if (pairs && col + 1 < n) {
    *reinterpret_cast<float2 *>(crow + col) = make_float2(lo, hi);
  } else {
    crow[col] = lo;
    if (col + 1 < n) crow[col + 1] = hi;
  }
}
#else
__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
  unsigned r;
  asm(HCVT2 " %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// the same for 16-bit C: the pair rounded and packed, one 32-bit store where it may
__device__ __forceinline__ void put2(unsigned short *crow, int col, int n, float lo, float hi,
                                     bool pairs)
{
  const unsigned v = pack2(lo, hi);
  if (pairs && col + 1 < n) {
    *reinterpret_cast<unsigned *>(crow + col) = v;
  } else {
    crow[col] = (unsigned short)(v & 0xFFFF);
    if (col + 1 < n) crow[col + 1] = (unsigned short)(v >> 16);
  }
}
#endif

// consumer (cm, cn)'s accumulators into C rows row0.. and columns col0.., guarded
__device__ __forceinline__ void store_tile(const float (&acc)[WGM][NACC], CTYPE *c, int m, int n,
                                           long long ldc, int row0, int col0, int lane, int warp,
                                           bool pairs)
{
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < WGM; ++mi) {
    const int r0 = row0 + mi * 64 + warp * 16 + g;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      if (r >= m) continue;
      CTYPE *crow = c + (long long)r * ldc;
#pragma unroll
      for (int j = 0; j < WN / 8; ++j) {
        const int col = col0 + 8 * j + 2 * t;
        if (col >= n) continue;
        put2(crow, col, n, acc[mi][4 * j + 2 * h], acc[mi][4 * j + 2 * h + 1], pairs);
      }
    }
  }
}

#if EPI
// the accumulators as 16-bit pairs into this consumer's staging panels (128-byte swizzle, as
// the TMA store reads them: conflict-free, a warp's 8 rows land in 8 distinct chunks)
__device__ __forceinline__ void stage_tile(const float (&acc)[WGM][NACC], unsigned cs, int lane,
                                           int warp)
{
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < WGM; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 16 + g + 8 * h;
#pragma unroll
      for (int j = 0; j < WN / 8; ++j) {
        const unsigned v = pack2(acc[mi][4 * j + 2 * h], acc[mi][4 * j + 2 * h + 1]);
        const unsigned addr = cs + (mi * (WN / 64) + j / 8) * PANEL_BYTES + r * 128
                              + (((j & 7) ^ (r & 7)) << 4) + 4 * t;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
      }
    }
}

__device__ __forceinline__ void wg_sync(int id)
{
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
#endif

#if DTYPE == 3
// ---------------------------------------------------------------- a TF32 consumer's stage

#define KSTEPS (BK / 8)

// keeps A's fragment registers as they are up to here (those of a wgmma group just waited for)
__device__ __forceinline__ void fence_frag(const unsigned (&f)[WGM][KSTEPS][4])
{
#pragma unroll
  for (int mi = 0; mi < WGM; ++mi)
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
      asm volatile("" ::"r"(f[mi][ks][0]), "r"(f[mi][ks][1]), "r"(f[mi][ks][2]),
                   "r"(f[mi][ks][3]) : "memory");
}

// Stage ``it`` of the ring (tile k-step kt): wait for its copies; AREG: A's fragments for the
// KSTEPS k8 steps by ldmatrix from the swizzled tile (a_off: the consumer's slab plus this
// lane's row and 16-byte chunk; k-step ks is chunk ^ 2 ks, i.e. the address ^ 32 ks) rounded to
// TF32 in ``cur`` (``old``: the previous stage's, read by the group in flight until the wait
// below); then the stage's wgmma as one group (B K-major by descriptor at b_off, +32 bytes per
// k-step), WAIT1 groups left in flight, and the stage no group reads any more released
__device__ __forceinline__ void tf32_stage(float (&acc)[WGM][NACC],
                                           unsigned (&cur)[WGM][KSTEPS][4],
                                           const unsigned (&old)[WGM][KSTEPS][4],
                                           unsigned base, unsigned full, unsigned empty,
                                           unsigned it, int kt, int &prev, unsigned a_off,
                                           unsigned b_off, int lane)
{
  const unsigned s = it % STAGES, ph = (it / STAGES) & 1;
  const unsigned st = base + s * STAGE_BYTES;
  mbar_wait(full + 8 * s, ph);
#if AREG
#pragma unroll
  for (int mi = 0; mi < WGM; ++mi)
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
      ldsm_x4(cur[mi][ks], (st + a_off + mi * 64 * 128) ^ (ks << 5));
#pragma unroll
  for (int mi = 0; mi < WGM; ++mi)
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
      for (int j = 0; j < 4; ++j) cur[mi][ks][j] = tf32_rna(cur[mi][ks][j]);
#endif
  fence_acc(acc);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
    for (int mi = 0; mi < WGM; ++mi)
#if AREG
      wgmma_tf32_rs(acc[mi], cur[mi][ks], sdesc(st + A_BYTES + b_off + ks * 32, 16, 1024),
                    kt | ks);
#else
      wgmma_tf32_ss(acc[mi], sdesc(st + a_off + mi * 64 * 128 + ks * 32, 16, 1024),
                    sdesc(st + A_BYTES + b_off + ks * 32, 16, 1024), kt | ks);
#endif
#if WAIT1
  retire(acc, empty, s, prev, lane, [&] { fence_frag(old); });
#else
  retire(acc, empty, s, prev, lane, [&] { fence_frag(cur); });
#endif
}

// TF32 B^T: bt[z] (N x kp, K-major, rows kp floats apart, columns K..kp zero) = B[z] (K x N,
// strides ldb, sb elements; matrix z at b + z * b_bs) transposed and rounded to TF32
// (cvt.rna), for the kernel's B map; sm90_sync.cuh's pack_bt_tile, grid (ceil(N / 64),
// ceil(kp / 32), batch)
extern "C" __global__ void __launch_bounds__(256)
hopper_tf32_pack_bt(const float *__restrict__ b, float *__restrict__ bt, int k, int n,
                    long long ldb, long long sb, long long b_bs, int kp, long long bt_bs)
{
  pack_bt_tile(b + blockIdx.z * b_bs, bt + blockIdx.z * bt_bs, k, n, ldb, sb, n, kp,
               [](float v) { return __uint_as_float(tf32_rna(__float_as_uint(v))); });
}
#endif

// ---------------------------------------------------------------- the kernel

// C[z] (M x N, row stride ldc elements, matrix z at c + z * c_bs) = A[z] @ B[z] for z < batch
// through the maps ma (A: {K, M, batch or 1}, box 64 x BM x 1) and mb (B: {N, K, batch or 1},
// box 64 x 64 x 1); a_bat / b_bat 0: the operand is one matrix shared by the batch (NumPy's
// broadcast); tiles_m = ceil(M / BM) rounded up to CLUSTER, tiles_n = ceil(N / BN); gridDim.x
// a multiple of CLUSTER, at most the tiles of the whole batch. DTYPE 3: c is float32; ma
// {K, M, batch or 1}, box 32 x BM x 1 of 4-byte elements; mb maps the packed B^T: {K, N, batch
// or 1}, row stride Kp floats, box 32 x 64 x 1.
extern "C" __global__ void
#if CLUSTER > 1
__cluster_dims__(CLUSTER, 1, 1)
#endif
__launch_bounds__(THREADS, 1)
hopper_gemm(const __grid_constant__ TmaMap ma, const __grid_constant__ TmaMap mb,
            const __grid_constant__ TmaMap mc, CTYPE *__restrict__ c, int m, int n,
            int k, long long ldc, int tiles_m, int tiles_n, int group_m, int c_tma, int batch,
            int a_bat, int b_bat, long long c_bs)
{
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const unsigned full = base + BAR_OFF, empty = full + 8 * STAGES;
  const int tid = threadIdx.x, wg = tid >> 7;
#if CLUSTER > 1
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#else
  const unsigned rank = 0;
#endif
  const int kt_n = (k + BK - 1) / BK;
  const int ctiles_m = tiles_m / CLUSTER, per = ctiles_m * tiles_n, total = per * batch;
  const int first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, EMPTY_COUNT);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
#if CLUSTER > 1
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
               ::: "memory");
#endif

  if (wg == 0) {  // ------------------------------------------------ producer
#if PRODUCER_REGS
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
#endif
    if (tid == 0) {
      unsigned it = 0;
      for (int t = first; t < total; t += step) {
        int ctm, tn;
        const int z = t / per;
        tile_of(t - z * per, ctiles_m, tiles_n, group_m, ctm, tn);
        const int row0 = (ctm * CLUSTER + (int)rank) * BM, col0 = tn * BN;
        const int za = a_bat ? z : 0, zb = b_bat ? z : 0;
        const bool a_in = row0 < m;
        const int panels = min(PANELS, (n - col0 + 63) / 64);  // B panels left of N
        const unsigned bytes = (a_in ? A_BYTES : 0) + panels * PANEL_BYTES;
        for (int kt = 0; kt < kt_n; ++kt, ++it) {
          const unsigned s = it % STAGES, ph = (it / STAGES) & 1;
          const unsigned sa = base + s * STAGE_BYTES, sb = sa + A_BYTES, bar = full + 8 * s;
          mbar_wait(empty + 8 * s, ph ^ 1);
          mbar_expect(bar, bytes);
          if (a_in) tma_load(sa, &ma, kt * BK, row0, za, bar);
#if DTYPE == 3
          // B^T: panel p is its rows col0 + 64 p .. (64 N-rows of 32 K-floats, 8 KiB)
#define B_XY kt * BK, col0 + 64 * p
#else
#define B_XY col0 + 64 * p, kt * BK
#endif
#if CLUSTER == 1
          for (int p = 0; p < panels; ++p)
            tma_load(sb + p * PANEL_BYTES, &mb, B_XY, zb, bar);
#else
          for (int p = rank * (PANELS / 2); p < (int)(rank + 1) * (PANELS / 2) && p < panels; ++p)
            tma_load_mc(sb + p * PANEL_BYTES, &mb, B_XY, zb, bar,
                        (unsigned short)((1 << CLUSTER) - 1));
#endif
        }
      }
    }
  } else {  // -------------------------------------------------------- consumers
#if CONSUMER_REGS
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
#endif
    const int cw = wg - 1, cm = cw / CN, cn = cw % CN;
    const int warp = (tid >> 5) & 3, lane = tid & 31;
    const bool pairs = (ldc & 1) == 0 && (c_bs & 1) == 0
                       && ((unsigned long long)c & (2 * sizeof(CTYPE) - 1)) == 0;
    float acc[WGM][NACC];
#pragma unroll
    for (int mi = 0; mi < WGM; ++mi)
#pragma unroll
      for (int i = 0; i < NACC; ++i) acc[mi][i] = 0.f;
    unsigned it = 0;
    for (int t = first; t < total; t += step) {
      int ctm, tn;
      const int z = t / per;
      tile_of(t - z * per, ctiles_m, tiles_n, group_m, ctm, tn);
      const int row0 = (ctm * CLUSTER + (int)rank) * BM, col0 = tn * BN;
#if DTYPE == 3
      int prev = -1;
      // A's fragments, double-buffered: a stage's are read by its group while the next
      // stage's are loaded (two stages per pass, so each buffer is its own registers)
      unsigned fa[WGM][KSTEPS][4], fb[WGM][KSTEPS][4];
#pragma unroll
      for (int mi = 0; mi < WGM; ++mi)
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
          for (int j = 0; j < 4; ++j) fa[mi][ks][j] = fb[mi][ks][j] = 0u;
#if AREG
      const int ar = 16 * warp + (lane & 7) + 8 * ((lane >> 3) & 1);
      const unsigned a_off = cm * WGM * 64 * 128 + ar * 128 + ((((lane >> 4) ^ lane) & 7) << 4);
#else
      const unsigned a_off = cm * WGM * 64 * 128;
#endif
      const unsigned b_off = cn * (WN / 64) * PANEL_BYTES;
      for (int kt = 0; kt < kt_n; kt += 2) {
        tf32_stage(acc, fa, fb, base, full, empty, it++, kt, prev, a_off, b_off, lane);
        if (kt + 1 == kt_n) break;
        tf32_stage(acc, fb, fa, base, full, empty, it++, kt + 1, prev, a_off, b_off, lane);
      }
      drain(acc, empty, prev, lane, [&] {
        fence_frag(fa);
        fence_frag(fb);
      });
#else  // DTYPE 1, 2
      int prev = -1;
      for (int kt = 0; kt < kt_n; ++kt, ++it) {
        const unsigned s = it % STAGES, ph = (it / STAGES) & 1;
        const unsigned sa = base + s * STAGE_BYTES + cm * WGM * 64 * 128;
        const unsigned sb = base + s * STAGE_BYTES + A_BYTES + cn * (WN / 64) * PANEL_BYTES;
        mbar_wait(full + 8 * s, ph);
        fence_acc(acc);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks)
#pragma unroll
          for (int mi = 0; mi < WGM; ++mi)
            wgmma16(acc[mi], sdesc(sa + mi * 64 * 128 + ks * 32, 16, 1024),
                    sdesc(sb + ks * 2048, PANEL_BYTES, 1024), kt | ks);
        retire(acc, empty, s, prev, lane, [] {});
      }
      drain(acc, empty, prev, lane, [] {});
#endif  // DTYPE
      if (row0 >= m) continue;
#if EPI
      if (c_tma) {
        const unsigned cs = base + C_OFF + cw * C_BYTES;
        const bool lead = (tid & 127) == 0;
        if (lead) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        wg_sync(1 + cw);  // the previous tile's stores have read the panels
        stage_tile(acc, cs, lane, warp);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        wg_sync(1 + cw);
        if (lead) {
#pragma unroll
          for (int mi = 0; mi < WGM; ++mi)
#pragma unroll
            for (int p = 0; p < WN / 64; ++p)
              if (col0 + cn * WN + 64 * p < n && row0 + cm * WM + 64 * mi < m)
                tma_store(&mc, cs + (mi * (WN / 64) + p) * PANEL_BYTES,
                          col0 + cn * WN + 64 * p, row0 + cm * WM + 64 * mi, z);
          asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        }
        continue;
      }
#endif
      store_tile(acc, c + z * c_bs, m, n, ldc, row0 + cm * WM, col0 + cn * WN, lane, warp,
                 pairs);
    }
#if EPI
    if (c_tma && (tid & 127) == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
  }
#if CLUSTER > 1
  // no block leaves while its peer may still multicast into it or signal its barriers
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}
