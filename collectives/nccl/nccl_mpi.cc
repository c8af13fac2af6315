#include "meshflow/collectives/nccl/nccl_mpi.h"

#include <mpi.h>

#include <cstring>
#include <string>

#include "meshflow/cuda/cuda_status.h"

namespace meshflow {

StatusOr<std::shared_ptr<NcclCommunicator>> NcclMpiWorld(NcclOptions opts, MpiOptions mpi_opts) {
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> mpi, MpiWorld(mpi_opts));
  // Node-local rank: rank in the shared-memory split of MPI_COMM_WORLD.
  MPI_Comm local = MPI_COMM_NULL;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi->rank(), MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS) return InternalError("NcclMpiWorld: MPI_Comm_split_type failed (code " + std::to_string(rc) + ")");
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  MF_ASSIGN_OR_RETURN(int devices, CudaDeviceCount());
  if (devices == 0) return UnavailableError("NcclMpiWorld: world rank " + std::to_string(mpi->rank()) + ": " + NoCudaDeviceReason());
  if (local_size > devices) {
    return FailedPreconditionError("NcclMpiWorld: " + std::to_string(local_size) + " processes on the node of world rank " +
                                   std::to_string(mpi->rank()) + " but only " + std::to_string(devices) +
                                   " visible CUDA devices; NCCL needs one GPU per rank");
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (mpi->rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return InternalError(std::string("NcclMpiWorld: ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  }
  static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);
  int64_t words[sizeof(ncclUniqueId) / sizeof(int64_t)];
  std::memcpy(words, &id, sizeof(id));
  MF_RETURN_IF_ERROR(mpi->Broadcast(words, static_cast<int64_t>(sizeof(id) / sizeof(int64_t)), DType::kI64, 0));
  std::memcpy(&id, words, sizeof(id));
  return NcclCommunicator::CreateFromUniqueId(id, mpi->size(), mpi->rank(), local_rank % devices, opts);
}

}  // namespace meshflow
