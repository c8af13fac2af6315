#include "meshflow/runtime/strategy_check.h"

#include <mutex>

#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/ops/test_util.h"

namespace meshflow::testing {

std::vector<std::string> CheckStrategiesOnWorld(const OpSpec& op, const ShardingRule& rule,
                                                std::span<const Strategy> strategies,
                                                const std::vector<Tensor>& globals, const Tensor& want,
                                                const DeviceMesh& mesh) {
  std::vector<std::string> failures;
  std::mutex mu;
  const std::string dtype = globals.empty() ? "" : " " + std::string(DTypeName(globals[0].dtype()));
  Status st = WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    for (const Strategy& s : strategies) {
      const std::string what = op.ToString() + " on " + mesh.ToString() + dtype + " strategy " + s.ToString();
      std::vector<DTensor> in;
      for (size_t i = 0; i < globals.size(); ++i) {
        MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(globals[i].shape(), mesh, s.operands[i]));
        MF_ASSIGN_OR_RETURN(DTensor x, Distribute(globals[i], l, comm.rank()));
        in.push_back(std::move(x));
      }
      std::vector<const DTensor*> ip;
      for (const DTensor& x : in) ip.push_back(&x);
      StatusOr<DTensor> y = RunOp(op, ip, ctx, &s);
      if (!y.ok()) return y.status().WithContext(what);
      MF_ASSIGN_OR_RETURN(Layout want_layout, Layout::Create(rule.result_shape, mesh, s.result));
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(*y, ctx));
      std::string diff = Compare(full, want);
      if (!(y->layout() == want_layout)) diff += " layout " + y->layout().ToString();
      if (!diff.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back("rank " + std::to_string(comm.rank()) + ": " + what + ": " + diff);
      }
    }
    return Status::Ok();
  });
  if (!st.ok()) failures.push_back(st.ToString());
  return failures;
}

}  // namespace meshflow::testing
