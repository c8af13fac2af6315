// Collective tests of the MPI backend, run under mpirun (see mpirun_test.sh):
//
//   mpirun -np 4 mpi_collectives_test
//
// Every collective on several groups (the world, an interleaved split with reversed keys, an uneven
// split with a group of one, a world communicator without header validation), every dtype and reduce op, even / uneven
// / zero counts, in place and out of place. Expected values are computed locally: every rank regenerates the inputs of
// every rank, and reductions are checked bit-exactly against collectives/reduce.h folded in rank order (plus one
// hand-written case that only a rank-order fold passes) on communicators with MpiOptions::deterministic; the reductions
// of a default (native) communicator are checked within a float tolerance (integers, max and min exactly). Byte counters are checked against the formulas of the threads
// backend (collectives/threads/threads_world.h). Error paths: local argument errors, mismatches (every rank gets the same
// FailedPrecondition, then Aborted), timeouts that name the absent rank, SendRecv size mismatches.
//
// Every rank runs the same sequence of named checks; at the end the failures are combined over the
// world and rank 0 prints "N passed, M failed". Exit code 0 iff nothing failed.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/collectives/reduce.h"

namespace meshflow {
namespace {

constexpr DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

using Bytes = std::vector<std::byte>;

int g_world_rank = 0;
std::vector<std::string> g_names;
std::vector<int64_t> g_failed;

// Records one named check (every rank records the same names in the same order).
void Record(const std::string& name, const std::string& failure) {
  g_names.push_back(name);
  g_failed.push_back(failure.empty() ? 0 : 1);
  if (!failure.empty()) std::fprintf(stderr, "rank %d: FAILED %s: %s\n", g_world_rank, name.c_str(), failure.c_str());
}

void Set(DType t, Bytes& b, int64_t i, double v) {
  VisitDType(t, [&](auto x) {
    using T = decltype(x);
    T y;
    if constexpr (std::is_same_v<T, BFloat16>) {
      y = BFloat16(static_cast<float>(v));
    } else {
      y = static_cast<T>(v);
    }
    std::memcpy(b.data() + i * static_cast<int64_t>(sizeof(T)), &y, sizeof(T));
  });
}

// Input element i of (world) rank r for test salt s. Floats get mixed magnitudes so that any
// association order other than rank order changes the bits; integers stay small and signed.
double Value(DType t, int r, int64_t i, int s) {
  const double small = static_cast<double>((r * 131 + i * 7 + s * 17) % 23) - 11;
  if (t == DType::kF32 || t == DType::kF64) return small * (r % 2 == 0 ? 1.0e7 : 1.0) + 0.1 * (r + 1);
  if (t == DType::kBF16) return small + (r % 3 == 0 ? 256.0 : 0.0);
  return small;
}

Bytes Make(DType t, int64_t n, const std::function<double(int64_t)>& f) {
  Bytes b(static_cast<size_t>(n * DTypeSize(t)));
  for (int64_t i = 0; i < n; ++i) Set(t, b, i, f(i));
  return b;
}

std::string Compare(const Bytes& got, const Bytes& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  if (!got.empty() && std::memcmp(got.data(), want.data(), got.size()) != 0) {
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) return "bytes differ from byte " + std::to_string(i);
    }
  }
  return "";
}

// Set while the native-reduction suite runs (MpiOptions::deterministic = false): float sums and
// averages then come from MPI's own association order.
bool g_native = false;

// A reduction result: bit-exact against the rank-order fold, except float sum / avg of the native
// suite, which may differ by rounding: |got - want| <= n * eps * n * max|input| (the inputs of
// Value() are below 1.2e8 in magnitude).
std::string CompareReduction(const Bytes& got, const Bytes& want, DType t, ReduceOp op, int n) {
  const bool tolerant = g_native && (t == DType::kF32 || t == DType::kF64) &&
                        (op == ReduceOp::kSum || op == ReduceOp::kAvg);
  if (!tolerant || got.size() != want.size()) return Compare(got, want);
  const double eps = t == DType::kF32 ? 1.2e-7 : 2.3e-16;
  const double tol = static_cast<double>(n) * eps * static_cast<double>(n) * 1.2e8;
  const int64_t es = DTypeSize(t), count = static_cast<int64_t>(got.size()) / es;
  for (int64_t i = 0; i < count; ++i) {
    double g = 0, w = 0;
    if (t == DType::kF32) {
      float a, b;
      std::memcpy(&a, got.data() + i * es, 4);
      std::memcpy(&b, want.data() + i * es, 4);
      g = a;
      w = b;
    } else {
      std::memcpy(&g, got.data() + i * es, 8);
      std::memcpy(&w, want.data() + i * es, 8);
    }
    if (!(std::fabs(g - w) <= tol)) {
      return "element " + std::to_string(i) + ": " + std::to_string(g) + " vs rank-order " + std::to_string(w) +
             " (tolerance " + std::to_string(tol) + ")";
    }
  }
  return "";
}

std::string CheckCounters(Communicator& c, int64_t sent, int64_t received) {
  const ByteCounters got = c.counters();
  if (got.bytes_sent == sent && got.bytes_received == received) return "";
  return "counters sent " + std::to_string(got.bytes_sent) + " received " + std::to_string(got.bytes_received) +
         ", expected " + std::to_string(sent) + " / " + std::to_string(received);
}

// Count patterns over a group of n ranks.
std::vector<std::vector<int64_t>> Patterns(int n) {
  std::vector<int64_t> even(static_cast<size_t>(n), 3), uneven(static_cast<size_t>(n)), zero(static_cast<size_t>(n), 0),
      one(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) uneven[static_cast<size_t>(r)] = (r * 5 + 2) % 4;  // 2,3,0,1,...
  one[static_cast<size_t>(n - 1)] = 257;
  return {even, uneven, zero, one};
}
const char* kPatternNames[] = {"even", "uneven", "zero", "one"};

std::string StatusFailure(const Status& s) { return s.ok() ? "" : s.ToString(); }

void TestAllGather(Communicator& c, const std::string& label) {
  const int n = c.size(), me = c.rank();
  const auto pats = Patterns(n);
  for (DType t : kDTypes) {
    for (size_t p = 0; p < pats.size(); ++p) {
      const std::vector<int64_t>& counts = pats[p];
      const int64_t es = DTypeSize(t);
      int64_t total = 0;
      for (int64_t x : counts) total += x;
      auto gen = [&](int r) {
        return Make(t, counts[static_cast<size_t>(r)],
                    [&](int64_t i) { return Value(t, c.world_ranks()[static_cast<size_t>(r)], i, 1); });
      };
      Bytes want;
      for (int r = 0; r < n; ++r) {
        Bytes b = gen(r);
        want.insert(want.end(), b.begin(), b.end());
      }
      const Bytes send = gen(me);
      Bytes recv(static_cast<size_t>(total * es), std::byte{0x5a});
      c.ResetCounters();
      std::string f = StatusFailure(c.AllGatherV(send.empty() ? nullptr : send.data(), counts[static_cast<size_t>(me)],
                                                 recv.empty() ? nullptr : recv.data(), counts, t));
      if (f.empty()) f = Compare(recv, want);
      if (f.empty()) {
        f = CheckCounters(c, (n - 1) * counts[static_cast<size_t>(me)] * es,
                          (total - counts[static_cast<size_t>(me)]) * es);
      }
      Record(label + " all_gather " + std::string(DTypeName(t)) + " " + kPatternNames[p], f);
    }
  }
  // In place: the send block is the rank's own block of recv.
  {
    const std::vector<int64_t> counts = Patterns(n)[1];
    std::vector<int64_t> off(static_cast<size_t>(n) + 1, 0);
    for (int r = 0; r < n; ++r)
      off[static_cast<size_t>(r) + 1] = off[static_cast<size_t>(r)] + counts[static_cast<size_t>(r)];
    Bytes want = Make(DType::kI64, off.back(), [&](int64_t i) { return static_cast<double>(i * 3 + 1); });
    Bytes buf(want.size(), std::byte{0});
    std::memcpy(buf.data() + off[static_cast<size_t>(me)] * 8, want.data() + off[static_cast<size_t>(me)] * 8,
                static_cast<size_t>(counts[static_cast<size_t>(me)] * 8));
    std::string f = StatusFailure(c.AllGatherV(buf.data() + off[static_cast<size_t>(me)] * 8,
                                               counts[static_cast<size_t>(me)], buf.data(), counts, DType::kI64));
    if (f.empty()) f = Compare(buf, want);
    Record(label + " all_gather in place", f);
  }
}

// Reference reduction of `count` elements at element offset `off` of every rank's input.
Bytes Reference(Communicator& c, DType t, int64_t total, int64_t off, int64_t count, ReduceOp op, int salt) {
  const int n = c.size();
  std::vector<Bytes> in;
  for (int r = 0; r < n; ++r) {
    in.push_back(Make(t, total, [&](int64_t i) { return Value(t, c.world_ranks()[static_cast<size_t>(r)], i, salt); }));
  }
  std::vector<const void*> ptrs;
  for (const Bytes& b : in) ptrs.push_back(b.data() + off * DTypeSize(t));
  Bytes out(static_cast<size_t>(count * DTypeSize(t)));
  if (!ReduceBuffers(ptrs, out.data(), count, t, op).ok()) out.clear();
  return out;
}

void TestReduceScatter(Communicator& c, const std::string& label) {
  const int n = c.size(), me = c.rank();
  const auto pats = Patterns(n);
  for (DType t : kDTypes) {
    for (ReduceOp op : kOps) {
      for (size_t p = 0; p < pats.size(); ++p) {
        const std::vector<int64_t>& counts = pats[p];
        const int64_t es = DTypeSize(t);
        int64_t total = 0, off = 0;
        for (int r = 0; r < n; ++r) {
          if (r < me) off += counts[static_cast<size_t>(r)];
          total += counts[static_cast<size_t>(r)];
        }
        const int64_t mine = counts[static_cast<size_t>(me)];
        const Bytes send = Make(t, total, [&](int64_t i) { return Value(t, c.world_rank(), i, 2); });
        const Bytes want = Reference(c, t, total, off, mine, op, 2);
        Bytes recv(static_cast<size_t>(mine * es), std::byte{0x5a});
        c.ResetCounters();
        std::string f = StatusFailure(c.ReduceScatterV(send.empty() ? nullptr : send.data(), counts,
                                                       recv.empty() ? nullptr : recv.data(), t, op));
        if (f.empty()) f = CompareReduction(recv, want, t, op, n);
        if (f.empty()) f = CheckCounters(c, (total - mine) * es, (n - 1) * mine * es);
        Record(label + " reduce_scatter " + std::string(DTypeName(t)) + " " + std::string(ReduceOpName(op)) + " " +
                   kPatternNames[p],
               f);
      }
    }
  }
}

void TestAllReduce(Communicator& c, const std::string& label) {
  const int n = c.size(), me = c.rank();
  const int64_t sizes[] = {0, 1, n - 1, n + 1, 37, 1000};
  for (DType t : kDTypes) {
    for (ReduceOp op : kOps) {
      for (int64_t count : sizes) {
        for (bool in_place : {false, true}) {
          const int64_t es = DTypeSize(t);
          const Bytes send = Make(t, count, [&](int64_t i) { return Value(t, c.world_rank(), i, 3); });
          const Bytes want = Reference(c, t, count, 0, count, op, 3);
          Bytes recv = in_place ? send : Bytes(static_cast<size_t>(count * es), std::byte{0x5a});
          c.ResetCounters();
          std::string f = StatusFailure(c.AllReduce(in_place ? recv.data() : send.data(), recv.data(), count, t, op));
          if (f.empty()) f = CompareReduction(recv, want, t, op, n);
          const int64_t chunk = (count + n - 1) / n;
          const int64_t mine =
              std::max<int64_t>(0, std::min<int64_t>(count, (me + 1) * chunk) - std::min<int64_t>(count, me * chunk));
          if (f.empty())
            f = CheckCounters(c, (count - mine + (n - 1) * mine) * es, ((n - 1) * mine + count - mine) * es);
          Record(label + " all_reduce " + std::string(DTypeName(t)) + " " + std::string(ReduceOpName(op)) + " count " +
                     std::to_string(count) + (in_place ? " in place" : ""),
                 f);
        }
      }
    }
  }
  // Only a left fold in group-rank order gives this: ((1e8 + -1e8) + 1) + 1 ... = n - 2.
  if (!g_native) {
    float x = me == 0 ? 1e8f : me == 1 ? -1e8f : 1.0f;
    std::string f;
    if (n >= 3) {
      f = StatusFailure(c.AllReduce(&x, &x, 1, DType::kF32, ReduceOp::kSum));
      if (f.empty() && x != static_cast<float>(n - 2))
        f = "got " + std::to_string(x) + " want " + std::to_string(n - 2);
    }
    Record(label + " all_reduce f32 rank-order fold", f);
  }
}

void TestAllToAll(Communicator& c, const std::string& label) {
  const int n = c.size(), me = c.rank();
  for (int pattern = 0; pattern < 4; ++pattern) {
    auto cnt = [&](int s, int t) -> int64_t {
      if (pattern == 0) return 2;
      if (pattern == 1) return (s * 3 + t * 5 + 1) % 4;
      // Rank 0 neither sends nor receives (its buffers are null) while the others exchange data:
      // regression test for OpenMPI treating equal send/recv stand-ins as MPI_IN_PLACE.
      if (pattern == 2) return s == 0 || t == 0 ? 0 : 1 + (s + t) % 3;
      return 0;
    };
    for (DType t : kDTypes) {
      const int64_t es = DTypeSize(t);
      std::vector<int64_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) {
        sc[static_cast<size_t>(q)] = cnt(me, q);
        rc[static_cast<size_t>(q)] = cnt(q, me);
      }
      // Block from s to d, element i.
      auto val = [&](int s, int d, int64_t i) { return static_cast<double>((s * 37 + d * 11 + i) % 50) - 25; };
      Bytes send, want;
      for (int q = 0; q < n; ++q) {
        Bytes b = Make(t, cnt(me, q), [&](int64_t i) { return val(me, q, i); });
        send.insert(send.end(), b.begin(), b.end());
        Bytes w = Make(t, cnt(q, me), [&](int64_t i) { return val(q, me, i); });
        want.insert(want.end(), w.begin(), w.end());
      }
      Bytes recv(want.size(), std::byte{0x5a});
      c.ResetCounters();
      std::string f = StatusFailure(
          c.AllToAllV(send.empty() ? nullptr : send.data(), sc, recv.empty() ? nullptr : recv.data(), rc, t));
      if (f.empty()) f = Compare(recv, want);
      int64_t s_total = 0, r_total = 0;
      for (int q = 0; q < n; ++q) {
        if (q == me) continue;
        s_total += sc[static_cast<size_t>(q)];
        r_total += rc[static_cast<size_t>(q)];
      }
      if (f.empty()) f = CheckCounters(c, s_total * es, r_total * es);
      Record(label + " all_to_all " + std::string(DTypeName(t)) + " pattern " + std::to_string(pattern), f);
    }
  }
  // In place (send == recv, even counts).
  {
    Bytes buf = Make(DType::kI32, 2 * n, [&](int64_t i) { return static_cast<double>(me * 100 + i); });
    Bytes want =
        Make(DType::kI32, 2 * n, [&](int64_t i) { return static_cast<double>((i / 2) * 100 + me * 2 + i % 2); });
    std::string f = StatusFailure(c.AllToAll(buf.data(), buf.data(), 2, DType::kI32));
    if (f.empty()) f = Compare(buf, want);
    Record(label + " all_to_all in place", f);
  }
  // Strided blocks (the base version: pack, AllToAllV, unpack): rank me holds a 3 x (2n) matrix
  // and sends column pair q to rank q; it receives rank s's pair into rows 3s..3s+2 of a 3n x 3
  // matrix whose third column stays untouched.
  {
    const int64_t cols = 2 * n;
    std::vector<int32_t> m(static_cast<size_t>(3 * cols)), out(static_cast<size_t>(3 * n * 3), -1);
    for (int64_t i = 0; i < 3 * cols; ++i) m[static_cast<size_t>(i)] = static_cast<int32_t>(me * 1000 + i);
    std::vector<StridedBlock> sb, rb;
    for (int q = 0; q < n; ++q) {
      sb.push_back(StridedBlock{2 * q, 3, 2, cols});
      rb.push_back(StridedBlock{9 * q, 3, 2, 3});
    }
    std::string f = c.strided_all_to_all_is_direct() ? "mpi claims a direct strided all_to_all" : "";
    if (f.empty()) f = StatusFailure(c.AllToAllStrided(m.data(), sb, out.data(), rb, DType::kI32));
    for (int s = 0; s < n && f.empty(); ++s) {
      for (int r = 0; r < 3 && f.empty(); ++r) {
        for (int x = 0; x < 3; ++x) {
          const int32_t want = x < 2 ? s * 1000 + r * static_cast<int32_t>(cols) + 2 * me + x : -1;
          if (out[static_cast<size_t>((3 * s + r) * 3 + x)] != want) {
            f = "strided block from rank " + std::to_string(s) + " row " + std::to_string(r) + " col " +
                std::to_string(x) + " differs";
            break;
          }
        }
      }
    }
    Record(label + " all_to_all strided", f);
  }
}

void TestBroadcast(Communicator& c, const std::string& label) {
  const int n = c.size(), me = c.rank();
  for (DType t : kDTypes) {
    for (int root : {0, n - 1, n / 2}) {  // a fixed number of checks whatever the group size
      for (int64_t count : {0, 1, 100}) {
        const int64_t es = DTypeSize(t);
        const Bytes want = Make(t, count, [&](int64_t i) { return Value(t, root, i, 4); });
        Bytes buf = me == root ? want : Bytes(want.size(), std::byte{0x5a});
        c.ResetCounters();
        std::string f = StatusFailure(c.Broadcast(buf.empty() ? nullptr : buf.data(), count, t, root));
        if (f.empty()) f = Compare(buf, want);
        if (f.empty()) f = me == root ? CheckCounters(c, (n - 1) * count * es, 0) : CheckCounters(c, 0, count * es);
        Record(label + " broadcast " + std::string(DTypeName(t)) + " root " + std::to_string(root) + " count " +
                   std::to_string(count),
               f);
      }
    }
  }
}

void TestSendRecv(Communicator& c, const std::string& label) {
  const int n = c.size(), me = c.rank();
  auto val = [](int s, int d, int k, int64_t i) { return static_cast<double>(s * 1000 + d * 100 + k * 10 + i % 10); };
  // Every pair (including self), two messages per pair of different sizes (order must be kept).
  for (DType t : kDTypes) {
    const int64_t es = DTypeSize(t);
    auto len = [&](int s, int d, int k) -> int64_t { return k == 0 ? (s + 2 * d) % 3 : 50 + s + d; };
    std::vector<Bytes> out, in, want;
    std::vector<SendSpec> sends;
    std::vector<RecvSpec> recvs;
    out.reserve(static_cast<size_t>(2 * n));
    in.reserve(static_cast<size_t>(2 * n));
    int64_t sent = 0, received = 0;
    for (int q = 0; q < n; ++q) {
      for (int k = 0; k < 2; ++k) {
        out.push_back(Make(t, len(me, q, k), [&](int64_t i) { return val(me, q, k, i); }));
        want.push_back(Make(t, len(q, me, k), [&](int64_t i) { return val(q, me, k, i); }));
        in.push_back(Bytes(want.back().size(), std::byte{0x5a}));
        sends.push_back(SendSpec{q, out.back().empty() ? nullptr : out.back().data(), len(me, q, k)});
        recvs.push_back(RecvSpec{q, in.back().empty() ? nullptr : in.back().data(), len(q, me, k)});
        if (q != me) {
          sent += len(me, q, k) * es;
          received += len(q, me, k) * es;
        }
      }
    }
    c.ResetCounters();
    std::string f = StatusFailure(c.SendRecv(sends, recvs, t));
    for (size_t i = 0; i < in.size() && f.empty(); ++i) f = Compare(in[i], want[i]);
    if (f.empty()) f = CheckCounters(c, sent, received);
    Record(label + " send_recv all pairs " + std::string(DTypeName(t)), f);
  }
  // Ring: send to the next rank, receive from the previous one.
  {
    Bytes out = Make(DType::kF64, 10, [&](int64_t i) { return me * 10.0 + static_cast<double>(i); });
    Bytes in(out.size()),
        want = Make(DType::kF64, 10, [&](int64_t i) { return ((me + n - 1) % n) * 10.0 + static_cast<double>(i); });
    SendSpec s{(me + 1) % n, out.data(), 10};
    RecvSpec r{(me + n - 1) % n, in.data(), 10};
    std::string f =
        StatusFailure(c.SendRecv(std::span<const SendSpec>(&s, 1), std::span<const RecvSpec>(&r, 1), DType::kF64));
    if (f.empty()) f = Compare(in, want);
    Record(label + " send_recv ring", f);
  }
  Record(label + " send_recv empty", StatusFailure(c.SendRecv({}, {}, DType::kF32)));
}

void TestSuite(Communicator& c, const std::string& label) {
  Record(label + " barrier", StatusFailure(c.Barrier()));
  TestAllGather(c, label);
  TestReduceScatter(c, label);
  TestAllReduce(c, label);
  TestAllToAll(c, label);
  TestBroadcast(c, label);
  TestSendRecv(c, label);
  c.ResetCounters();
  std::string f = StatusFailure(c.Barrier());
  if (f.empty()) f = CheckCounters(c, 0, 0);
  Record(label + " barrier moves no payload", f);
}

// MPI_TEST_VERBOSE=1 prints every expected error (to review the messages).
std::string ExpectError(const Status& s, StatusCode code, const std::vector<std::string>& needles) {
  if (std::getenv("MPI_TEST_VERBOSE") != nullptr)
    std::fprintf(stderr, "rank %d: %s\n", g_world_rank, s.ToString().c_str());
  if (s.code() != code) return "got " + s.ToString() + ", expected code " + std::string(StatusCodeName(code));
  for (const std::string& n : needles) {
    if (s.message().find(n) == std::string::npos) return "message lacks '" + n + "': " + s.ToString();
  }
  return "";
}

void TestErrors(Communicator& world) {
  const int n = world.size(), me = world.rank();
  float x[4] = {};
  std::vector<int64_t> bad(static_cast<size_t>(n) + 1, 1);
  Record("error: all_gather counts size", ExpectError(world.AllGatherV(x, 1, x, bad, DType::kF32),
                                                      StatusCode::kInvalidArgument, {"recv_counts", "group size"}));
  Record("error: count above INT_MAX",
         ExpectError(world.Broadcast(x, int64_t{INT_MAX} + 1, DType::kBF16, 0), StatusCode::kInvalidArgument,
                     {"INT_MAX", "broadcast", "split the transfer"}));
  Record("error: all_reduce count above INT_MAX",
         ExpectError(world.AllReduce(x, x, int64_t{3} << 31, DType::kF32, ReduceOp::kSum), StatusCode::kInvalidArgument,
                     {"INT_MAX"}));
  Record("error: broadcast root",
         ExpectError(world.Broadcast(x, 1, DType::kF32, n), StatusCode::kInvalidArgument, {"root"}));
  SendSpec s{n, x, 1};
  Record("error: send_recv peer", ExpectError(world.SendRecv(std::span<const SendSpec>(&s, 1), {}, DType::kF32),
                                              StatusCode::kInvalidArgument, {"peer"}));
  Record("error: null buffer", ExpectError(world.AllReduce(nullptr, x, 1, DType::kF32, ReduceOp::kSum),
                                           StatusCode::kInvalidArgument, {"null"}));
  // Local errors do not break the communicator.
  Record("error: world still usable", StatusFailure(world.Barrier()));

  // Mismatched count: every rank reports the same mismatch, then the communicator is broken.
  {
    auto c = world.Split(0, me);
    std::string f = c.ok() ? "" : c.status().ToString();
    if (f.empty()) {
      const int64_t count = me == n - 1 ? 3 : 4;
      f = ExpectError((*c)->AllReduce(x, x, count, DType::kF32, ReduceOp::kSum), StatusCode::kFailedPrecondition,
                      {"all_reduce", "mismatched count", "group rank " + std::to_string(n - 1)});
      if (f.empty()) f = ExpectError((*c)->Barrier(), StatusCode::kAborted, {"broken", "mismatched count"});
    }
    Record("error: mismatched all_reduce count", f);
  }
  // Mismatched collectives.
  {
    auto c = world.Split(0, me);
    std::string f = c.ok() ? "" : c.status().ToString();
    if (f.empty()) {
      const Status st = me == 0 ? (*c)->Barrier() : (*c)->Broadcast(x, 2, DType::kF32, 0);
      f = ExpectError(st, StatusCode::kFailedPrecondition, {"mismatched collectives", "barrier", "broadcast"});
    }
    Record("error: mismatched collectives", f);
  }
  // Mismatched all_to_all counts (rank 0 sends 2 to rank 1, which expects 1).
  {
    auto c = world.Split(0, me);
    std::string f = c.ok() ? "" : c.status().ToString();
    if (f.empty()) {
      std::vector<int64_t> sc(static_cast<size_t>(n), 1), rc(static_cast<size_t>(n), 1);
      if (me == 0) sc[1] = 2;
      std::vector<float> in(static_cast<size_t>(n) + 1), out(static_cast<size_t>(n));
      f = ExpectError((*c)->AllToAllV(in.data(), sc, out.data(), rc, DType::kF32), StatusCode::kFailedPrecondition,
                      {"mismatched counts", "sends 2 elements"});
    }
    Record("error: mismatched all_to_all counts", f);
  }
  // Timeout: every rank but the last enters a barrier; the message names the absent rank.
  {
    MpiOptions opts;
    opts.timeout = std::chrono::milliseconds(1500);
    auto c = MpiCommunicator::Create(MPI_COMM_WORLD, opts);
    std::string f = c.ok() ? "" : c.status().ToString();
    if (f.empty() && me != n - 1) {
      f = ExpectError(
          (*c)->Barrier(), StatusCode::kDeadlineExceeded,
          {"barrier", "timed out after 1500 ms", "group ranks [" + std::to_string(n - 1) + "]", "did not arrive"});
      if (f.empty()) f = ExpectError((*c)->Barrier(), StatusCode::kAborted, {"broken"});
    }
    Record("error: barrier timeout names the absent rank", f);
    Record("error: world usable after a timeout elsewhere", StatusFailure(world.Barrier()));
  }
  // SendRecv timeout: rank 0 waits for a message rank 1 never sends.
  {
    MpiOptions opts;
    opts.timeout = std::chrono::milliseconds(1000);
    auto c = MpiCommunicator::Create(MPI_COMM_WORLD, opts);
    std::string f = c.ok() ? "" : c.status().ToString();
    if (f.empty() && me == 0) {
      RecvSpec r{1, x, 2};
      f = ExpectError((*c)->SendRecv({}, std::span<const RecvSpec>(&r, 1), DType::kF32), StatusCode::kDeadlineExceeded,
                      {"send_recv", "waited for sends from peer group rank 1"});
    }
    Record("error: send_recv timeout names the peer", f);
    Record("error: world usable after a send_recv timeout", StatusFailure(world.Barrier()));
  }
  // SendRecv size mismatches between ranks 0 and 1 (short message, then a too long one).
  for (int variant = 0; variant < 2; ++variant) {
    auto c = world.Split(0, me);
    std::string f = c.ok() ? "" : c.status().ToString();
    if (f.empty() && me <= 1) {
      float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
      const int64_t send_count = variant == 0 ? 3 : 6, recv_count = 5;
      Status st;
      if (me == 0) {
        SendSpec sp{1, buf, send_count};
        st = (*c)->SendRecv(std::span<const SendSpec>(&sp, 1), {}, DType::kF32);
        if (!st.ok()) f = "sender: " + st.ToString();
      } else {
        RecvSpec rp{0, buf, recv_count};
        st = (*c)->SendRecv({}, std::span<const RecvSpec>(&rp, 1), DType::kF32);
        f = ExpectError(st, StatusCode::kFailedPrecondition, {"send_recv"});
      }
    }
    Record(std::string("error: send_recv size mismatch ") + (variant == 0 ? "short" : "long"), f);
  }
}

int Main() {
  MpiFinalizeGuard finalize;
  // Bit-exact reductions (the threads backend's rank-order folds) for every suite but "native".
  MpiOptions deterministic;
  deterministic.deterministic = true;
  auto world_or = MpiWorld(deterministic);
  if (!world_or.ok()) MpiAbort(world_or.status());
  std::shared_ptr<Communicator> world = *world_or;
  const int n = world->size(), me = world->rank();
  g_world_rank = world->world_rank();
  {
    std::string f;
    if (world->backend() != "mpi") f = "backend " + world->backend();
    std::vector<int> expect(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) expect[static_cast<size_t>(i)] = i;
    if (world->world_ranks() != expect || world->world_rank() != me) f = "world ranks are not 0..n-1";
    Record("world communicator", f);
  }
  TestSuite(*world, "world");

  // Interleaved split with reversed keys: group order is descending world rank.
  {
    auto g = world->Split(me % 2, -me);
    std::string f = g.ok() ? "" : g.status().ToString();
    if (f.empty()) {
      std::vector<int> expect;
      for (int r = n - 1; r >= 0; --r) {
        if (r % 2 == me % 2) expect.push_back(r);
      }
      if ((*g)->world_ranks() != expect) f = "world ranks differ";
      if ((*g)->world_rank() != me) f = "world rank differs";
    }
    Record("split interleaved", f);
    if (g.ok()) TestSuite(**g, "interleaved");
  }
  // Uneven split: the first n-1 ranks, and a group of one.
  {
    auto g = world->Split(me < n - 1 ? 0 : 1, me);
    Record("split uneven", g.ok() ? "" : g.status().ToString());
    if (g.ok()) TestSuite(**g, "uneven");
  }
  // Opting out: a negative color returns nullptr; the others still get their group.
  {
    auto g = world->Split(me == 0 ? -1 : 0, me);
    std::string f = g.ok() ? "" : g.status().ToString();
    if (f.empty() && me == 0 && *g != nullptr) f = "expected nullptr";
    if (f.empty() && me != 0 && (*g == nullptr || (*g)->size() != n - 1)) f = "expected a group of n-1";
    if (f.empty() && me != 0) f = StatusFailure((*g)->Barrier());
    Record("split opt out", f);
  }
  // Split of a split.
  {
    auto g = world->Split(me / 2, me);
    std::string f = g.ok() ? "" : g.status().ToString();
    if (f.empty()) {
      auto h = (*g)->Split(0, -(*g)->rank());
      f = h.ok() ? "" : h.status().ToString();
      if (f.empty()) {
        std::vector<int> expect(world->world_ranks().begin() + (me / 2) * 2,
                                world->world_ranks().begin() + std::min(n, (me / 2) * 2 + 2));
        std::reverse(expect.begin(), expect.end());
        if ((*h)->world_ranks() != expect) f = "world ranks differ";
        if (f.empty()) f = StatusFailure((*h)->Barrier());
      }
    }
    Record("split of a split", f);
  }

  // The default options: native reductions (MPI_Iallreduce, MPI_Ireduce_scatter) where they apply,
  // within a float tolerance of the rank-order fold (integers, max and min exact).
  {
    auto native = MpiCommunicator::Create(MPI_COMM_WORLD, MpiOptions{});
    Record("create with native reductions", native.ok() ? "" : native.status().ToString());
    if (native.ok()) {
      g_native = true;
      TestReduceScatter(**native, "native");
      TestAllReduce(**native, "native");
      g_native = false;
    }
  }
  // Without header validation (MpiOptions::validate = false): the plain MPI paths (MPI_Ibarrier).
  {
    MpiOptions opts = deterministic;
    opts.validate = false;
    auto plain = MpiCommunicator::Create(MPI_COMM_WORLD, opts);
    Record("create without validation", plain.ok() ? "" : plain.status().ToString());
    if (plain.ok()) TestSuite(**plain, "unvalidated");
  }

  TestErrors(*world);

  // Combine: a check failed if it failed on any rank.
  std::vector<int64_t> failed = g_failed;
  Status s =
      world->AllReduce(failed.data(), failed.data(), static_cast<int64_t>(failed.size()), DType::kI64, ReduceOp::kMax);
  if (!s.ok()) MpiAbort(s);
  int passed = 0, bad = 0;
  for (size_t i = 0; i < failed.size(); ++i) {
    if (failed[i] != 0) {
      ++bad;
      if (me == 0) std::printf("FAILED: %s\n", g_names[i].c_str());
    } else {
      ++passed;
    }
  }
  if (me == 0) {
    std::printf("mpi collectives, %d ranks: %d passed, %d failed\n", n, passed, bad);
    std::fflush(stdout);
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshflow

int main() { return meshflow::Main(); }
