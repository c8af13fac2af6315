// Checks shared by the Communicator backends (collectives/threads/threads_world.h, collectives/mpi/): the
// local argument checks of one call (InvalidArgument) and the cross-rank check that every member of a
// group made the same collective call with agreeing arguments (FailedPrecondition). Keeping them here
// gives every backend the same verdicts and the same messages.
//
//   const CallSite site{"mpi ", "all_gather", world_ranks, rank};
//   MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
//   // ... every rank gathers every member's CollectiveCall, then:
//   MF_RETURN_IF_ERROR(CheckCallsMatch(site, n, [&](int r) -> const CollectiveCall& { return calls[r]; }));
//
// Messages name the call as "<prefix><what> on group [w0,w1,...] (world ranks)" and ranks as
// "group rank r (world w)".
#ifndef MESHFLOW_COLLECTIVES_CALL_CHECK_H_
#define MESHFLOW_COLLECTIVES_CALL_CHECK_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/base/strings.h"  // ListString
#include "meshflow/collectives/communicator.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"

namespace meshflow {

// The collectives a group runs together (values are part of the MPI backend's header wire form).
enum class CollectiveKind : int64_t { kAllGather, kReduceScatter, kAllReduce, kAllToAll, kBroadcast, kBarrier, kSplit };

// "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "barrier", "split"; "?"
// for a value outside the enum.
const char* CollectiveKindName(CollectiveKind k);


// One call of a group member, as far as the members must agree on it.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int64_t root = 0;
  int64_t count = 0;
  std::vector<int64_t> counts;   // all_gather recv_counts, reduce_scatter counts, all_to_all send_counts
  std::vector<int64_t> counts2;  // all_to_all recv_counts
  // Per-communicator sequence number of the call (0, 1, 2, ... on each communicator).
  int64_t seq = 0;
  // Where the member called it (the Communicator method's `where`): a file name (or its tail) and a
  // line. An empty file means "not checked" (check_call_sites off); sites are compared only when
  // every member has one. The file must outlive the check (source_location strings are static).
  std::string_view file;
  int64_t line = 0;
};

// "#S all_reduce called at FILE:LINE" ("#S all_reduce" without a file).
std::string CallDescription(const CollectiveCall& c);

// Where a call happens, for messages. Cheap to build: strings are made on error only.
struct CallSite {
  std::string_view prefix;          // the backend's prefix, e.g. "mpi " ("" for none)
  std::string_view what;            // the collective, e.g. "all_reduce"
  std::span<const int> world_ranks;  // world rank of each group rank
  int rank = 0;                     // the calling group rank

  int size() const { return static_cast<int>(world_ranks.size()); }
  // "<prefix><what> on group [w0,w1,...] (world ranks)".
  std::string Describe() const;
  // "group rank r (world w)".
  std::string RankName(int r) const;
};

// ---------------------------------------------------------------------------------------------
// Argument checks of one call (InvalidArgument naming the value; local, before any communication).

// counts has one entry per group rank, none negative.
Status CheckCounts(const CallSite& site, const char* name, std::span<const int64_t> counts);
// count >= 0, and p is not null when count > 0 ("negative count C for NAME", "NAME is null for C
// elements").
Status CheckBuffer(const CallSite& site, const char* name, const void* p, int64_t count);
// AllGatherV: send_count == recv_counts[site.rank] (recv_counts already passed CheckCounts).
Status CheckSendCount(const CallSite& site, int64_t send_count, std::span<const int64_t> recv_counts);
// Broadcast: 0 <= root < group size.
Status CheckRoot(const CallSite& site, int root);

// Checks one send or receive of a SendRecv: `name` is "send I" or "receive I".
using SpecCheck = std::function<Status(const std::string& name, const void* buffer, int64_t count)>;
// The threads backend's SpecCheck wording: "NAME has negative count C", "NAME has a null buffer for
// count C".
Status CheckSpecBuffer(const CallSite& site, const std::string& name, const void* buffer, int64_t count);

// The sends and receives of a SendRecv that this rank addresses to itself, in call order.
struct SelfTransfers {
  std::vector<const SendSpec*> sends;
  std::vector<const RecvSpec*> recvs;
};
// SendRecv: every send, then every receive, has its peer in [0, group size) and passes
// `check_spec`; then sends to self pair up with receives from self (same number, same counts in
// order). On success fills *self (if not null).
Status CheckSendRecv(const CallSite& site, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                     const SpecCheck& check_spec, SelfTransfers* self);

// ---------------------------------------------------------------------------------------------
// Cross-rank check: every member (group ranks 0..n-1, call_of(r)) made the same call. Every rank runs
// it on the same calls, so every rank reaches the same verdict: OK, or FailedPrecondition naming the
// field, both ranks and both values ("mismatched dtype: f32 at group rank 0 (world 0) vs i32 at group
// rank 2 (world 2)"). Checks, against rank 0, per rank: sequence number, kind; then per rank: dtype
// (not for barrier / split), reduce op (all_reduce, reduce_scatter), root (broadcast), count
// (broadcast, all_reduce), counts (all_gather "recv_counts", reduce_scatter "counts"); then for
// all_to_all that every send count matches its receiver's recv count. When call sites are known,
// every message ends with both ranks' calls: " [group rank 0 (world 0): #S all_reduce called at F:L;
// group rank 2 (world 2): #S ...]". Last, when every member has a call site, the sites
// (FailedPrecondition "mismatched call sites: group rank 0 (world 0) is at its collective #S
// all_reduce called at F:L, but group rank 1 (world 1) at #S all_reduce called at F:M; a rank
// skipped, repeated or reordered a collective").
Status CheckCallsMatch(const CallSite& site, int n, const std::function<const CollectiveCall&(int)>& call_of);

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_CALL_CHECK_H_
