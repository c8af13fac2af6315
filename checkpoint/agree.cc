// Internal to checkpoint/: AgreeStatus (agree.h).
#include "meshflow/checkpoint/agree.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace meshflow::checkpoint_internal {

Status AgreeStatus(Communicator& comm, const Status& local, bool* comm_failed) {
  const int n = comm.size();
  const int64_t mine[2] = {static_cast<int64_t>(local.code()), static_cast<int64_t>(local.message().size())};
  std::vector<int64_t> info(static_cast<size_t>(2 * n));
  Status s = comm.AllGather(mine, info.data(), 2, DType::kI64);
  if (!s.ok() && comm_failed != nullptr) *comm_failed = true;
  if (!s.ok()) return local.ok() ? s : local;
  bool any = false;
  for (int r = 0; r < n; ++r) any = any || info[2 * r] != 0;
  if (!any) return Status();
  // Messages travel as i64 elements (padded to 8 bytes).
  std::vector<int64_t> counts(static_cast<size_t>(n));
  int64_t total = 0;
  for (int r = 0; r < n; ++r) total += counts[r] = (info[2 * r + 1] + 7) / 8;
  std::vector<int64_t> send(static_cast<size_t>(counts[comm.rank()]), 0);
  if (!local.message().empty()) std::memcpy(send.data(), local.message().data(), local.message().size());
  std::vector<int64_t> recv(static_cast<size_t>(total));
  s = comm.AllGatherV(send.data(), counts[comm.rank()], recv.data(), counts, DType::kI64);
  if (!s.ok() && comm_failed != nullptr) *comm_failed = true;
  if (!s.ok()) return local.ok() ? s : local;
  int64_t pos = 0;
  for (int r = 0; r < n; ++r) {
    if (info[2 * r] != 0) {
      std::string msg(reinterpret_cast<const char*>(recv.data() + pos), static_cast<size_t>(info[2 * r + 1]));
      return Status(static_cast<StatusCode>(info[2 * r]),
                    "rank " + std::to_string(comm.world_ranks()[r]) + ": " + msg);
    }
    pos += counts[r];
  }
  return Status();
}

}  // namespace meshflow::checkpoint_internal
