#include "meshflow/ops/cuda/cublas_matmul.h"

#include <cublas_v2.h>

#include <climits>
#include <map>
#include <string>

#include "meshflow/cuda/cuda_status.h"
#include "meshflow/ops/shape_util.h"

namespace meshflow {

namespace {

Status CheckCublas(cublasStatus_t s, const char* call, const std::string& where) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status();
  return InternalError(std::string(call) + " failed: " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) +
                       ") in " + where);
}

// One cuBLAS handle per (thread, device), destroyed at thread exit.
struct HandleCache {
  ~HandleCache() {
    for (auto& [device, h] : handles) {
      (void)cudaSetDevice(device);
      (void)cublasDestroy(h);
    }
  }
  std::map<int, cublasHandle_t> handles;
};

StatusOr<cublasHandle_t> Handle(const std::string& where) {
  thread_local HandleCache cache;
  int device = 0;
  MF_RETURN_IF_ERROR(CheckCuda(cudaGetDevice(&device), "cudaGetDevice", where));
  auto it = cache.handles.find(device);
  if (it != cache.handles.end()) return it->second;
  cublasHandle_t h = nullptr;
  MF_RETURN_IF_ERROR(CheckCublas(cublasCreate(&h), "cublasCreate", where));
  cache.handles[device] = h;
  return h;
}

// Row-major strides of `batch_shape` (left-padded to rank r) with 0 for broadcast dims.
std::vector<int64_t> BroadcastStrides(std::span<const int64_t> batch_shape, size_t r) {
  std::vector<int64_t> padded(r - batch_shape.size(), 1);
  padded.insert(padded.end(), batch_shape.begin(), batch_shape.end());
  std::vector<int64_t> strides(r, 0);
  int64_t s = 1;
  for (size_t i = r; i-- > 0;) {
    strides[i] = padded[i] == 1 ? 0 : s;
    s *= padded[i];
  }
  return strides;
}

int64_t Product(std::span<const int64_t> v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

}  // namespace

StatusOr<std::vector<int64_t>> MatmulOutputShape(std::span<const int64_t> a_shape, std::span<const int64_t> b_shape) {
  if (a_shape.size() < 2 || b_shape.size() < 2) {
    return InvalidArgumentError("cuda matmul: operands need rank >= 2, got shapes " + ShapeString(a_shape) + " and " +
                                ShapeString(b_shape));
  }
  if (a_shape[a_shape.size() - 1] != b_shape[b_shape.size() - 2]) {
    return InvalidArgumentError("cuda matmul: contracting sizes differ: a " + ShapeString(a_shape) + ", b " +
                                ShapeString(b_shape));
  }
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out,
                      BroadcastShapes("cuda matmul batch dims", a_shape.subspan(0, a_shape.size() - 2),
                                      b_shape.subspan(0, b_shape.size() - 2)));
  out.push_back(a_shape[a_shape.size() - 2]);
  out.push_back(b_shape[b_shape.size() - 1]);
  return out;
}

Status CudaMatmulDevice(const void* a, std::span<const int64_t> a_shape, const void* b,
                        std::span<const int64_t> b_shape, void* c, DType dtype, cudaStream_t stream,
                        const CudaMatmulOptions& options) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, MatmulOutputShape(a_shape, b_shape));
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    return InvalidArgumentError("cuda matmul: dtype " + std::string(DTypeName(dtype)) +
                                " is not supported on the device (f32, f64)");
  }
  const std::string where = "cuda matmul " + ShapeString(a_shape) + " x " + ShapeString(b_shape);
  const int64_t m = out[out.size() - 2], n = out[out.size() - 1], k = a_shape[a_shape.size() - 1];
  const std::span<const int64_t> batch(out.data(), out.size() - 2);
  const int64_t nbatch = Product(batch);
  const int64_t es = DTypeSize(dtype);
  if (m == 0 || n == 0 || nbatch == 0) return Status();
  if (c == nullptr) return InvalidArgumentError(where + ": c is null");
  if (k == 0) {
    return CheckCuda(cudaMemsetAsync(c, 0, static_cast<size_t>(nbatch * m * n * es), stream), "cudaMemsetAsync", where);
  }
  if (a == nullptr || b == nullptr) return InvalidArgumentError(where + ": " + (a == nullptr ? "a" : "b") + " is null");
  for (int64_t d : {m, n, k, nbatch}) {
    if (d > INT_MAX) {
      return InvalidArgumentError(where + ": dimension " + std::to_string(d) + " exceeds INT_MAX (cuBLAS int sizes)");
    }
  }
  MF_ASSIGN_OR_RETURN(cublasHandle_t h, Handle(where));
  MF_RETURN_IF_ERROR(CheckCublas(cublasSetStream(h, stream), "cublasSetStream", where));
  const std::span<const int64_t> ab = a_shape.subspan(0, a_shape.size() - 2);
  const std::span<const int64_t> bb = b_shape.subspan(0, b_shape.size() - 2);
  const int64_t na = Product(ab), nb = Product(bb);
  const float alpha32 = 1, beta32 = 0;
  const double alpha64 = 1, beta64 = 0;
  const void* alpha = dtype == DType::kF32 ? static_cast<const void*>(&alpha32) : &alpha64;
  const void* beta = dtype == DType::kF32 ? static_cast<const void*>(&beta32) : &beta64;
  const cudaDataType_t type = dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_64F;
  const cublasComputeType_t compute = dtype == DType::kF64 ? CUBLAS_COMPUTE_64F
                                      : options.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                           : CUBLAS_COMPUTE_32F;
  // Column-major C^T (n x m) = B^T (n x k) * A^T (k x m).
  auto gemm = [&](const std::byte* pa, long long stride_a, const std::byte* pb, long long stride_b, std::byte* pc,
                  int count) {
    return CheckCublas(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                                  static_cast<int>(k), alpha, pb, type, static_cast<int>(n), stride_b,
                                                  pa, type, static_cast<int>(k), stride_a, beta, pc, type,
                                                  static_cast<int>(n), static_cast<long long>(m * n), count, compute,
                                                  CUBLAS_GEMM_DEFAULT),
                       "cublasGemmStridedBatchedEx", where);
  };
  const auto* pa = static_cast<const std::byte*>(a);
  const auto* pb = static_cast<const std::byte*>(b);
  auto* pc = static_cast<std::byte*>(c);
  const bool a_simple = na == nbatch || na == 1;
  const bool b_simple = nb == nbatch || nb == 1;
  if (a_simple && b_simple) {
    return gemm(pa, na == 1 ? 0 : m * k, pb, nb == 1 ? 0 : k * n, pc, static_cast<int>(nbatch));
  }
  // Mixed broadcast: one call per output batch entry.
  const std::vector<int64_t> sa = BroadcastStrides(ab, batch.size()), sb = BroadcastStrides(bb, batch.size());
  std::vector<int64_t> idx(batch.size(), 0);
  for (int64_t i = 0; i < nbatch; ++i) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < batch.size(); ++d) oa += idx[d] * sa[d], ob += idx[d] * sb[d];
    MF_RETURN_IF_ERROR(gemm(pa + oa * m * k * es, 0, pb + ob * k * n * es, 0, pc + i * m * n * es, 1));
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return Status();
}

StatusOr<Tensor> CudaMatmulKernel(const Tensor& a, const Tensor& b, const CudaMatmulOptions& options) {
  if (a.dtype() != b.dtype()) {
    return InvalidArgumentError("cuda matmul: dtypes differ: " + std::string(DTypeName(a.dtype())) + " and " +
                                std::string(DTypeName(b.dtype())));
  }
  if (a.dtype() == DType::kBF16) {
    // Like the CPU kernel: compute in f32, round once.
    auto to_f32 = [](const Tensor& t) {
      Tensor f = Tensor::Zeros(DType::kF32, t.shape());
      for (int64_t i = 0; i < t.NumElements(); ++i) f.data<float>()[i] = static_cast<float>(t.data<BFloat16>()[i]);
      return f;
    };
    MF_ASSIGN_OR_RETURN(Tensor cf, CudaMatmulKernel(to_f32(a), to_f32(b), options));
    Tensor out = Tensor::Zeros(DType::kBF16, cf.shape());
    for (int64_t i = 0; i < cf.NumElements(); ++i) out.data<BFloat16>()[i] = BFloat16(cf.data<float>()[i]);
    return out;
  }
  if (a.dtype() != DType::kF32 && a.dtype() != DType::kF64) {
    return InvalidArgumentError("cuda matmul: dtype " + std::string(DTypeName(a.dtype())) +
                                " is not supported (f32, f64, bf16)");
  }
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out_shape, MatmulOutputShape(a.shape(), b.shape()));
  MF_ASSIGN_OR_RETURN(int devices, CudaDeviceCount());
  if (devices == 0) return UnavailableError("cuda matmul: " + NoCudaDeviceReason());
  Tensor c = Tensor::Zeros(a.dtype(), out_shape);
  const std::string where = "cuda matmul " + ShapeString(a.shape()) + " x " + ShapeString(b.shape());
  const cudaStream_t stream = cudaStreamPerThread;
  void* d[3] = {nullptr, nullptr, nullptr};
  const int64_t bytes[3] = {a.NumBytes(), b.NumBytes(), c.NumBytes()};
  Status s;
  for (int i = 0; i < 3 && s.ok(); ++i) {
    if (bytes[i] > 0) s = CheckCuda(cudaMallocAsync(&d[i], static_cast<size_t>(bytes[i]), stream), "cudaMallocAsync", where);
  }
  if (s.ok() && bytes[0] > 0) s = CheckCuda(cudaMemcpyAsync(d[0], a.raw(), bytes[0], cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync", where);
  if (s.ok() && bytes[1] > 0) s = CheckCuda(cudaMemcpyAsync(d[1], b.raw(), bytes[1], cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync", where);
  if (s.ok()) s = CudaMatmulDevice(d[0], a.shape(), d[1], b.shape(), d[2], a.dtype(), stream, options);
  if (s.ok() && bytes[2] > 0) s = CheckCuda(cudaMemcpyAsync(c.raw(), d[2], bytes[2], cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync", where);
  for (void* p : d) {
    if (p != nullptr) (void)cudaFreeAsync(p, stream);
  }
  const Status sync = CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", where);
  MF_RETURN_IF_ERROR(s);
  MF_RETURN_IF_ERROR(sync);
  return c;
}

}  // namespace meshflow
