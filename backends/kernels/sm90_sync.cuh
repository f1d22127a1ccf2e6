// What the two Hopper kernels share (hopper_gemm.cu, wgmma.cu): the by-value tensor map, shared
// addresses, and the mbarrier steps of their TMA pipelines. The hosts (backends/cupy_cuda/
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
