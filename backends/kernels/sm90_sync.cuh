// What the two Hopper kernels share (hopper_gemm.cu, wgmma.cu): the by-value tensor map, shared
// addresses, the mbarrier steps of their TMA pipelines, and the TF32 B^T pack's tile. The hosts (backends/cupy_cuda/
// hopper.py and wgmma.py, their ``source``) put this text after the defines and before the
// kernel's own, as NVRTC gets it (no include paths).

struct __align__(64) TmaMap { unsigned long long v[16]; };

__device__ __forceinline__ unsigned smem_u32(const void *p)
{
  unsigned r;
  asm volatile("{\n.reg .u64 t;\ncvta.to.shared.u64 t, %1;\ncvt.u32.u64 %0, t;\n}\n"
               : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes)
{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// wait until the barrier's phase with this parity has completed; a lost signal traps (a
// failed launch) rather than hanging the device
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
  unsigned done = 0;
  for (unsigned tries = 0; !done; ++tries) {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    if (tries > (1u << 26)) asm volatile("trap;");
  }
}

// One 32 (k) x 64 (n) tile of a TF32 B^T pack, block (32, 8): B (K x N, strides ldb, sb
// elements) rounded by round(float) -> float and written transposed to bt (rows nn < rows, kp
// floats apart, K..kp zero); the caller offsets b and bt to its matrix.
template <class Round>
__device__ __forceinline__ void pack_bt_tile(const float *__restrict__ b, float *__restrict__ bt,
                                             int k, int n, long long ldb, long long sb, int rows,
                                             int kp, Round round)
{
  __shared__ float tile[32][65];
  const int k0 = blockIdx.y * 32, n0 = blockIdx.x * 64, x = threadIdx.x, y = threadIdx.y;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int kk = k0 + y + 8 * i;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int nn = n0 + x + 32 * h;
      tile[y + 8 * i][x + 32 * h] = kk < k && nn < n ? round(b[kk * ldb + nn * sb]) : 0.f;
    }
  }
  __syncthreads();
  const int kk = k0 + x;
  if (kk >= kp) return;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int nn = n0 + y + 8 * i;
    if (nn < rows) bt[(long long)nn * kp + kk] = tile[x][y + 8 * i];
  }
}
