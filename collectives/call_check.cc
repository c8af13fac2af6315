#include "meshflow/collectives/call_check.h"

namespace meshflow {

namespace {

Status CheckPeer(const CallSite& site, const std::string& name, int peer) {
  const int n = site.size();
  if (peer < 0 || peer >= n) {
    return InvalidArgumentError(site.Describe() + ": " + name + " has peer " + std::to_string(peer) + " outside [0, " +
                                std::to_string(n) + ")");
  }
  return Status();
}

}  // namespace

const char* CollectiveKindName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kSplit:
      return "split";
  }
  return "?";
}


std::string CallSite::Describe() const {
  return std::string(prefix) + std::string(what) + " on group " + ElidedListString(world_ranks) + " (world ranks)";
}

std::string CallSite::RankName(int r) const {
  return "group rank " + std::to_string(r) + " (world " + std::to_string(world_ranks[static_cast<size_t>(r)]) + ")";
}

Status CheckCounts(const CallSite& site, const char* name, std::span<const int64_t> counts) {
  const int n = site.size();
  if (static_cast<int>(counts.size()) != n) {
    return InvalidArgumentError(site.Describe() + ": " + name + " has " + std::to_string(counts.size()) +
                                " entries, expected the group size " + std::to_string(n));
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      return InvalidArgumentError(site.Describe() + ": " + name + "[" + std::to_string(i) +
                                  "] = " + std::to_string(counts[i]) + " is negative");
    }
  }
  return Status();
}

Status CheckBuffer(const CallSite& site, const char* name, const void* p, int64_t count) {
  if (count < 0) {
    return InvalidArgumentError(site.Describe() + ": negative count " + std::to_string(count) + " for " + name);
  }
  if (count > 0 && p == nullptr) {
    return InvalidArgumentError(site.Describe() + ": " + name + " is null for " + std::to_string(count) +
                                " elements");
  }
  return Status();
}

Status CheckSendCount(const CallSite& site, int64_t send_count, std::span<const int64_t> recv_counts) {
  const int64_t expected = recv_counts[static_cast<size_t>(site.rank)];
  if (send_count != expected) {
    return InvalidArgumentError(site.Describe() + ": send_count " + std::to_string(send_count) + " != recv_counts[" +
                                std::to_string(site.rank) + "] = " + std::to_string(expected));
  }
  return Status();
}

Status CheckRoot(const CallSite& site, int root) {
  const int n = site.size();
  if (root < 0 || root >= n) {
    return InvalidArgumentError(site.Describe() + ": root " + std::to_string(root) + " outside [0, " +
                                std::to_string(n) + ")");
  }
  return Status();
}

Status CheckSpecBuffer(const CallSite& site, const std::string& name, const void* buffer, int64_t count) {
  if (count < 0) {
    return InvalidArgumentError(site.Describe() + ": " + name + " has negative count " + std::to_string(count));
  }
  if (count > 0 && buffer == nullptr) {
    return InvalidArgumentError(site.Describe() + ": " + name + " has a null buffer for count " +
                                std::to_string(count));
  }
  return Status();
}

Status CheckSendRecv(const CallSite& site, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                     const SpecCheck& check_spec, SelfTransfers* self) {
  for (size_t i = 0; i < sends.size(); ++i) {
    const std::string name = "send " + std::to_string(i);
    MF_RETURN_IF_ERROR(CheckPeer(site, name, sends[i].peer));
    MF_RETURN_IF_ERROR(check_spec(name, sends[i].buffer, sends[i].count));
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    const std::string name = "receive " + std::to_string(i);
    MF_RETURN_IF_ERROR(CheckPeer(site, name, recvs[i].peer));
    MF_RETURN_IF_ERROR(check_spec(name, recvs[i].buffer, recvs[i].count));
  }
  SelfTransfers mine;
  for (const SendSpec& s : sends) {
    if (s.peer == site.rank) mine.sends.push_back(&s);
  }
  for (const RecvSpec& r : recvs) {
    if (r.peer == site.rank) mine.recvs.push_back(&r);
  }
  if (mine.sends.size() != mine.recvs.size()) {
    return InvalidArgumentError(site.Describe() + ": " + std::to_string(mine.sends.size()) + " sends to self but " +
                                std::to_string(mine.recvs.size()) + " receives from self at " +
                                site.RankName(site.rank));
  }
  for (size_t k = 0; k < mine.sends.size(); ++k) {
    if (mine.sends[k]->count != mine.recvs[k]->count) {
      return InvalidArgumentError(site.Describe() + ": send to self #" + std::to_string(k) + " has count " +
                                  std::to_string(mine.sends[k]->count) + " but receive from self #" +
                                  std::to_string(k) + " has count " + std::to_string(mine.recvs[k]->count));
    }
  }
  if (self != nullptr) *self = std::move(mine);
  return Status();
}

std::string CallDescription(const CollectiveCall& c) {
  std::string out = "#" + std::to_string(c.seq) + " " + CollectiveKindName(c.kind);
  if (!c.file.empty()) out += " called at " + std::string(c.file) + ":" + std::to_string(c.line);
  return out;
}

namespace {

bool SameSite(const CollectiveCall& a, const CollectiveCall& b) {
  return a.line == b.line && (a.file.data() == b.file.data() || a.file == b.file);
}

}  // namespace

Status CheckCallsMatch(const CallSite& site, int n, const std::function<const CollectiveCall&(int)>& call_of) {
  const CollectiveCall& c0 = call_of(0);
  bool sites = true;  // every member has a call site
  for (int r = 0; r < n && sites; ++r) sites = !call_of(r).file.empty();
  // " [rank a: call; rank b: call]" when call sites are known.
  auto calls = [&](int a, int b) -> std::string {
    if (!sites) return "";
    return " [" + site.RankName(a) + ": " + CallDescription(call_of(a)) + "; " + site.RankName(b) + ": " +
           CallDescription(call_of(b)) + "]";
  };
  auto mismatch = [&](int r, const std::string& field, const std::string& v0, const std::string& vr) {
    return FailedPreconditionError(site.Describe() + ": mismatched " + field + ": " + v0 + " at " + site.RankName(0) +
                                   " vs " + vr + " at " + site.RankName(r) + calls(0, r));
  };
  for (int r = 1; r < n; ++r) {
    const CollectiveCall& c = call_of(r);
    if (c.seq != c0.seq) {
      return FailedPreconditionError(site.Describe() + ": mismatched collective sequence: " + site.RankName(0) +
                                     " is at its collective #" + std::to_string(c0.seq) + " (" +
                                     CollectiveKindName(c0.kind) + ") but " + site.RankName(r) + " at #" +
                                     std::to_string(c.seq) + " (" + CollectiveKindName(c.kind) +
                                     "); a rank skipped or repeated a collective" + calls(0, r));
    }
    if (c.kind != c0.kind) return mismatch(r, "collectives", CollectiveKindName(c0.kind), CollectiveKindName(c.kind));
  }
  const CollectiveKind k = c0.kind;
  const bool has_dtype = k != CollectiveKind::kBarrier && k != CollectiveKind::kSplit;
  const bool has_op = k == CollectiveKind::kAllReduce || k == CollectiveKind::kReduceScatter;
  for (int r = 1; r < n; ++r) {
    const CollectiveCall& c = call_of(r);
    if (has_dtype && c.dtype != c0.dtype) {
      return mismatch(r, "dtype", std::string(DTypeName(c0.dtype)), std::string(DTypeName(c.dtype)));
    }
    if (has_op && c.op != c0.op) {
      return mismatch(r, "reduce op", std::string(ReduceOpName(c0.op)), std::string(ReduceOpName(c.op)));
    }
    if (k == CollectiveKind::kBroadcast && c.root != c0.root) {
      return mismatch(r, "root", std::to_string(c0.root), std::to_string(c.root));
    }
    if ((k == CollectiveKind::kBroadcast || k == CollectiveKind::kAllReduce) && c.count != c0.count) {
      return mismatch(r, "count", std::to_string(c0.count), std::to_string(c.count));
    }
    if (k == CollectiveKind::kAllGather && c.counts != c0.counts) {
      return mismatch(r, "recv_counts", ElidedListString(c0.counts), ElidedListString(c.counts));
    }
    if (k == CollectiveKind::kReduceScatter && c.counts != c0.counts) {
      return mismatch(r, "counts", ElidedListString(c0.counts), ElidedListString(c.counts));
    }
  }
  if (k == CollectiveKind::kAllToAll) {
    for (int r = 0; r < n; ++r) {
      for (int s = 0; s < n; ++s) {
        const int64_t sent = call_of(r).counts[static_cast<size_t>(s)];
        const int64_t expected = call_of(s).counts2[static_cast<size_t>(r)];
        if (sent != expected) {
          return FailedPreconditionError(site.Describe() + ": mismatched counts: " + site.RankName(r) + " sends " +
                                         std::to_string(sent) + " elements to " + site.RankName(s) +
                                         ", which expects " + std::to_string(expected) + " from it" + calls(r, s));
        }
      }
    }
  }
  // Arguments agree: a different call site still means the members are at different calls (a
  // skipped call matched against the next one with the same arguments).
  if (sites) {
    for (int r = 1; r < n; ++r) {
      const CollectiveCall& c = call_of(r);
      if (SameSite(c, c0)) continue;
      return FailedPreconditionError(site.Describe() + ": mismatched call sites: " + site.RankName(0) +
                                     " is at its collective " + CallDescription(c0) + ", but " + site.RankName(r) +
                                     " at " + CallDescription(c) +
                                     "; a rank skipped, repeated or reordered a collective");
    }
  }
  return Status();
}

}  // namespace meshflow
