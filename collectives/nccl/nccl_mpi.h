// NcclMpiWorld: an NCCL world with one process per GPU, launched by mpirun.
//
// Overview. Initializes MPI through the MPI backend (collectives/mpi: MpiWorld), picks this
// process's GPU as (node-local MPI rank) mod (visible devices), lets world rank 0 create the NCCL
// unique id, broadcasts it over MPI (MpiCommunicator::Broadcast, bounded by MpiOptions::timeout)
// and calls ncclCommInitRank on every rank. Group rank i = MPI world rank i.
//
//   int main() {
//     meshflow::MpiFinalizeGuard finalize;
//     auto world = meshflow::NcclMpiWorld();
//     if (!world.ok()) meshflow::MpiAbort(world.status());
//     std::vector<float> x(8, 1.0f);  // host memory; DeviceAllReduce(..., stream) takes device memory
//     meshflow::Status s = (*world)->AllReduce(x.data(), x.data(), 8, meshflow::DType::kF32,
//                                              meshflow::ReduceOp::kSum);
//     if (!s.ok()) meshflow::MpiAbort(s);
//   }
//   // mpirun -np 8 ./prog      (one process per GPU; more local ranks than GPUs is an error)
//
// Single-process multi-GPU runs (and 1-GPU runs without MPI) use NcclWorld instead
// (nccl_communicator.h); this header is the only NCCL piece that needs MPI.
#ifndef MESHFLOW_COLLECTIVES_NCCL_NCCL_MPI_H_
#define MESHFLOW_COLLECTIVES_NCCL_NCCL_MPI_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <memory>

#include "meshflow/base/status.h"
#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/collectives/nccl/nccl_communicator.h"

namespace meshflow {

// Errors: MPI failures (see MpiWorld); no CUDA device (Unavailable); more processes on this node
// than visible GPUs (FailedPrecondition naming both numbers); NCCL/CUDA failures (Internal).
StatusOr<std::shared_ptr<NcclCommunicator>> NcclMpiWorld(NcclOptions opts = {}, MpiOptions mpi_opts = {});

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_NCCL_NCCL_MPI_H_
