#include "meshflow/collectives/threads/threads_world.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

namespace meshflow {
namespace {

using Bytes = std::vector<std::byte>;
using std::chrono::milliseconds;

const DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

// Small integers, exact in every dtype (and their sums over <= 5 ranks too).
int64_t V(int64_t seed, int64_t i) { return ((seed * 7 + i * 3 + 1) % 11) - 5; }

template <typename T>
T FromInt(int64_t v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

Bytes Encode(DType t, const std::vector<int64_t>& vals) {
  Bytes out(vals.size() * static_cast<size_t>(DTypeSize(t)));
  VisitDType(t, [&](auto x) {
    using T = decltype(x);
    for (size_t i = 0; i < vals.size(); ++i) {
      const T v = FromInt<T>(vals[i]);
      std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
    }
  });
  return out;
}

// Values of rank `seed` (count elements).
std::vector<int64_t> Values(int64_t seed, int64_t count, int64_t first = 0) {
  std::vector<int64_t> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = V(seed, first + i);
  return v;
}

// Reference reduction of integer-valued inputs (exact sums), encoded in `t`.
Bytes ExpectedReduce(DType t, ReduceOp op, const std::vector<std::vector<int64_t>>& in) {
  const size_t count = in[0].size();
  const int64_t n = static_cast<int64_t>(in.size());
  Bytes out(count * static_cast<size_t>(DTypeSize(t)));
  VisitDType(t, [&](auto x) {
    using T = decltype(x);
    for (size_t i = 0; i < count; ++i) {
      int64_t sum = 0, mx = in[0][i], mn = in[0][i];
      for (const auto& r : in) {
        sum += r[i];
        mx = std::max(mx, r[i]);
        mn = std::min(mn, r[i]);
      }
      T v{};
      switch (op) {
        case ReduceOp::kSum:
          v = FromInt<T>(sum);
          break;
        case ReduceOp::kMax:
          v = FromInt<T>(mx);
          break;
        case ReduceOp::kMin:
          v = FromInt<T>(mn);
          break;
        case ReduceOp::kAvg:
          if constexpr (std::is_integral_v<T>) {
            v = static_cast<T>(sum / n);
          } else if constexpr (std::is_same_v<T, BFloat16>) {
            v = BFloat16(static_cast<float>(sum) / static_cast<float>(n));
          } else {
            v = static_cast<T>(sum) / static_cast<T>(n);
          }
          break;
      }
      std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
    }
  });
  return out;
}

Status Check(const Bytes& got, const Bytes& want, const std::string& what) {
  if (got.size() != want.size()) {
    return InternalError(what + ": got " + std::to_string(got.size()) + " bytes, want " + std::to_string(want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return InternalError(what + ": first differing byte " + std::to_string(i));
  }
  return Status();
}

std::string Desc(const char* what, int n, DType t, int rank, int64_t extra) {
  return std::string(what) + " n=" + std::to_string(n) + " dtype=" + std::string(DTypeName(t)) +
         " rank=" + std::to_string(rank) + " case=" + std::to_string(extra);
}

std::unique_ptr<ThreadWorld> MakeWorld(int n, milliseconds timeout = milliseconds(20000)) {
  ThreadWorldOptions opts;
  opts.timeout = timeout;
  StatusOr<std::unique_ptr<ThreadWorld>> w = ThreadWorld::Create(n, opts);
  EXPECT_TRUE(w.ok()) << w.status();
  return std::move(w).value();
}

bool Contains(const Status& s, const std::string& part) { return s.message().find(part) != std::string::npos; }

// Uneven count patterns (with zeros) for a group of n: pattern k.
std::vector<int64_t> Counts(int n, int k) {
  std::vector<int64_t> c(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) c[static_cast<size_t>(r)] = k == 3 ? 4 : (r * 2 + k) % 3;
  return c;
}

// Records one status per rank (Run is given OK so that it does not abort the others).
struct PerRank {
  explicit PerRank(int n) : statuses(static_cast<size_t>(n)) {}
  void Set(int r, Status s) {
    std::lock_guard<std::mutex> lock(mu);
    statuses[static_cast<size_t>(r)] = std::move(s);
  }
  std::mutex mu;
  std::vector<Status> statuses;
};

// Keeps a rank busy outside the library (as user code would) until `n` other ranks called Done():
// a member that is late, not one that returned (a returned member is reported at once).
struct Countdown {
  void Done() {
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    cv.notify_all();
  }
  void WaitFor(int n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done >= n; });
  }
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
};

TEST(ThreadWorldTest, CreateErrors) {
  StatusOr<std::unique_ptr<ThreadWorld>> w = ThreadWorld::Create(0);
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(w.status(), "0")) << w.status();
  ThreadWorldOptions opts;
  opts.timeout = milliseconds(0);
  w = ThreadWorld::Create(2, opts);
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(w.status(), "timeout 0")) << w.status();
}

TEST(ThreadWorldTest, IdentityAndBackend) {
  auto world = MakeWorld(3);
  std::atomic<int> seen{0};
  Status s = world->Run([&](Communicator& c) -> Status {
    if (c.backend() != "threads") return InternalError("backend " + c.backend());
    if (c.size() != 3 || c.rank() != c.world_rank()) return InternalError("bad rank/size");
    if (c.world_ranks() != std::vector<int>({0, 1, 2})) return InternalError("bad world_ranks");
    seen.fetch_add(1 << c.rank());
    return Status();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(seen.load(), 7);
  EXPECT_EQ(world->Run(nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(ThreadWorldTest, AllReduceEveryDTypeOpAndSize) {
  for (int n = 1; n <= 5; ++n) {
    auto world = MakeWorld(n);
    Status s = world->Run([&](Communicator& c) -> Status {
      for (DType t : kAllDTypes) {
        for (ReduceOp op : kAllOps) {
          for (int64_t count : {0, 1, 3, 10, 17}) {
            std::vector<std::vector<int64_t>> in;
            for (int r = 0; r < n; ++r) in.push_back(Values(r + count, count));
            const Bytes want = ExpectedReduce(t, op, in);
            const std::string what = Desc("all_reduce", n, t, c.rank(), count) + " op=" + std::string(ReduceOpName(op));
            const Bytes send = Encode(t, in[static_cast<size_t>(c.rank())]);
            Bytes recv(send.size());
            MF_RETURN_IF_ERROR(c.AllReduce(send.data(), recv.data(), count, t, op));
            MF_RETURN_IF_ERROR(Check(recv, want, what));
            Bytes inplace = send;  // send == recv
            MF_RETURN_IF_ERROR(c.AllReduce(inplace.data(), inplace.data(), count, t, op));
            MF_RETURN_IF_ERROR(Check(inplace, want, what + " in place"));
          }
        }
      }
      return Status();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(ThreadWorldTest, AllReduceIsDeterministicAndFoldsInRankOrder) {
  const int n = 5;
  const int64_t count = 1001;
  std::vector<std::vector<float>> in(n, std::vector<float>(count));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (auto& v : in) {
    for (float& x : v) x = dist(rng);
  }
  // Sequential reference: ((x0 + x1) + x2) ... in float; bf16 version rounds once at the end.
  std::vector<float> ref(count);
  std::vector<BFloat16> ref_bf16(count);
  for (int64_t i = 0; i < count; ++i) {
    float acc = in[0][i];
    float acc_bf = static_cast<float>(BFloat16(in[0][i]));
    for (int r = 1; r < n; ++r) {
      acc += in[r][i];
      acc_bf += static_cast<float>(BFloat16(in[r][i]));
    }
    ref[i] = acc;
    ref_bf16[i] = BFloat16(acc_bf);
  }
  auto world = MakeWorld(n);
  std::vector<std::vector<float>> results;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<std::vector<float>> out(n, std::vector<float>(count));
    Status s = world->Run([&](Communicator& c) -> Status {
      const int r = c.rank();
      MF_RETURN_IF_ERROR(c.AllReduce(in[r].data(), out[r].data(), count, DType::kF32, ReduceOp::kSum));
      std::vector<BFloat16> b(count), bout(count);
      for (int64_t i = 0; i < count; ++i) b[i] = BFloat16(in[r][i]);
      MF_RETURN_IF_ERROR(c.AllReduce(b.data(), bout.data(), count, DType::kBF16, ReduceOp::kSum));
      for (int64_t i = 0; i < count; ++i) {
        if (!(bout[i] == ref_bf16[i])) return InternalError("bf16 element " + std::to_string(i));
      }
      return Status();
    });
    ASSERT_TRUE(s.ok()) << s;
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(std::memcmp(out[r].data(), ref.data(), count * sizeof(float)), 0) << "rank " << r;
    }
  }
}

TEST(ThreadWorldTest, AllGatherVEvenUnevenAndEmpty) {
  for (int n = 1; n <= 5; ++n) {
    auto world = MakeWorld(n);
    Status s = world->Run([&](Communicator& c) -> Status {
      for (DType t : kAllDTypes) {
        for (int k = 0; k < 4; ++k) {
          const std::vector<int64_t> counts = Counts(n, k);
          std::vector<int64_t> all;
          for (int r = 0; r < n; ++r) {
            const std::vector<int64_t> v = Values(r + 10 * k, counts[static_cast<size_t>(r)]);
            all.insert(all.end(), v.begin(), v.end());
          }
          const Bytes send = Encode(t, Values(c.rank() + 10 * k, counts[static_cast<size_t>(c.rank())]));
          Bytes recv(all.size() * static_cast<size_t>(DTypeSize(t)));
          MF_RETURN_IF_ERROR(c.AllGatherV(send.data(), counts[static_cast<size_t>(c.rank())], recv.data(), counts, t));
          MF_RETURN_IF_ERROR(Check(recv, Encode(t, all), Desc("all_gather", n, t, c.rank(), k)));
          // In place: the send block lives inside recv.
          Bytes inplace(recv.size());
          int64_t off = 0;
          for (int r = 0; r < c.rank(); ++r) off += counts[static_cast<size_t>(r)];
          std::copy(send.begin(), send.end(), inplace.begin() + off * DTypeSize(t));
          MF_RETURN_IF_ERROR(c.AllGatherV(inplace.data() + off * DTypeSize(t), counts[static_cast<size_t>(c.rank())],
                                          inplace.data(), counts, t));
          MF_RETURN_IF_ERROR(Check(inplace, Encode(t, all), Desc("all_gather in place", n, t, c.rank(), k)));
        }
        // Even convenience form.
        const Bytes send = Encode(t, Values(c.rank(), 3));
        Bytes recv(send.size() * static_cast<size_t>(n));
        MF_RETURN_IF_ERROR(c.AllGather(send.data(), recv.data(), 3, t));
        std::vector<int64_t> all;
        for (int r = 0; r < n; ++r) {
          const std::vector<int64_t> v = Values(r, 3);
          all.insert(all.end(), v.begin(), v.end());
        }
        MF_RETURN_IF_ERROR(Check(recv, Encode(t, all), Desc("all_gather even", n, t, c.rank(), 0)));
      }
      return Status();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(ThreadWorldTest, ReduceScatterVEveryDTypeOpAndSize) {
  for (int n = 1; n <= 5; ++n) {
    auto world = MakeWorld(n);
    Status s = world->Run([&](Communicator& c) -> Status {
      const int me = c.rank();
      for (DType t : kAllDTypes) {
        for (ReduceOp op : kAllOps) {
          for (int k = 0; k < 4; ++k) {
            const std::vector<int64_t> counts = Counts(n, k);
            int64_t total = 0, off = 0;
            for (int r = 0; r < n; ++r) {
              if (r < me) off += counts[static_cast<size_t>(r)];
              total += counts[static_cast<size_t>(r)];
            }
            const int64_t mine = counts[static_cast<size_t>(me)];
            std::vector<std::vector<int64_t>> block;
            for (int r = 0; r < n; ++r) block.push_back(Values(r + k, mine, off));
            const Bytes send = Encode(t, Values(me + k, total));
            Bytes recv(static_cast<size_t>(mine * DTypeSize(t)));
            MF_RETURN_IF_ERROR(c.ReduceScatterV(send.data(), counts, recv.data(), t, op));
            const std::string what = Desc("reduce_scatter", n, t, me, k) + " op=" + std::string(ReduceOpName(op));
            MF_RETURN_IF_ERROR(Check(recv, mine == 0 ? Bytes() : ExpectedReduce(t, op, block), what));
            // In place: recv is the start of send.
            Bytes inplace = send;
            MF_RETURN_IF_ERROR(c.ReduceScatterV(inplace.data(), counts, inplace.data(), t, op));
            inplace.resize(recv.size());
            MF_RETURN_IF_ERROR(Check(inplace, recv, what + " in place"));
          }
        }
      }
      return Status();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

// Elements rank r sends to rank s in pattern k.
int64_t A2ACount(int r, int s, int k) { return k == 3 ? 2 : (r + 2 * s + k) % 3; }

TEST(ThreadWorldTest, AllToAllVEvenUnevenAndEmpty) {
  for (int n = 1; n <= 5; ++n) {
    auto world = MakeWorld(n);
    Status s = world->Run([&](Communicator& c) -> Status {
      const int me = c.rank();
      for (DType t : kAllDTypes) {
        for (int k = 0; k < 4; ++k) {
          std::vector<int64_t> send_counts, recv_counts, send_vals, want;
          for (int p = 0; p < n; ++p) {
            send_counts.push_back(A2ACount(me, p, k));
            recv_counts.push_back(A2ACount(p, me, k));
            const std::vector<int64_t> out = Values(me * 5 + p, A2ACount(me, p, k));
            send_vals.insert(send_vals.end(), out.begin(), out.end());
            const std::vector<int64_t> in = Values(p * 5 + me, A2ACount(p, me, k));
            want.insert(want.end(), in.begin(), in.end());
          }
          const Bytes send = Encode(t, send_vals);
          Bytes recv(want.size() * static_cast<size_t>(DTypeSize(t)));
          MF_RETURN_IF_ERROR(c.AllToAllV(send.data(), send_counts, recv.data(), recv_counts, t));
          MF_RETURN_IF_ERROR(Check(recv, Encode(t, want), Desc("all_to_all", n, t, me, k)));
          if (k == 3) {  // even: in place through the convenience form
            Bytes inplace = send;
            MF_RETURN_IF_ERROR(c.AllToAll(inplace.data(), inplace.data(), 2, t));
            MF_RETURN_IF_ERROR(Check(inplace, Encode(t, want), Desc("all_to_all in place", n, t, me, k)));
          }
        }
      }
      return Status();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

// Each rank holds a rows x cols matrix of i32 (value rank * 1000 + row * cols + col) and sends
// column block q (torch.chunk of cols) to rank q: strided on the send side. Rank q receives the
// blocks of every rank as (n * rows) x |block q| rows, dense per sender (or, with `padded`, into a
// recv matrix whose rows are two elements wider: strided on the receive side too).
Status StridedTranspose(Communicator& c, int64_t rows, int64_t cols, bool padded, bool dense_peer) {
  const int n = c.size();
  const int me = c.rank();
  auto chunk = [&](int q) {  // [begin, end) of column block q
    const int64_t step = (cols + n - 1) / n;
    return std::pair<int64_t, int64_t>{std::min(cols, q * step), std::min(cols, (q + 1) * step)};
  };
  std::vector<int32_t> send(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) send[static_cast<size_t>(i)] = static_cast<int32_t>(me * 1000 + i);
  const auto [mb, me_end] = chunk(me);
  const int64_t width = me_end - mb, pitch = width + (padded ? 2 : 0);
  std::vector<int32_t> recv(static_cast<size_t>(n * rows * pitch), -1);
  std::vector<StridedBlock> sb, rb;
  std::vector<int64_t> sc, rc;
  std::vector<int32_t> packed;  // dense_peer: the send blocks back to back
  for (int q = 0; q < n; ++q) {
    const auto [b, e] = chunk(q);
    sb.push_back(StridedBlock{b, e > b ? rows : 0, e - b, cols});
    rb.push_back(StridedBlock{q * rows * pitch, width > 0 ? rows : 0, width, pitch});
    sc.push_back(sb.back().count());
    rc.push_back(rb.back().count());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t x = b; x < e; ++x) packed.push_back(send[static_cast<size_t>(r * cols + x)]);
    }
  }
  const CallerSite where = CallerSite::Current();  // one call site for either form
  if (dense_peer && !padded) {
    MF_RETURN_IF_ERROR(c.AllToAllV(packed.data(), sc, recv.data(), rc, DType::kI32, where));
  } else {
    MF_RETURN_IF_ERROR(c.AllToAllStrided(send.data(), sb, recv.data(), rb, DType::kI32, where));
  }
  for (int s = 0; s < n; ++s) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t x = 0; x < pitch; ++x) {
        const int32_t got = recv[static_cast<size_t>((s * rows + r) * pitch + x)];
        const int32_t want = x < width ? static_cast<int32_t>(s * 1000 + r * cols + mb + x) : -1;
        if (got != want) {
          return InternalError("rank " + std::to_string(me) + " block from " + std::to_string(s) + " row " +
                               std::to_string(r) + " col " + std::to_string(x) + ": got " + std::to_string(got) +
                               ", want " + std::to_string(want));
        }
      }
    }
  }
  return Status();
}

TEST(ThreadWorldTest, AllToAllStridedTransposesColumnBlocks) {
  for (int n = 1; n <= 4; ++n) {
    auto world = MakeWorld(n);
    EXPECT_TRUE(world->Run([&](Communicator& c) -> Status {
      EXPECT_TRUE(c.strided_all_to_all_is_direct());
      for (int64_t cols : {8, 10, 3}) {  // even, uneven, fewer columns than ranks (empty blocks)
        for (bool padded : {false, true}) MF_RETURN_IF_ERROR(StridedTranspose(c, 5, cols, padded, false));
      }
      return Status();
    }).ok());
  }
}

// Ranks that call AllToAllV and ranks that call AllToAllStrided in the same collective interoperate.
TEST(ThreadWorldTest, AllToAllStridedMixesWithAllToAllV) {
  auto world = MakeWorld(4);
  Status s = world->Run([&](Communicator& c) -> Status {
    return StridedTranspose(c, 3, 10, false, /*dense_peer=*/c.rank() % 2 == 0);
  });
  EXPECT_TRUE(s.ok()) << s;
}

// The base version (pack, AllToAllV, unpack) serves overlapping send and recv regions.
TEST(ThreadWorldTest, AllToAllStridedInPlaceGoesThroughPacking) {
  auto world = MakeWorld(2);
  Status s = world->Run([&](Communicator& c) -> Status {
    const int me = c.rank();
    // [a0 a1 | b0 b1] rows of 2: rank r keeps column r, swaps the other with its peer.
    std::vector<int32_t> buf = {me * 10 + 0, me * 10 + 1, me * 10 + 2, me * 10 + 3};
    const std::vector<StridedBlock> blocks = {StridedBlock{0, 2, 1, 2}, StridedBlock{1, 2, 1, 2}};
    MF_RETURN_IF_ERROR(c.AllToAllStrided(buf.data(), blocks, buf.data(), blocks, DType::kI32));
    // Column q of the result comes from rank q's column me.
    const std::vector<int32_t> want = {0 * 10 + me, 1 * 10 + me, 0 * 10 + 2 + me, 1 * 10 + 2 + me};
    if (buf != want) return InternalError("in-place strided all_to_all on rank " + std::to_string(me));
    return Status();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ThreadWorldTest, AllToAllStridedRejectsBadBlocks) {
  auto world = MakeWorld(2);
  PerRank got(2);
  (void)world->Run([&](Communicator& c) -> Status {
    std::vector<int32_t> a(16), b(16);
    const StridedBlock ok{0, 2, 2, 4};
    const std::vector<StridedBlock> negative = {ok, StridedBlock{0, -1, 2, 4}};
    const std::vector<StridedBlock> overlapping = {ok, StridedBlock{8, 2, 3, 2}};
    const std::vector<StridedBlock> one = {ok}, two = {ok, ok};
    std::vector<Status> out;
    out.push_back(c.AllToAllStrided(a.data(), negative, b.data(), two, DType::kI32));
    out.push_back(c.AllToAllStrided(a.data(), two, b.data(), overlapping, DType::kI32));
    out.push_back(c.AllToAllStrided(a.data(), one, b.data(), two, DType::kI32));
    for (Status& x : out) {
      if (x.ok()) return InternalError("a bad block was accepted");
      if (x.code() != StatusCode::kInvalidArgument) return x;
    }
    if (!Contains(out[0], "send_blocks[1] has a negative field (offset 0, rows -1")) return out[0];
    if (!Contains(out[1], "recv_blocks[1] has overlapping runs: run 3 > stride 2")) return out[1];
    if (!Contains(out[2], "1 send blocks and 2 recv blocks for a group of 2")) return out[2];
    got.Set(c.rank(), Status());
    return Status();
  });
  for (const Status& x : got.statuses) EXPECT_TRUE(x.ok()) << x;
}

TEST(CopyStridedBlockTest, RunsOfDifferentLengths) {
  // Source: 3 rows of 4 (stride 6) = 12 elements; target: 4 rows of 3 (stride 5).
  std::vector<int> src(18), dst(20, -1);
  for (int i = 0; i < 18; ++i) src[static_cast<size_t>(i)] = i;
  CopyStridedBlock(src.data(), StridedBlock{1, 3, 4, 6}, dst.data(), StridedBlock{2, 4, 3, 5}, sizeof(int));
  const std::vector<int> seq = {1, 2, 3, 4, 7, 8, 9, 10, 13, 14, 15, 16};
  std::vector<int> want(20, -1);
  for (int k = 0; k < 12; ++k) want[static_cast<size_t>(2 + (k / 3) * 5 + k % 3)] = seq[static_cast<size_t>(k)];
  EXPECT_EQ(dst, want);
  EXPECT_EQ((StridedBlock{2, 4, 3, 5}).extent(), 18);
  EXPECT_EQ((StridedBlock{2, 0, 3, 5}).extent(), 0);
}

// Every path of CopyStridedBlock (contiguous on one or both sides, equal runs, short runs copied
// inline in 32-byte pieces, runs of different lengths) against an element-by-element copy.
TEST(CopyStridedBlockTest, RandomBlocksMatchElementwiseCopy) {
  std::mt19937 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  // Row splits of a count: one row, rows of a run of 1..70 elements, or 8/16/64 (32-byte multiples
  // at 4 and 8 bytes per element).
  auto block = [&](int64_t count, int64_t offset) {
    std::vector<int64_t> runs;
    for (int64_t r : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}, int64_t{16}, int64_t{64}, pick(1, 70)}) {
      if (count % r == 0) runs.push_back(r);
    }
    if (count == 0) return StridedBlock{offset, 0, pick(1, 4), 5};
    const int64_t run = pick(0, 3) == 0 ? count : runs[static_cast<size_t>(pick(0, static_cast<int64_t>(runs.size()) - 1))];
    const int64_t gap = pick(0, 2) == 0 ? 0 : pick(1, 9);  // 0: the rows follow each other
    return StridedBlock{offset, count / run, run, run + gap};
  };
  for (int iter = 0; iter < 3000; ++iter) {
    const int64_t es = std::vector<int64_t>{1, 2, 4, 8}[static_cast<size_t>(pick(0, 3))];
    const int64_t count = std::vector<int64_t>{0, 1, 7, 64, 128, 192, 384, 1024}[static_cast<size_t>(pick(0, 7))];
    const StridedBlock from = block(count, pick(0, 5)), to = block(count, pick(0, 5));
    std::vector<unsigned char> src(static_cast<size_t>((from.offset + from.extent() + 1) * es));
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(rng());
    std::vector<unsigned char> dst(static_cast<size_t>((to.offset + to.extent() + 3) * es), 0xab);
    std::vector<unsigned char> want = dst;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t a = from.offset + (k / from.run) * from.stride + k % from.run;
      const int64_t b = to.offset + (k / to.run) * to.stride + k % to.run;
      std::memcpy(want.data() + b * es, src.data() + a * es, static_cast<size_t>(es));
    }
    CopyStridedBlock(src.data(), from, dst.data(), to, es);
    ASSERT_EQ(dst, want) << "es " << es << " from {" << from.offset << ", " << from.rows << ", " << from.run << ", "
                         << from.stride << "} to {" << to.offset << ", " << to.rows << ", " << to.run << ", "
                         << to.stride << "}";
  }
}

TEST(ThreadWorldTest, BroadcastFromEveryRoot) {
  for (int n = 1; n <= 5; ++n) {
    auto world = MakeWorld(n);
    Status s = world->Run([&](Communicator& c) -> Status {
      for (DType t : kAllDTypes) {
        for (int root = 0; root < n; ++root) {
          for (int64_t count : {0, 1, 7}) {
            const Bytes want = Encode(t, Values(root + 3, count));
            Bytes buf = c.rank() == root ? want : Encode(t, Values(99, count));
            MF_RETURN_IF_ERROR(c.Broadcast(buf.data(), count, t, root));
            MF_RETURN_IF_ERROR(Check(buf, want, Desc("broadcast", n, t, c.rank(), root)));
          }
        }
      }
      return Status();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(ThreadWorldTest, BarrierSeparatesPhases) {
  for (int n = 1; n <= 5; ++n) {
    auto world = MakeWorld(n);
    std::atomic<int> arrived{0};
    Status s = world->Run([&](Communicator& c) -> Status {
      for (int k = 0; k < 20; ++k) {
        arrived.fetch_add(1);
        MF_RETURN_IF_ERROR(c.Barrier());
        if (arrived.load() < n * (k + 1)) return InternalError("barrier released early at round " + std::to_string(k));
        MF_RETURN_IF_ERROR(c.Barrier());  // nobody starts round k+1 before everyone checked round k
      }
      return Status();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(ThreadWorldTest, SendRecvAllPairsSelfAndRepeatedPeers) {
  for (int n = 1; n <= 5; ++n) {
    auto world = MakeWorld(n);
    Status s = world->Run([&](Communicator& c) -> Status {
      const int me = c.rank();
      for (DType t : kAllDTypes) {
        // Every ordered pair (including self) with uneven counts, plus a second message from each
        // rank to the next one, received in order.
        auto count = [](int from, int to) -> int64_t { return (from + 2 * to) % 3 + (from == to ? 1 : 0); };
        std::vector<Bytes> send_bufs, recv_bufs, wants;
        std::vector<SendSpec> sends;
        std::vector<RecvSpec> recvs;
        send_bufs.reserve(static_cast<size_t>(n) + 1);
        recv_bufs.reserve(static_cast<size_t>(n) + 1);
        for (int p = 0; p < n; ++p) send_bufs.push_back(Encode(t, Values(me * 10 + p, count(me, p))));
        send_bufs.push_back(Encode(t, Values(me * 10 + 7, 2)));
        for (int p = 0; p < n; ++p) {
          sends.push_back(SendSpec{p, send_bufs[static_cast<size_t>(p)].data(), count(me, p)});
        }
        sends.push_back(SendSpec{(me + 1) % n, send_bufs.back().data(), 2});
        // Receives in reverse peer order: matching is per peer, not global.
        const int prev = (me + n - 1) % n;
        for (int p = n - 1; p >= 0; --p) {
          wants.push_back(Encode(t, Values(p * 10 + me, count(p, me))));
          recv_bufs.emplace_back(wants.back().size());
          recvs.push_back(RecvSpec{p, recv_bufs.back().data(), count(p, me)});
        }
        wants.push_back(Encode(t, Values(prev * 10 + 7, 2)));
        recv_bufs.emplace_back(wants.back().size());
        recvs.push_back(RecvSpec{prev, recv_bufs.back().data(), 2});
        MF_RETURN_IF_ERROR(c.SendRecv(sends, recvs, t));
        for (size_t i = 0; i < wants.size(); ++i) {
          MF_RETURN_IF_ERROR(Check(recv_bufs[i], wants[i], Desc("send_recv", n, t, me, static_cast<int64_t>(i))));
        }
      }
      // Empty call.
      return c.SendRecv({}, {}, DType::kF32);
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(ThreadWorldTest, SendRecvOnlyInvolvesPeers) {
  // Ranks 0 and 1 exchange while rank 2 does a different thing: point-to-point is not collective.
  auto world = MakeWorld(3);
  Status s = world->Run([&](Communicator& c) -> Status {
    if (c.rank() == 2) return Status();
    const int peer = 1 - c.rank();
    std::vector<int32_t> out = {c.rank() * 100, 7}, in(2);
    const SendSpec send{peer, out.data(), 2};
    const RecvSpec recv{peer, in.data(), 2};
    MF_RETURN_IF_ERROR(c.SendRecv({&send, 1}, {&recv, 1}, DType::kI32));
    if (in != std::vector<int32_t>({peer * 100, 7})) return InternalError("bad payload");
    return Status();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ThreadWorldTest, SplitRowsAndColumnsOfA2x3World) {
  auto world = MakeWorld(6);
  Status s = world->Run([&](Communicator& c) -> Status {
    const int r = c.rank();
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> row, c.Split(r / 3, r % 3));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> col, c.Split(r % 3, r / 3));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> rev, c.Split(0, -r));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> some, c.Split(r == 0 ? -1 : 7, 0));
    const int row0 = 3 * (r / 3);
    if (row->size() != 3 || row->rank() != r % 3 || row->world_rank() != r ||
        row->world_ranks() != std::vector<int>({row0, row0 + 1, row0 + 2})) {
      return InternalError("bad row communicator at world rank " + std::to_string(r));
    }
    if (col->size() != 2 || col->rank() != r / 3 || col->world_ranks() != std::vector<int>({r % 3, r % 3 + 3})) {
      return InternalError("bad column communicator at world rank " + std::to_string(r));
    }
    if (rev->rank() != 5 - r || rev->world_ranks() != std::vector<int>({5, 4, 3, 2, 1, 0})) {
      return InternalError("bad reversed communicator at world rank " + std::to_string(r));
    }
    if ((r == 0) != (some == nullptr)) return InternalError("negative color must give nullptr");
    if (some && (some->size() != 5 || some->rank() != r - 1)) return InternalError("bad color-7 communicator");
    if (row->backend() != "threads") return InternalError("bad backend");

    // Collectives on the sub-groups, interleaved.
    int64_t x = r;
    MF_RETURN_IF_ERROR(row->AllReduce(&x, &x, 1, DType::kI64, ReduceOp::kSum));
    if (x != 3 * row0 + 3) return InternalError("row sum " + std::to_string(x));
    std::vector<int32_t> g(2);
    const int32_t mine = r * 10;
    MF_RETURN_IF_ERROR(col->AllGather(&mine, g.data(), 1, DType::kI32));
    if (g != std::vector<int32_t>({(r % 3) * 10, (r % 3 + 3) * 10})) return InternalError("column gather");
    int64_t first = r;
    MF_RETURN_IF_ERROR(rev->Broadcast(&first, 1, DType::kI64, 0));  // rev rank 0 = world 5
    if (first != 5) return InternalError("reversed broadcast " + std::to_string(first));
    if (some) {
      double d = r;
      MF_RETURN_IF_ERROR(some->AllReduce(&d, &d, 1, DType::kF64, ReduceOp::kMax));
      if (d != 5) return InternalError("color-7 max");
    }
    // Split of a split: singletons.
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> single, row->Split(row->rank(), 0));
    if (single->size() != 1 || single->world_ranks() != std::vector<int>({r})) return InternalError("singleton");
    float f = 2.5f;
    MF_RETURN_IF_ERROR(single->AllReduce(&f, &f, 1, DType::kF32, ReduceOp::kAvg));
    if (f != 2.5f) return InternalError("singleton avg");
    return c.Barrier();
  });
  EXPECT_TRUE(s.ok()) << s;
  // Splits and barriers move no payload; each collective above moved counted bytes.
}

// ---------------------------------------------------------------------------------------------
// Byte counters.

// Runs fn on a fresh counter state and returns every rank's counters.
std::vector<ByteCounters> CountersOf(ThreadWorld& world, const std::function<Status(Communicator&)>& fn) {
  world.ResetCounters();
  Status s = world.Run([&](Communicator& c) -> Status {
    MF_RETURN_IF_ERROR(fn(c));
    MF_RETURN_IF_ERROR(c.Barrier());
    // The communicator's view equals the world's (barrier: everyone is done counting).
    if (!(c.counters() == world.counters(c.world_rank()))) return InternalError("communicator counters differ");
    return c.Barrier();
  });
  EXPECT_TRUE(s.ok()) << s;
  std::vector<ByteCounters> out;
  for (int r = 0; r < world.size(); ++r) out.push_back(world.counters(r));
  return out;
}

TEST(ThreadWorldTest, CountersMatchTheDocumentedFormulas) {
  const int n = 4;
  const std::vector<int64_t> counts = {1, 0, 3, 2};  // sum 6
  auto world = MakeWorld(n);
  const int64_t es = 8;
  auto buffers = [](int64_t elems) {
    return std::vector<double>(static_cast<size_t>(std::max<int64_t>(elems, 1)), 1.0);
  };

  // all_gather: received = sum of the others' counts; sent = own count to each of n-1 peers.
  std::vector<ByteCounters> got = CountersOf(*world, [&](Communicator& c) {
    std::vector<double> send = buffers(counts[c.rank()]), recv = buffers(6);
    return c.AllGatherV(send.data(), counts[c.rank()], recv.data(), counts, DType::kF64);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(got[r], (ByteCounters{3 * counts[r] * es, (6 - counts[r]) * es})) << "all_gather rank " << r;
  }

  // reduce_scatter: received = (n-1) * own count; sent = the others' blocks, one to each.
  got = CountersOf(*world, [&](Communicator& c) {
    std::vector<double> send = buffers(6), recv = buffers(counts[c.rank()]);
    return c.ReduceScatterV(send.data(), counts, recv.data(), DType::kF64, ReduceOp::kSum);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(got[r], (ByteCounters{(6 - counts[r]) * es, 3 * counts[r] * es})) << "reduce_scatter rank " << r;
  }

  // all_reduce of 10 elements over 4 ranks: torch.chunk chunks 3,3,3,1; rank p receives
  // (n-1)*|chunk p| + (count - |chunk p|) and sends as much.
  const int64_t chunk[] = {3, 3, 3, 1};
  got = CountersOf(*world, [&](Communicator& c) {
    std::vector<double> buf = buffers(10);
    return c.AllReduce(buf.data(), buf.data(), 10, DType::kF64, ReduceOp::kAvg);
  });
  for (int r = 0; r < n; ++r) {
    const int64_t elems = 3 * chunk[r] + (10 - chunk[r]);
    EXPECT_EQ(got[r], (ByteCounters{elems * es, elems * es})) << "all_reduce rank " << r;
  }

  // all_to_all: received = sum over s != me of recv_counts[s]; sent likewise.
  got = CountersOf(*world, [&](Communicator& c) {
    std::vector<int64_t> sc, rc;
    for (int p = 0; p < n; ++p) {
      sc.push_back(A2ACount(c.rank(), p, 0));
      rc.push_back(A2ACount(p, c.rank(), 0));
    }
    std::vector<double> send = buffers(12), recv = buffers(12);
    return c.AllToAllV(send.data(), sc, recv.data(), rc, DType::kF64);
  });
  for (int r = 0; r < n; ++r) {
    int64_t in = 0, out = 0;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      in += A2ACount(p, r, 0);
      out += A2ACount(r, p, 0);
    }
    EXPECT_EQ(got[r], (ByteCounters{out * es, in * es})) << "all_to_all rank " << r;
  }

  // broadcast from 2: each non-root receives count; the root sends count to each.
  got = CountersOf(*world, [&](Communicator& c) {
    std::vector<double> buf = buffers(5);
    return c.Broadcast(buf.data(), 5, DType::kF64, 2);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(got[r], r == 2 ? (ByteCounters{3 * 5 * es, 0}) : (ByteCounters{0, 5 * es})) << "broadcast rank " << r;
  }

  // send_recv: ring of r+1 elements to the next rank plus a self message (not counted).
  got = CountersOf(*world, [&](Communicator& c) {
    const int me = c.rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
    std::vector<double> a = buffers(me + 1), b = buffers(prev + 1), self_in = buffers(4), self_out = buffers(4);
    const SendSpec sends[] = {{next, a.data(), me + 1}, {me, self_in.data(), 4}};
    const RecvSpec recvs[] = {{me, self_out.data(), 4}, {prev, b.data(), prev + 1}};
    return c.SendRecv(sends, recvs, DType::kF64);
  });
  for (int r = 0; r < n; ++r) {
    const int prev = (r + n - 1) % n;
    EXPECT_EQ(got[r], (ByteCounters{(r + 1) * es, (prev + 1) * es})) << "send_recv rank " << r;
  }

  // barrier and split move no payload.
  got = CountersOf(*world, [&](Communicator& c) -> Status {
    MF_RETURN_IF_ERROR(c.Barrier());
    return c.Split(c.rank() % 2, 0).status();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[r], (ByteCounters{0, 0})) << "barrier/split rank " << r;
}

TEST(ThreadWorldTest, CountersOnSubGroupsAreAttributedToWorldRanks) {
  auto world = MakeWorld(6);
  std::vector<ByteCounters> got = CountersOf(*world, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> row, c.Split(c.rank() / 3, c.rank() % 3));
    std::vector<float> x(6, 1.0f);
    // 6 elements over 3 ranks: chunks of 2; each rank receives 2*2 + 4 = 8 elements.
    return row->AllReduce(x.data(), x.data(), 6, DType::kF32, ReduceOp::kSum);
  });
  for (int r = 0; r < 6; ++r) EXPECT_EQ(got[r], (ByteCounters{32, 32})) << "rank " << r;
}

TEST(ThreadWorldTest, CountersPersistAcrossRunsUntilReset) {
  auto world = MakeWorld(2);
  for (int k = 0; k < 2; ++k) {
    Status s = world->Run([&](Communicator& c) -> Status {
      int32_t v = 1;
      return c.Broadcast(&v, 1, DType::kI32, 0);
    });
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(world->counters(1), (ByteCounters{0, 8}));
  EXPECT_EQ(world->counters(0), (ByteCounters{8, 0}));
  world->ResetCounters();
  EXPECT_EQ(world->counters(0), (ByteCounters{0, 0}));
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(ThreadWorldTest, InvalidArgumentsNameTheValue) {
  auto world = MakeWorld(3);
  Status s = world->Run([&](Communicator& c) -> Status {
    float buf[8] = {};
    const std::vector<int64_t> two = {1, 1};
    const std::vector<int64_t> neg = {1, -4, 1};
    const std::vector<int64_t> ones = {1, 1, 1};
    std::vector<Status> out;
    out.push_back(c.AllGatherV(buf, 1, buf, two, DType::kF32));
    out.push_back(c.AllGatherV(buf, 1, buf, neg, DType::kF32));
    out.push_back(c.AllGatherV(buf, 5, buf, ones, DType::kF32));
    out.push_back(c.ReduceScatterV(buf, neg, buf, DType::kF32, ReduceOp::kSum));
    out.push_back(c.AllReduce(nullptr, buf, 4, DType::kF32, ReduceOp::kSum));
    out.push_back(c.AllReduce(buf, buf, -2, DType::kF32, ReduceOp::kSum));
    out.push_back(c.AllToAllV(buf, ones, buf, two, DType::kF32));
    out.push_back(c.Broadcast(buf, 1, DType::kF32, 3));
    const SendSpec bad_send{7, buf, 1};
    out.push_back(c.SendRecv({&bad_send, 1}, {}, DType::kF32));
    const RecvSpec bad_recv{0, nullptr, 2};
    out.push_back(c.SendRecv({}, {&bad_recv, 1}, DType::kF32));
    const SendSpec self_send{c.rank(), buf, 2};
    const RecvSpec self_recv{c.rank(), buf + 4, 3};
    out.push_back(c.SendRecv({&self_send, 1}, {&self_recv, 1}, DType::kF32));
    const std::vector<std::string> parts = {"recv_counts has 2 entries",
                                            "recv_counts[1] = -4",
                                            "send_count 5",
                                            "counts[1] = -4",
                                            "send is null",
                                            "negative count -2",
                                            "recv_counts has 2 entries",
                                            "root 3",
                                            "peer 7",
                                            "null buffer",
                                            "count 3"};
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].code() != StatusCode::kInvalidArgument || !Contains(out[i], parts[i])) {
        return InternalError("case " + std::to_string(i) + ": " + out[i].ToString());
      }
    }
    // The group is still usable: argument errors are caught before the rendezvous.
    return c.Barrier();
  });
  EXPECT_TRUE(s.ok()) << s;
}

struct MismatchCase {
  const char* name;
  std::function<Status(Communicator&)> call;
  std::vector<std::string> parts;
};

TEST(ThreadWorldTest, MismatchesAreDetectedAndBreakTheGroup) {
  const std::vector<MismatchCase> cases = {
      {"dtype",
       [](Communicator& c) {
         double buf[4] = {};
         return c.AllReduce(buf, buf, 2, c.rank() == 2 ? DType::kI32 : DType::kF32, ReduceOp::kSum);
       },
       {"all_reduce", "mismatched dtype: f32 at group rank 0 (world 0) vs i32 at group rank 2 (world 2)"}},
      {"op",
       [](Communicator& c) {
         float buf[4] = {};
         return c.AllReduce(buf, buf, 2, DType::kF32, c.rank() == 1 ? ReduceOp::kMax : ReduceOp::kSum);
       },
       {"mismatched reduce op: sum at group rank 0 (world 0) vs max at group rank 1 (world 1)"}},
      {"count",
       [](Communicator& c) {
         float buf[8] = {};
         return c.AllReduce(buf, buf, c.rank() == 1 ? 5 : 4, DType::kF32, ReduceOp::kSum);
       },
       {"mismatched count: 4 at group rank 0 (world 0) vs 5 at group rank 1 (world 1)"}},
      {"kind",
       [](Communicator& c) -> Status {
         float buf[4] = {};
         if (c.rank() == 1) return c.Barrier();
         return c.AllReduce(buf, buf, 2, DType::kF32, ReduceOp::kSum);
       },
       {"mismatched collectives: all_reduce at group rank 0 (world 0) vs barrier at group rank 1 (world 1)"}},
      {"root",
       [](Communicator& c) {
         float buf[4] = {};
         return c.Broadcast(buf, 2, DType::kF32, c.rank() == 2 ? 1 : 0);
       },
       {"broadcast", "mismatched root: 0 at group rank 0 (world 0) vs 1 at group rank 2 (world 2)"}},
      {"gather counts",
       [](Communicator& c) {
         float buf[8] = {};
         const std::vector<int64_t> a = {1, 1, 1}, b = {1, 1, 2};
         return c.AllGatherV(buf, 1, buf + 4, c.rank() == 1 ? b : a, DType::kF32);
       },
       {"all_gather",
        "mismatched recv_counts: [1,1,1] at group rank 0 (world 0) vs [1,1,2] at group rank 1 (world 1)"}},
      {"all_to_all counts",
       [](Communicator& c) {
         float buf[16] = {};
         const std::vector<int64_t> ones = {1, 1, 1}, more = {1, 1, 2};
         return c.AllToAllV(buf, c.rank() == 0 ? more : ones, buf + 8, ones, DType::kF32);
       },
       {"all_to_all", "group rank 0 (world 0) sends 2 elements to group rank 2 (world 2), which expects 1"}},
  };
  auto world = MakeWorld(3);
  for (const MismatchCase& mc : cases) {
    PerRank first(3), later(3);
    Status s = world->Run([&](Communicator& c) -> Status {
      first.Set(c.rank(), mc.call(c));
      later.Set(c.rank(), c.Barrier());
      return Status();
    });
    ASSERT_TRUE(s.ok()) << s;
    for (int r = 0; r < 3; ++r) {
      const Status& f = first.statuses[r];
      EXPECT_EQ(f.code(), StatusCode::kFailedPrecondition) << mc.name << " rank " << r << ": " << f;
      for (const std::string& part : mc.parts) EXPECT_TRUE(Contains(f, part)) << mc.name << ": " << f;
      const Status& l = later.statuses[r];
      EXPECT_EQ(l.code(), StatusCode::kAborted) << mc.name << " rank " << r << ": " << l;
      EXPECT_TRUE(Contains(l, "broken")) << l;
    }
  }
}

TEST(ThreadWorldTest, SendRecvCountMismatch) {
  auto world = MakeWorld(2);
  PerRank pr(2);
  Status s = world->Run([&](Communicator& c) -> Status {
    float buf[4] = {};
    if (c.rank() == 0) {
      const SendSpec send{1, buf, 3};
      pr.Set(0, c.SendRecv({&send, 1}, {}, DType::kF32));
    } else {
      const RecvSpec recv{0, buf, 2};
      pr.Set(1, c.SendRecv({}, {&recv, 1}, DType::kF32));
    }
    return Status();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(pr.statuses[r].code(), StatusCode::kFailedPrecondition) << pr.statuses[r];
    EXPECT_TRUE(Contains(pr.statuses[r],
                         "group rank 0 (world 0) sends 3 elements of f32 but group rank 1 (world 1) "
                         "receives 2 elements of f32"))
        << pr.statuses[r];
  }
}

TEST(ThreadWorldTest, TimeoutNamesTheCollectiveGroupAndMissingRank) {
  auto world = MakeWorld(3, milliseconds(200));
  PerRank first(3), later(3);
  Countdown gate;
  const auto start = std::chrono::steady_clock::now();
  Status s = world->Run([&](Communicator& c) -> Status {
    if (c.rank() == 2) {  // late: busy elsewhere until the others gave up
      gate.WaitFor(2);
      return Status();
    }
    float x[2] = {1, 2};
    first.Set(c.rank(), c.AllReduce(x, x, 2, DType::kF32, ReduceOp::kSum));
    later.Set(c.rank(), c.AllReduce(x, x, 2, DType::kF32, ReduceOp::kSum));
    gate.Done();
    return Status();
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 2; ++r) {
    const Status& f = first.statuses[r];
    EXPECT_EQ(f.code(), StatusCode::kDeadlineExceeded) << f;
    EXPECT_TRUE(Contains(f, "all_reduce on group [0,1,2]")) << f;
    EXPECT_TRUE(Contains(f, "group ranks [2] (world ranks [2]) did not arrive")) << f;
    EXPECT_TRUE(Contains(f, "200 ms")) << f;
    EXPECT_EQ(later.statuses[r].code(), StatusCode::kAborted) << later.statuses[r];
  }
  EXPECT_LT(elapsed, std::chrono::seconds(5));
}

TEST(ThreadWorldTest, TimeoutOnASubGroupNamesItsWorldRanks) {
  auto world = MakeWorld(6, milliseconds(200));
  PerRank pr(6);
  Countdown gate;
  Status s = world->Run([&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> row, c.Split(c.rank() / 3, c.rank() % 3));
    if (c.rank() == 4) {  // row [3,4,5] misses group rank 1 (late, not returned)
      gate.WaitFor(2);
      return Status();
    }
    pr.Set(c.rank(), row->Barrier());
    if (c.rank() == 3 || c.rank() == 5) gate.Done();
    return Status();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int r : {0, 1, 2}) EXPECT_TRUE(pr.statuses[r].ok()) << pr.statuses[r];
  for (int r : {3, 5}) {
    EXPECT_EQ(pr.statuses[r].code(), StatusCode::kDeadlineExceeded) << pr.statuses[r];
    EXPECT_TRUE(Contains(pr.statuses[r], "barrier on group [3,4,5]")) << pr.statuses[r];
    EXPECT_TRUE(Contains(pr.statuses[r], "group ranks [1] (world ranks [4]) did not arrive")) << pr.statuses[r];
  }
}

TEST(ThreadWorldTest, SendRecvTimeoutsNameThePeer) {
  auto world = MakeWorld(3, milliseconds(200));
  PerRank pr(3);
  Status s = world->Run([&](Communicator& c) -> Status {
    float buf[2] = {};
    if (c.rank() == 0) {  // waits for a message rank 1 never sends
      const RecvSpec recv{1, buf, 2};
      pr.Set(0, c.SendRecv({}, {&recv, 1}, DType::kF32));
    }
    return Status();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(pr.statuses[0].code(), StatusCode::kDeadlineExceeded) << pr.statuses[0];
  EXPECT_TRUE(Contains(pr.statuses[0], "send_recv")) << pr.statuses[0];
  EXPECT_TRUE(Contains(pr.statuses[0], "waited for a send from peer group rank 1 (world 1)")) << pr.statuses[0];

  s = world->Run([&](Communicator& c) -> Status {
    float buf[2] = {};
    if (c.rank() == 2) {  // sends to rank 0, which never receives
      const SendSpec send{0, buf, 2};
      pr.Set(2, c.SendRecv({&send, 1}, {}, DType::kF32));
    }
    return Status();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(pr.statuses[2].code(), StatusCode::kDeadlineExceeded) << pr.statuses[2];
  EXPECT_TRUE(Contains(pr.statuses[2], "not received by peer group rank 0 (world 0)")) << pr.statuses[2];
}

TEST(ThreadWorldTest, ARankErrorAbortsThePeersFast) {
  auto world = MakeWorld(4, milliseconds(20000));  // far longer than the test may take
  PerRank pr(4);
  const auto start = std::chrono::steady_clock::now();
  Status s = world->Run([&](Communicator& c) -> Status {
    if (c.rank() == 1) return InvalidArgumentError("boom");
    float x[4] = {};
    Status st = c.AllReduce(x, x, 4, DType::kF32, ReduceOp::kSum);
    pr.Set(c.rank(), st);
    MF_RETURN_IF_ERROR(st);
    return c.Barrier();
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_TRUE(Contains(s, "rank 0: all_reduce on group [0,1,2,3]")) << s;
  EXPECT_TRUE(Contains(s, "rank 1 failed: INVALID_ARGUMENT: boom")) << s;
  for (int r : {0, 2, 3}) EXPECT_EQ(pr.statuses[r].code(), StatusCode::kAborted) << pr.statuses[r];

  // A later Run on the same world starts with fresh groups.
  s = world->Run([&](Communicator& c) -> Status {
    int32_t v = 1;
    MF_RETURN_IF_ERROR(c.AllReduce(&v, &v, 1, DType::kI32, ReduceOp::kSum));
    return v == 4 ? Status() : InternalError("sum " + std::to_string(v));
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A status agreed across ranks that already names the failing rank (as the checkpoint's
// "rank 0: ..." does on every rank) came back from Run as "rank 0: rank 0: ...".
TEST(ThreadWorldTest, RunDoesNotRepeatTheRankPrefix) {
  auto world = MakeWorld(2, milliseconds(20000));
  Status s = world->Run([](Communicator&) -> Status { return UnavailableError("rank 0: disk full"); });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(), "rank 0: disk full");
  // Another rank's report of rank 0's failure keeps both names.
  s = world->Run([](Communicator& c) -> Status {
    return c.rank() == 1 ? UnavailableError("rank 0: disk full") : Status();
  });
  EXPECT_EQ(s.message(), "rank 1: rank 0: disk full");
  s = world->Run([](Communicator&) -> Status { return UnavailableError("disk full"); });
  EXPECT_EQ(s.message(), "rank 0: disk full");
}

TEST(ThreadWorldTest, AbortReachesSubGroupsAndPointToPoint) {
  auto world = MakeWorld(4, milliseconds(20000));
  PerRank pr(4);
  const auto start = std::chrono::steady_clock::now();
  Status s = world->Run([&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> pair, c.Split(c.rank() / 2, 0));
    if (c.rank() == 3) return InternalError("rank 3 gives up");
    float x[2] = {};
    if (c.rank() == 2) {  // waits on its pair partner (rank 3) in a point-to-point receive
      const RecvSpec recv{1, x, 2};
      pr.Set(2, pair->SendRecv({}, {&recv, 1}, DType::kF32));
    } else {  // ranks 0 and 1 wait for the whole world (or see the abort in their pair barrier)
      Status st = pair->Barrier();
      if (st.ok()) st = c.Barrier();
      pr.Set(c.rank(), st);
    }
    return Status();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_TRUE(Contains(s, "rank 3: rank 3 gives up")) << s;
  for (int r : {0, 1, 2}) {
    EXPECT_EQ(pr.statuses[r].code(), StatusCode::kAborted) << pr.statuses[r];
    EXPECT_TRUE(Contains(pr.statuses[r], "rank 3 failed")) << pr.statuses[r];
  }
}

// The file name as CallerSite spells it in this test.
std::string ThisFile() { return CallerSite::Current().file_name(); }

TEST(ThreadWorldTest, ASkippedAllReduceFailsEveryRankBeforeDataIsUsed) {
  auto world = MakeWorld(3, milliseconds(20000));  // the check must not need the timeout
  PerRank first(3);
  std::vector<std::vector<float>> out(3, std::vector<float>(4, -1.0f));
  std::atomic<int> line_a{0}, line_b{0};  // the lines of the two calls (written by every rank)
  const auto start = std::chrono::steady_clock::now();
  Status s = world->Run([&](Communicator& c) -> Status {
    std::vector<float> x(4, 1.0f);
    float* y = out[static_cast<size_t>(c.rank())].data();
    Status st;
    if (c.rank() != 1) {  // rank 1 skips the first all_reduce; its second one must not match it
      line_a.store(__LINE__); st = c.AllReduce(x.data(), y, 4, DType::kF32, ReduceOp::kSum);
    }
    if (st.ok()) {
      line_b.store(__LINE__); st = c.AllReduce(x.data(), y, 4, DType::kF32, ReduceOp::kSum);
    }
    first.Set(c.rank(), st);
    return st;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  const std::string site_a = ThisFile() + ":" + std::to_string(line_a.load());
  const std::string site_b = ThisFile() + ":" + std::to_string(line_b.load());
  for (int r = 0; r < 3; ++r) {
    const Status& f = first.statuses[static_cast<size_t>(r)];
    EXPECT_EQ(f.code(), StatusCode::kFailedPrecondition) << "rank " << r << ": " << f;
    EXPECT_TRUE(Contains(f, "mismatched call sites: group rank 0 (world 0) is at its collective #0 all_reduce "
                            "called at " + site_a + ", but group rank 1 (world 1) at #0 all_reduce called at " + site_b))
        << f;
    EXPECT_TRUE(Contains(f, "a rank skipped, repeated or reordered a collective")) << f;
    // No rank received anything.
    for (float v : out[static_cast<size_t>(r)]) EXPECT_EQ(v, -1.0f) << "rank " << r;
  }
}

// A rank whose function returns while its peers wait in a collective (it skipped the last one):
// the peers fail at once naming it, not after the 60 s timeout, and receive nothing.
TEST(ThreadWorldTest, ARankThatReturnedWhilePeersWaitIsNamedAtOnce) {
  auto world = MakeWorld(3, milliseconds(60000));
  PerRank first(3);
  std::vector<std::vector<float>> out(3, std::vector<float>(4, -1.0f));
  const auto start = std::chrono::steady_clock::now();
  Status s = world->Run([&](Communicator& c) -> Status {
    if (c.rank() == 2) return Status::Ok();  // skips the all_reduce and returns
    std::vector<float> x(4, 1.0f);
    Status st = c.AllReduce(x.data(), out[static_cast<size_t>(c.rank())].data(), 4, DType::kF32, ReduceOp::kSum);
    first.Set(c.rank(), st);
    return st;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(s.ok());
  for (int r = 0; r < 2; ++r) {
    // FAILED_PRECONDITION, or ABORTED with the same cause for a rank that arrived after the break.
    const Status& f = first.statuses[static_cast<size_t>(r)];
    EXPECT_TRUE(f.code() == StatusCode::kFailedPrecondition || f.code() == StatusCode::kAborted)
        << "rank " << r << ": " << f;
    EXPECT_TRUE(Contains(f, "all_reduce on group [0,1,2] (world ranks): group rank 2 (world 2) returned from its rank "
                            "function while world ranks ["))
        << f;
    EXPECT_TRUE(Contains(f, "#0 all_reduce called at " + ThisFile() + ":")) << f;
    for (float v : out[static_cast<size_t>(r)]) EXPECT_EQ(v, -1.0f) << "rank " << r;
  }
}

// A rank that returns after the group's last collective is no error; nor is a subgroup without it.
TEST(ThreadWorldTest, ARankReturningAfterItsLastCollectiveIsFine) {
  auto world = MakeWorld(3);
  Status s = world->Run([&](Communicator& c) -> Status {
    float x = 1.0f;
    MF_RETURN_IF_ERROR(c.AllReduce(&x, &x, 1, DType::kF32, ReduceOp::kSum));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> pair, c.Split(c.rank() == 2 ? -1 : 0, c.rank()));
    if (c.rank() == 2) return Status::Ok();
    for (int i = 0; i < 20; ++i) MF_RETURN_IF_ERROR(pair->AllReduce(&x, &x, 1, DType::kF32, ReduceOp::kSum));
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ThreadWorldTest, AReorderedCollectiveNamesBothCallSites) {
  auto world = MakeWorld(2);
  PerRank first(2);
  Status s = world->Run([&](Communicator& c) -> Status {
    float x[2] = {1, 2};
    Status st = c.rank() == 0 ? c.AllReduce(x, x, 2, DType::kF32, ReduceOp::kSum) : c.Broadcast(x, 2, DType::kF32, 0);
    first.Set(c.rank(), st);
    return Status();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 2; ++r) {
    const Status& f = first.statuses[static_cast<size_t>(r)];
    EXPECT_EQ(f.code(), StatusCode::kFailedPrecondition) << f;
    EXPECT_TRUE(Contains(f, "mismatched collectives: all_reduce at group rank 0 (world 0) vs broadcast at group rank 1"))
        << f;
    EXPECT_TRUE(Contains(f, "[group rank 0 (world 0): #0 all_reduce called at " + ThisFile() + ":")) << f;
    EXPECT_TRUE(Contains(f, "group rank 1 (world 1): #0 broadcast called at " + ThisFile() + ":")) << f;
  }
}

TEST(ThreadWorldTest, CallSiteCheckCanBeTurnedOff) {
  ThreadWorldOptions opts;
  opts.check_call_sites = false;
  auto world = ThreadWorld::Create(2, opts);
  ASSERT_TRUE(world.ok()) << world.status();
  // Two different lines with the same arguments: matched (the speed option trusts the program).
  Status s = (*world)->Run([&](Communicator& c) -> Status {
    int32_t v = c.rank() + 1;
    if (c.rank() == 0) return c.AllReduce(&v, &v, 1, DType::kI32, ReduceOp::kSum);
    MF_RETURN_IF_ERROR(c.AllReduce(&v, &v, 1, DType::kI32, ReduceOp::kSum));
    return v == 3 ? Status() : InternalError("sum " + std::to_string(v));
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A gate that a rank's function blocks on (shared, so an abandoned thread never touches freed memory).
struct Gate {
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
};

TEST(ThreadWorldTest, WatchdogAbandonsARankStuckInUserCode) {
  auto world = MakeWorld(3, milliseconds(200));
  auto release = std::make_shared<Gate>();   // opened by the test once Run has returned
  auto finished = std::make_shared<Gate>();  // opened by the stuck rank when it finally returns
  auto stuck_status = std::make_shared<Status>();
  auto peers = std::make_shared<PerRank>(3);
  const auto start = std::chrono::steady_clock::now();
  Status s = world->Run([release, finished, stuck_status, peers](Communicator& c) -> Status {
    float x[2] = {1, 2};
    if (c.rank() == 1) {  // stuck outside the library, never reaching the all_reduce in time
      release->Wait();
      *stuck_status = c.AllReduce(x, x, 2, DType::kF32, ReduceOp::kSum);
      finished->Open();
      return Status();
    }
    Status st = c.AllReduce(x, x, 2, DType::kF32, ReduceOp::kSum);
    peers->Set(c.rank(), st);
    return st;
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(10));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(Contains(s, "ThreadWorld::Run: rank 1 did not return within 200 ms after the run failed")) << s;
  EXPECT_TRUE(Contains(s, "its thread is detached and abandoned, and this world is broken")) << s;
  EXPECT_TRUE(Contains(s, "first error: rank 0: DEADLINE_EXCEEDED: all_reduce on group [0,1,2]")) << s;
  for (int r : {0, 2}) {
    const Status& p = peers->statuses[static_cast<size_t>(r)];
    EXPECT_EQ(p.code(), StatusCode::kDeadlineExceeded) << p;
    EXPECT_TRUE(Contains(p, "group ranks [1] (world ranks [1]) did not arrive")) << p;
  }
  // The world is broken: later runs fail at once.
  Status later = world->Run([](Communicator& c) -> Status { return c.Barrier(); });
  EXPECT_EQ(later.code(), StatusCode::kFailedPrecondition) << later;
  EXPECT_TRUE(Contains(later, "the world is broken by an earlier Run")) << later;
  EXPECT_TRUE(Contains(later, "rank 1 did not return")) << later;
  // The abandoned thread resumes, finds its group broken and ends without touching freed memory.
  release->Open();
  finished->Wait();
  EXPECT_EQ(stuck_status->code(), StatusCode::kAborted) << *stuck_status;
  EXPECT_TRUE(Contains(*stuck_status, "broken")) << *stuck_status;
}

TEST(ThreadWorldTest, ExceptionsBecomeAStatusNamingTheRank) {
  auto world = MakeWorld(3, milliseconds(20000));
  const auto start = std::chrono::steady_clock::now();
  Status s = world->Run([](Communicator& c) -> Status {
    if (c.rank() == 2) throw std::runtime_error("kaboom");
    return c.Barrier();  // released at once by the abort, not by the timeout
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_TRUE(Contains(s, "rank 2 failed: INTERNAL: the rank's function threw an exception: kaboom")) << s;

  s = world->Run([](Communicator& c) -> Status {
    if (c.rank() == 0) throw 42;
    return Status();
  });
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_EQ(s.message(), "rank 0: the rank's function threw an exception that is not a std::exception") << s;

  // The world is not broken by exceptions.
  s = world->Run([](Communicator& c) -> Status { return c.Barrier(); });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshflow
