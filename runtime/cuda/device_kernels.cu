// meshflow's CUDA byte kernels: box-region copy (pack/unpack of non-contiguous shards), fill, and the
// rank-order reduction that keeps device reductions bit-identical to collectives/reduce.cc.
#include <cstdint>
#include <cstring>

#include "meshflow/cuda/grid.h"
#include "meshflow/runtime/cuda/device_kernels_launch.h"

namespace meshflow {
namespace device_kernels_internal {
namespace {

using cuda_grid::Blocks;
using cuda_grid::kThreads;

// Element offsets in src (*s) and dst (*d) of the flat (row-major) index `flat` within the box.
__device__ __forceinline__ void BoxOffsets(const BoxCopyArgs& a, int64_t flat, int64_t* s, int64_t* d) {
  int64_t rest = flat;
  int64_t src_index = 0, dst_index = 0, s_stride = 1, d_stride = 1;
  for (int k = a.rank - 1; k >= 0; --k) {
    const int64_t idx = rest % a.extent[k];
    rest /= a.extent[k];
    src_index += (a.src_offset[k] + idx) * s_stride;
    dst_index += (a.dst_offset[k] + idx) * d_stride;
    s_stride *= a.src_shape[k];
    d_stride *= a.dst_shape[k];
  }
  *s = src_index;
  *d = dst_index;
}

template <typename T>
__global__ void BoxCopyKernel(BoxCopyArgs a, int64_t total) {
  const T* src = static_cast<const T*>(a.src);
  T* dst = static_cast<T*>(a.dst);
  for (int64_t flat = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; flat < total;
       flat += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t s = 0, d = 0;
    BoxOffsets(a, flat, &s, &d);
    dst[d] = src[s];
  }
}

// Byte-wise fallback for element sizes other than 1, 2, 4, 8, 16.
__global__ void BoxCopyBytesKernel(BoxCopyArgs a, int64_t total) {
  const unsigned char* src = static_cast<const unsigned char*>(a.src);
  unsigned char* dst = static_cast<unsigned char*>(a.dst);
  for (int64_t flat = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; flat < total;
       flat += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t s = 0, d = 0;
    BoxOffsets(a, flat, &s, &d);
    for (int64_t b = 0; b < a.elem_size; ++b) dst[d * a.elem_size + b] = src[s * a.elem_size + b];
  }
}

struct alignas(16) Bytes16 {
  unsigned long long lo, hi;
};

// ---- fill ----
template <typename T>
__global__ void FillKernel(T* dst, int64_t count, T value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

// Any element size (or a dst not aligned to it): one byte per thread step.
__global__ void FillBytesKernel(FillArgs a, int64_t bytes) {
  unsigned char* dst = static_cast<unsigned char*>(a.dst);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = a.value[i % a.elem_size];
  }
}

template <typename T>
cudaError_t Fill(const FillArgs& a, cudaStream_t stream) {
  T value;
  std::memcpy(&value, a.value, sizeof(T));
  FillKernel<T><<<Blocks(a.count), kThreads, 0, stream>>>(static_cast<T*>(a.dst), a.count, value);
  return cudaGetLastError();
}

// ---- reduction (mirrors collectives/reduce.cc) ----
struct BF16 {
  uint16_t bits;
};

__device__ float BF16ToFloat(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ uint16_t FloatToBF16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

template <typename T>
struct Traits;
// float and double accumulate in their own type.
template <typename T>
struct SameTypeFloatTraits {
  using Acc = T;
  static constexpr bool kFloat = true;
  __device__ static Acc Load(T v) { return v; }
  __device__ static T Store(Acc v) { return v; }
};
template <>
struct Traits<float> : SameTypeFloatTraits<float> {};
template <>
struct Traits<double> : SameTypeFloatTraits<double> {};
template <>
struct Traits<BF16> {
  using Acc = float;
  static constexpr bool kFloat = true;
  __device__ static Acc Load(BF16 v) { return BF16ToFloat(v.bits); }
  __device__ static BF16 Store(Acc v) { return BF16{FloatToBF16(v)}; }
};
template <>
struct Traits<int32_t> {
  using Acc = long long;
  static constexpr bool kFloat = false;
  __device__ static Acc Load(int32_t v) { return v; }
  __device__ static int32_t Store(Acc v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }
};
template <>
struct Traits<int64_t> {
  using Acc = __int128;
  static constexpr bool kFloat = false;
  __device__ static Acc Load(int64_t v) { return v; }
  __device__ static int64_t Store(Acc v) {
    return static_cast<int64_t>(static_cast<unsigned long long>(static_cast<unsigned __int128>(v)));
  }
};

template <typename Acc, bool kFloat>
__device__ Acc Max(Acc acc, Acc x) {
  if constexpr (kFloat) {
    return (acc != acc || acc >= x) ? acc : x;  // NaN propagates; earliest of equals wins
  } else {
    return acc >= x ? acc : x;
  }
}
template <typename Acc, bool kFloat>
__device__ Acc Min(Acc acc, Acc x) {
  if constexpr (kFloat) {
    return (acc != acc || acc <= x) ? acc : x;
  } else {
    return acc <= x ? acc : x;
  }
}

template <typename T>
__global__ void ReduceKernel(const T* in, int64_t n, int64_t stride, int64_t count, T* out, int op) {
  using Tr = Traits<T>;
  using Acc = typename Tr::Acc;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc acc = Tr::Load(in[i]);
    for (int64_t r = 1; r < n; ++r) {
      const Acc x = Tr::Load(in[r * stride + i]);
      switch (op) {
        case 0:
        case 1: acc = acc + x; break;
        case 2: acc = Max<Acc, Tr::kFloat>(acc, x); break;
        default: acc = Min<Acc, Tr::kFloat>(acc, x); break;
      }
    }
    if (op == 1) acc = acc / static_cast<Acc>(n);  // integers truncate toward zero
    out[i] = Tr::Store(acc);
  }
}

template <typename T>
cudaError_t Reduce(const void* in, int64_t n, int64_t stride, int64_t count, void* out, int op, cudaStream_t stream) {
  ReduceKernel<T><<<Blocks(count), kThreads, 0, stream>>>(static_cast<const T*>(in), n, stride, count,
                                                          static_cast<T*>(out), op);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchBoxCopy(const BoxCopyArgs& args, cudaStream_t stream) {
  int64_t total = 1;
  for (int k = 0; k < args.rank; ++k) total *= args.extent[k];
  if (total <= 0) return cudaSuccess;
  const int blocks = Blocks(total);
  switch (args.elem_size) {
    case 1: BoxCopyKernel<uint8_t><<<blocks, kThreads, 0, stream>>>(args, total); break;
    case 2: BoxCopyKernel<uint16_t><<<blocks, kThreads, 0, stream>>>(args, total); break;
    case 4: BoxCopyKernel<uint32_t><<<blocks, kThreads, 0, stream>>>(args, total); break;
    case 8: BoxCopyKernel<unsigned long long><<<blocks, kThreads, 0, stream>>>(args, total); break;
    case 16: BoxCopyKernel<Bytes16><<<blocks, kThreads, 0, stream>>>(args, total); break;
    default: BoxCopyBytesKernel<<<blocks, kThreads, 0, stream>>>(args, total); break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchFill(const FillArgs& args, cudaStream_t stream) {
  if (args.count <= 0) return cudaSuccess;
  if (args.elem_size < 1 || args.elem_size > kMaxFillBytes) return cudaErrorInvalidValue;
  const int64_t bytes = args.count * args.elem_size;
  bool uniform = true;
  for (int64_t b = 1; b < args.elem_size; ++b) uniform = uniform && args.value[b] == args.value[0];
  if (uniform) return cudaMemsetAsync(args.dst, args.value[0], static_cast<size_t>(bytes), stream);
  const bool aligned = reinterpret_cast<uintptr_t>(args.dst) % static_cast<uintptr_t>(args.elem_size) == 0;
  if (aligned) {
    switch (args.elem_size) {
      case 2: return Fill<uint16_t>(args, stream);
      case 4: return Fill<uint32_t>(args, stream);
      case 8: return Fill<unsigned long long>(args, stream);
      case 16: return Fill<Bytes16>(args, stream);
      default: break;
    }
  }
  FillBytesKernel<<<Blocks(bytes), kThreads, 0, stream>>>(args, bytes);
  return cudaGetLastError();
}

cudaError_t LaunchReduceStrided(const void* in, int64_t n, int64_t stride, int64_t count, void* out, int dtype, int op,
                                cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  switch (dtype) {
    case 0: return Reduce<float>(in, n, stride, count, out, op, stream);
    case 1: return Reduce<double>(in, n, stride, count, out, op, stream);
    case 2: return Reduce<BF16>(in, n, stride, count, out, op, stream);
    case 3: return Reduce<int32_t>(in, n, stride, count, out, op, stream);
    case 4: return Reduce<int64_t>(in, n, stride, count, out, op, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace device_kernels_internal
}  // namespace meshflow
