// meshflow: the front door. One include and one dependency (`@meshflow//:meshflow`) for the whole
// public API on the CPU backends: meshes, layouts and DTensors, the planner, the in-process
// world, Redistribute / FullTensor, the eager sharded ops, the graph compiler, autograd, modules
// and parallel styles (meshflow::nn), optimizers and coordinated training checkpoints (train/),
// the GPT and its parallel plans (meshflow::lm), the data loader and checkpoints. Backends that
// need system libraries are separate targets with their own headers:
// MPI (`//collectives/mpi:mpi_communicator`, "meshflow/collectives/mpi/mpi_communicator.h") and
// NCCL (`//collectives/nccl:nccl_communicator`, where a CUDA toolkit was found); so are the
// launcher (`//launch:world`, which starts MPI under mpirun), the supervisor (`//launch:supervisor`)
// and the training loop (`//lm:trainer`).
//
// Every public name is in namespace meshflow; every fallible call returns Status or StatusOr
// (base/status.h); no exception crosses the API. A 2x2 world that shards a tensor and gathers it
// back (the same lines are compiled in tests/doc/meshflow_doc_test.cc):
//
//   #include "meshflow/meshflow.h"
//
//   meshflow::Status Demo() {
//     MF_ASSIGN_OR_RETURN(meshflow::DeviceMesh mesh, meshflow::DeviceMesh::Create({2, 2}, {"dp", "tp"}));
//     MF_ASSIGN_OR_RETURN(meshflow::Layout layout,
//                         meshflow::Layout::Create({5, 6}, mesh, {meshflow::Shard{0}, meshflow::Shard{1}}));
//     const meshflow::Tensor global = meshflow::Tensor::Iota(meshflow::DType::kF32, {5, 6});
//     MF_ASSIGN_OR_RETURN(std::unique_ptr<meshflow::ThreadWorld> world, meshflow::ThreadWorld::Create(4));
//     return world->Run([&](meshflow::Communicator& comm) -> meshflow::Status {
//       MF_ASSIGN_OR_RETURN(meshflow::RankContext ctx, meshflow::RankContext::Create(comm, mesh));
//       MF_ASSIGN_OR_RETURN(meshflow::DTensor x, meshflow::Distribute(global, layout, comm.world_rank()));
//       MF_ASSIGN_OR_RETURN(meshflow::Tensor full, meshflow::FullTensor(x, ctx));  // == global
//       return meshflow::Status::Ok();
//     });
//   }
#ifndef MESHFLOW_MESHFLOW_H_
#define MESHFLOW_MESHFLOW_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

// Status, StatusOr, MF_RETURN_IF_ERROR, MF_ASSIGN_OR_RETURN.
#include "meshflow/base/status.h"
// DeviceMesh: an N-D grid of ranks with named dims.
#include "meshflow/mesh/device_mesh.h"
// DType, placements (Shard / Replicate / Partial), Layout, Box, Tensor, DTensor, Distribute.
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/runtime/allocator.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/dtensor/tensor.h"
// Plans, the Topology, the planning entry point (PlanFor; its header brings the cost model) and
// plan printing.
#include "meshflow/planner/plan.h"
#include "meshflow/planner/plan_format.h"
#include "meshflow/planner/planner.h"
#include "meshflow/planner/topology.h"
// Communicator, RankContext, ExecutePlan, Redistribute / FullTensor, the in-process world.
#include "meshflow/collectives/communicator.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
// Eager sharded ops; the graph compiler (graph IR, propagation, compiled programs).
#include "meshflow/runtime/eager.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/compiler/graph_autodiff.h"
#include "meshflow/compiler/program.h"
#include "meshflow/compiler/propagation.h"
// Reverse-mode autodiff over sharded DTensors.
#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
// The sharded, exactly resumable data loader and its datasets.
#include "meshflow/data/dataset.h"
#include "meshflow/data/loader.h"
#include "meshflow/data/record_shards.h"
#include "meshflow/data/token_file.h"
// Distributed checkpoints with resharding on load.
#include "meshflow/checkpoint/checkpoint.h"
// Modules with named parameters, parallel styles (Parallelize) and DistributeFrom, in
// namespace meshflow::nn (also brings in the optimizers of optim/optimizer.h).
#include "meshflow/nn/distribute.h"
#include "meshflow/nn/module.h"
#include "meshflow/nn/parallel.h"
#include "meshflow/train/checkpointer.h"
#include "meshflow/optim/clip.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/schedule.h"
#include "meshflow/lm/gpt.h"
#include "meshflow/lm/plan.h"

#endif  // MESHFLOW_MESHFLOW_H_
