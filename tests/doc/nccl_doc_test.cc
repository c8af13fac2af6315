// Every example in collectives/nccl/nccl_communicator.h and collectives/nccl/nccl_mpi.h is compiled
// here; keep them identical. (The examples of the CUDA kernels, runtime/cuda/device_kernels.h, are
// in cuda_doc_test.cc.)
//
// They all need GPUs (and nccl_mpi.h's mpirun), so each is compiled and linked in a function that
// no test calls; the CUDA tests of //collectives/nccl run the same calls on devices.
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/collectives/nccl/nccl_communicator.h"
#include "meshflow/collectives/nccl/nccl_mpi.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"

// collectives/nccl/nccl_mpi.h (main() renamed; main alone may omit its return statement).
int NcclMpiHeaderExampleMain() {
  meshflow::MpiFinalizeGuard finalize;
  auto world = meshflow::NcclMpiWorld();
  if (!world.ok()) meshflow::MpiAbort(world.status());
  std::vector<float> x(8, 1.0f);  // host memory; DeviceAllReduce(..., stream) takes device memory
  meshflow::Status s = (*world)->AllReduce(x.data(), x.data(), 8, meshflow::DType::kF32,
                                           meshflow::ReduceOp::kSum);
  if (!s.ok()) meshflow::MpiAbort(s);
  return 0;
}

namespace meshflow {
namespace doc_examples {

// collectives/nccl/nccl_communicator.h, the NcclWorld example (d_x, n: each rank's device buffer
// of n floats, allocated in its thread; stream: a stream of the rank's device).
Status NcclWorldExample() {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<NcclWorld> world, NcclWorld::Create({0, 1}));
  MF_RETURN_IF_ERROR(world->Run([&](NcclCommunicator& comm) -> Status {
    const int64_t n = 1024;
    float* d_x = nullptr;
    cudaStream_t stream = nullptr;
    MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&d_x, n * sizeof(float)), "cudaMalloc", "doc test"));
    MF_RETURN_IF_ERROR(CheckCuda(cudaStreamCreate(&stream), "cudaStreamCreate", "doc test"));
    const std::unique_ptr<float, cudaError_t (*)(void*)> free_x(d_x, &cudaFree);
    const std::unique_ptr<CUstream_st, cudaError_t (*)(cudaStream_t)> destroy_stream(stream, &cudaStreamDestroy);

    std::vector<float> x(8, 1.0f);                                      // host memory
    MF_RETURN_IF_ERROR(comm.AllReduce(x.data(), x.data(), 8, DType::kF32, ReduceOp::kSum));
    MF_RETURN_IF_ERROR(comm.DeviceAllReduce(d_x, d_x, n, DType::kF32, ReduceOp::kSum, stream));
    return comm.Synchronize(stream, "my step");                        // polled, with timeout
  }));
  return Status::Ok();
}

// collectives/nccl/nccl_communicator.h, the NcclGroup example (tp, dp: two communicators of this
// rank; a, b, c, d: device buffers; n elements per rank; stream).
Status NcclGroupExample(NcclCommunicator& tp, NcclCommunicator& dp, const void* a, void* b, const void* c,
                        void* d, int64_t n, cudaStream_t stream) {
  NcclGroup group;
  MF_RETURN_IF_ERROR(tp.DeviceAllGather(a, b, n, DType::kF32, stream));
  MF_RETURN_IF_ERROR(dp.DeviceAllGather(c, d, n, DType::kF32, stream));
  MF_RETURN_IF_ERROR(group.End());   // both are launched here
  return Status::Ok();
}

}  // namespace doc_examples

namespace {

TEST(NcclDocTest, ExamplesCompileAndLink) {
  // They need GPUs (nccl_mpi.h also mpirun): only referenced, never called.
  const std::vector<const void*> examples = {
      reinterpret_cast<const void*>(&NcclMpiHeaderExampleMain),
      reinterpret_cast<const void*>(&doc_examples::NcclWorldExample),
      reinterpret_cast<const void*>(&doc_examples::NcclGroupExample),
  };
  for (const void* f : examples) EXPECT_NE(f, nullptr);
}

}  // namespace
}  // namespace meshflow
