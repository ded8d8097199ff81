
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
__forceinline__ __device__ void tvm_builtin_ptx_barrier_sync_count_sync(uint32_t __a, uint32_t __b) {
  asm volatile("barrier.sync %0, %1;" :  : "r"(__a), "r"(__b) : "memory");
}
extern "C" __global__ void __launch_bounds__(256) warp_specialized_kernel(float* __restrict__ A_ptr, float* __restrict__ B_ptr);
extern "C" __global__ void __launch_bounds__(256) warp_specialized_kernel(float* __restrict__ A_ptr, float* __restrict__ B_ptr) {
  alignas(64) float acc_ptr[1];
  __shared__ alignas(64) float S_ptr[128];
  acc_ptr[0] = 0x0p+0f/*0.000000e+00*/;
  for (int k = 0; k < 8; ++k) {
    if (((int)threadIdx.x) < 128) {
      S_ptr[((int)threadIdx.x)] = A_ptr[(((((int)blockIdx.x) * 1024) + (k * 128)) + ((int)threadIdx.x))];
      tvm_builtin_ptx_barrier_sync_count_sync((uint)1, (uint)256);
      tvm_builtin_ptx_barrier_sync_count_sync((uint)2, (uint)256);
    } else {
      tvm_builtin_ptx_barrier_sync_count_sync((uint)1, (uint)256);
      acc_ptr[0] = (acc_ptr[0] + (S_ptr[(255 - ((int)threadIdx.x))] * ((float)(k + 1))));
      tvm_builtin_ptx_barrier_sync_count_sync((uint)2, (uint)256);
    }
  }
  if (128 <= ((int)threadIdx.x)) {
    B_ptr[(((((int)blockIdx.x) * 128) + ((int)threadIdx.x)) - 128)] = acc_ptr[0];
  }
}

