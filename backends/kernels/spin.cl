/* spin: one work-item busy-waits `ns` nanoseconds of the GPU's global timer (NVIDIA: inline
 * PTX, which NVIDIA's OpenCL compiler accepts too). Queued ahead of each timed call by the
 * CuPy and OpenCL backends, so the host has enqueued the whole call before the timed work
 * starts: the events time the device, not Python (docs/benchmarks.md). One source for CUDA
 * (CuPy) and OpenCL; it needs none of gemm_common.h. */
#ifdef __OPENCL_VERSION__
  #define SPIN_KERNEL __kernel void
typedef ulong spin_u64;
#else
  #define SPIN_KERNEL extern "C" __global__ void
typedef unsigned long long spin_u64;
#endif

SPIN_KERNEL spin(spin_u64 ns)
{
  spin_u64 t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
