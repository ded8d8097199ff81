
#ifdef __CUDACC_RTC__
  #include <cuda/std/cstdint>
  using cuda::std::uint8_t;
  using cuda::std::uint16_t;
  using cuda::std::uint32_t;
  using cuda::std::uint64_t;
  using cuda::std::int8_t;
  using cuda::std::int16_t;
  using cuda::std::int32_t;
  using cuda::std::int64_t;

  #include <cuda/std/type_traits>
  namespace std {
    using cuda::std::is_same;
    using cuda::std::is_same_v;
    using cuda::std::is_integral;
    using cuda::std::is_signed;
    using cuda::std::is_unsigned;
    using cuda::std::is_floating_point;
    using cuda::std::enable_if;
    using cuda::std::conditional;
  }

  // NVRTC uses asm/volatile instead of __asm__/__volatile__ (gcc extension).
  #ifndef __asm__
  #define __asm__ asm
  #endif
  #ifndef __volatile__
  #define __volatile__ volatile
  #endif
#else
  #include <cstdint>
  #include <type_traits>
  #include <cuda.h>
#endif

#if (((__CUDACC_VER_MAJOR__ == 11) && (__CUDACC_VER_MINOR__ >= 4)) || \
     (__CUDACC_VER_MAJOR__ > 11))
#define TVM_ENABLE_L2_PREFETCH 1
#else
#define TVM_ENABLE_L2_PREFETCH 0
#endif

#ifdef _WIN32
  using uint = unsigned int;
  using uchar = unsigned char;
  using ushort = unsigned short;
  using int64_t = long long;
  using uint64_t = unsigned long long;
#else
  #define uint unsigned int
  #define uchar unsigned char
  #define ushort unsigned short
#endif
__forceinline__ __device__ void tvm_builtin_ptx_mbarrier_try_wait_parity_no_hint_try_wait_parity_shared_b64(uint32_t& __wait_complete, uint32_t __addr, uint32_t __phase) {
  asm volatile("{ .reg .pred pd0; mbarrier.try_wait.parity.shared.b64 pd0, [%1], %2; selp.b32 %0, 1, 0, pd0; }" : "=r"(__wait_complete) : "r"(__addr), "r"(__phase) : "memory");
}
__forceinline__ __device__ void tvm_builtin_ptx_mbarrier_arrive_nocount_arrive_shared_b64(uint32_t __addr) {
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];" :  : "r"(__addr) : "memory");
}
__forceinline__ __device__ void tvm_builtin_ptx_fence_mbarrier_init_mbarrier_init_release_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;" :  :  : "memory");
}
__forceinline__ __device__ void tvm_builtin_ptx_mbarrier_init_init_shared_b64(uint32_t __addr, uint32_t __count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" :  : "r"(__addr), "r"(__count) : "memory");
}

__forceinline__ __device__ unsigned int tvm_builtin_cuda_cvta_generic_to_shared(void* p) {
    return __cvta_generic_to_shared(p);
}
extern "C" __global__ void __launch_bounds__(256) transpose_kernel(float* __restrict__ A_ptr, float* __restrict__ B_ptr);
extern "C" __global__ void __launch_bounds__(256) transpose_kernel(float* __restrict__ A_ptr, float* __restrict__ B_ptr) {
  __shared__ alignas(64) float S_ptr[256];
  __shared__ alignas(64) uint64_t tw_mbarrier_ptr[1];
  alignas(64) uint tw_phase_ptr[1];
  alignas(64) uint tw_ready_ptr[1];
  if ((((int)threadIdx.y) == 0) && (((int)threadIdx.x) == 0)) {
    tvm_builtin_ptx_mbarrier_init_init_shared_b64(tvm_builtin_cuda_cvta_generic_to_shared((&(tw_mbarrier_ptr[0]))), (uint)256);
    tvm_builtin_ptx_fence_mbarrier_init_mbarrier_init_release_cluster();
  }
  __syncthreads();
  tw_phase_ptr[0] = (uint)0;
  int cse_v1 = (((int)threadIdx.y) * 64);
  S_ptr[((((int)threadIdx.y) * 16) + ((int)threadIdx.x))] = A_ptr[((((((int)blockIdx.y) * 1024) + (((int)threadIdx.y) * 64)) + (((int)blockIdx.x) * 16)) + ((int)threadIdx.x))];
  tvm_builtin_ptx_mbarrier_arrive_nocount_arrive_shared_b64(tvm_builtin_cuda_cvta_generic_to_shared((&(tw_mbarrier_ptr[0]))));
  tw_ready_ptr[0] = (uint)0;
  #pragma unroll 1
  while (1) {
    if (!((tw_ready_ptr[0] == (uint)0))) { break; }
    tvm_builtin_ptx_mbarrier_try_wait_parity_no_hint_try_wait_parity_shared_b64(tw_ready_ptr[0], tvm_builtin_cuda_cvta_generic_to_shared((&(tw_mbarrier_ptr[0]))), tw_phase_ptr[0]);
  }
  tw_phase_ptr[0] = (tw_phase_ptr[0] ^ (uint)1);
  B_ptr[((((((int)blockIdx.x) * 1024) + (((int)threadIdx.y) * 64)) + (((int)blockIdx.y) * 16)) + ((int)threadIdx.x))] = S_ptr[((((int)threadIdx.x) * 16) + ((int)threadIdx.y))];
}

