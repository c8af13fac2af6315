// Checkpoint save and resharding load across MPI processes.
//
// Saved on a 2 x (n/2) mesh of the world under several layouts (sharded, nested, replicated,
// Partial(sum), uneven, empty), loaded on a 1-D n mesh and a (n/2) x 2 mesh with other
// placements; every rank compares its shard with the reference slice of the global tensor.
// Prints "N passed, M failed" on rank 0; exits non-zero on any failure.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/dtensor/dtensor.h"

namespace meshflow {
namespace {

struct Saved {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  Placements placements;
};

Tensor GlobalOf(const Saved& s) {
  Tensor t = Tensor::Zeros(s.dtype, s.shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i * 5) % 61) - 20);
  return t;
}

int Main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/meshflow_mpi_ckpt";
  auto world = MpiWorld();
  if (!world.ok()) MpiAbort(world.status());
  Communicator& comm = **world;
  const int n = comm.size();
  if (n % 2 != 0) MpiAbort(InvalidArgumentError("needs an even number of ranks, got " + std::to_string(n)));
  const DeviceMesh save_mesh = *DeviceMesh::Create({2, n / 2});
  const std::vector<Saved> saved = {
      {"w_rows", {13, 6}, DType::kF32, {Shard{0}, Shard{1}}},
      {"w_nested", {11, 3}, DType::kF64, {Shard{0}, Shard{0}}},
      {"bias", {7}, DType::kBF16, {Replicate{}, Shard{0}}},
      {"grad", {5, 4}, DType::kI64, {Partial{ReduceOp::kSum}, Shard{1}}},
      {"empty", {0, 5}, DType::kI32, {Shard{0}, Replicate{}}},
  };
  auto save_comms = RankContext::Create(*world, save_mesh);
  if (!save_comms.ok()) MpiAbort(save_comms.status());
  std::vector<DTensor> tensors;
  for (const Saved& s : saved) {
    Layout layout = *Layout::Create(s.shape, save_mesh, s.placements);
    tensors.push_back(*Distribute(GlobalOf(s), layout, comm.world_rank()));
  }
  std::vector<std::pair<std::string, const DTensor*>> named;
  for (size_t i = 0; i < saved.size(); ++i) named.emplace_back(saved[i].name, &tensors[i]);
  Status st = SaveCheckpoint(dir, named, *save_comms);
  if (!st.ok()) MpiAbort(st.WithContext("save"));

  int passed = 0, failed = 0;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<Placements>>> targets = {
      {{n}, {{Shard{0}}, {Replicate{}}, {Shard{1}}}},
      {{n / 2, 2}, {{Shard{0}, Replicate{}}, {Replicate{}, Shard{0}}, {Partial{ReduceOp::kSum}, Shard{0}}}},
  };
  for (const auto& [mesh_shape, placements_list] : targets) {
    const DeviceMesh mesh = *DeviceMesh::Create(mesh_shape);
    auto ctx = RankContext::Create(*world, mesh);
    if (!ctx.ok()) MpiAbort(ctx.status());
    for (const Saved& s : saved) {
      for (const Placements& p : placements_list) {
        Placements fixed = p;
        for (Placement& q : fixed) {
          if (IsShard(q) && std::get<Shard>(q).dim >= static_cast<int>(s.shape.size())) q = Replicate{};
        }
        Layout target = *Layout::Create(s.shape, mesh, fixed);
        StatusOr<DTensor> loaded = LoadTensor(dir, s.name, target, *ctx);
        if (!loaded.ok()) MpiAbort(loaded.status().WithContext("load " + s.name));
        const Tensor want = *ReferenceLocal(GlobalOf(s), target, comm.world_rank());
        int64_t bad = loaded->local() == want ? 0 : 1;
        if (!comm.AllReduce(&bad, &bad, 1, DType::kI64, ReduceOp::kSum).ok()) MpiAbort(InternalError("allreduce"));
        if (bad == 0) {
          ++passed;
        } else {
          ++failed;
          if (comm.rank() == 0) {
            std::printf("FAIL %s loaded as %s: %lld ranks differ\n", s.name.c_str(), target.ToString().c_str(),
                        static_cast<long long>(bad));
          }
        }
      }
    }
  }
  if (comm.rank() == 0) {
    std::printf("mpi checkpoint, %d ranks: %d passed, %d failed\n", n, passed, failed);
    std::fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) {
  meshflow::MpiFinalizeGuard finalize;
  return meshflow::Main(argc, argv);
}
