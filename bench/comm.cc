// comm: an nccl-tests style microbenchmark of meshflow's collectives, on the threads, MPI or NCCL
// backend.
//
//   bazel build --config=opt //bench:comm
//   bazel-bin/bench/comm --backend threads -t 4 --op all_reduce -b 8 -e 128M -f 2
//   source collectives/mpi/mpi_env.sh
//   mpirun "${MPIRUN_FLAGS[@]}" -np 4 bazel-bin/bench/comm --backend mpi --op all_gather -b 8 -e 64M -f 4
//   bazel-bin/bench/comm --op redistribute --from 'S(0)' --to 'S(1)' --mesh 4 -b 1K -e 16M -f 4
//   bazel-bin/bench/comm --backend nccl --op all_reduce -b 8 -e 256M -f 2     (needs a GPU)
//   bazel-bin/bench/comm_nccl ...   the same program without MPI (threads + nccl), for GPU machines
//                                    without an MPI installation (bench/BUILD.bazel)
//
// Options (defaults in brackets):
//   --backend threads|mpi|nccl [threads]
//                                     mpi: the binary is started by mpirun, world = MPI_COMM_WORLD;
//                                     nccl: one process drives every visible GPU (NcclWorld,
//                                     ncclCommInitAll), one rank per GPU; -t is ignored
//   --op all_gather|reduce_scatter|all_reduce|all_to_all|redistribute [all_reduce]
//   --from P --to P --mesh AxB        redistribute only: placements ("S(0)", "R", "P(sum)", one per
//                                     mesh dim, comma separated) and mesh shape [S(0) -> R on 4]
//   -b MIN -e MAX -f FACTOR           sizes in bytes, suffixes K/M/G (powers of 1024) [8, 128M, 2]
//   -n ITERS -w WARMUP                timed and warm-up iterations per size [20, 5]
//   -c 0|1                            check the result (one extra, untimed call per size) [1]
//   -t N                              ranks of the threads world [4]
//   -d f32|f64|bf16|i32|i64           element type [f32]
//   --checks full|args|none           cross-rank call checks before each collective [full]: full
//                                     compares sequence numbers, arguments and call sites; args
//                                     leaves out the call sites (ThreadWorldOptions / MpiOptions::
//                                     check_call_sites = false); none (mpi) skips the header
//                                     exchange (MpiOptions::validate = false; threads: as args, its
//                                     rendezvous always compares arguments; nccl: ignored)
//   --deterministic 0|1               mpi: rank-order reductions, bit-identical to the threads
//                                     backend (MpiOptions::deterministic) instead of MPI's own [0]
//   --csv                             CSV instead of the table
//   -h, --help                        print the options (kUsage) and exit 0
//
// Sizes follow nccl-tests: all_gather's size is its total output, reduce_scatter's its total input,
// all_reduce's and all_to_all's the buffer; counts are rounded down to a multiple of the rank count
// and the printed size is the rounded one. redistribute moves an (rows x cols) tensor of `size`
// bytes (cols = the power of two nearest below sqrt(count)).
//
// Columns: time(us) is the average over ITERS back-to-back calls, max over ranks (mpi: see below).
// algbw = size /
// time; busbw = algbw * factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all
// (n-1)/n), the per-rank link bandwidth a ring algorithm would need; redistribute's busbw is the
// plan's max bytes received per rank / time. #wrong counts elements (over all ranks) that differ
// from the exact expected result (the data are small integers, exact in every dtype and every
// reduction order). Same-run baselines: threads: memcpy of `size` bytes on one thread ("memcpy",
// GB/s) and busbw / memcpy; mpi: the op called on MPI directly (MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Allreduce, MPI_Alltoall on MPI_COMM_WORLD; not for bf16 or
// redistribute) and our overhead, (time - mpi_time) / mpi_time. For the mpi collectives both are
// measured interleaved: 5 rounds of ITERS/5 calls of ours then ITERS/5 raw calls (order alternating
// per round), each block timed between barriers, max over ranks; time and mpi time are each side's
// fastest block (the least disturbed by other load, which on a shared machine only adds time).
// Only rank 0 prints. The exit code
// is 2 on bad input (flags are checked before any run: an unknown flag or value, and for
// redistribute placements that do not fit --mesh, or a --mesh whose size is not -t), else
// non-zero on any error or any wrong element.
//
// NCCL: collectives run on device buffers with the device API (NcclCommunicator::Device*, NCCL's
// native reductions, NcclReduction::kNative) on each rank's comm stream; time(us) is cudaEvent time
// of the ITERS calls (after WARMUP calls and a barrier) / ITERS, max over ranks; the check copies the
// result back to the host. redistribute runs the plan executor on host tensors through the
// host-buffer API (staged through the GPU). Baseline: cudaMemcpyAsync device-to-device of `size`
// bytes on GPU 0 ("d2d", GB/s, cudaEvent timing) and busbw / d2d. Without a CUDA device (or in a
// build without CUDA) --backend nccl exits 1 with a message.
#if !defined(MESHFLOW_COMM_NO_MPI)
#include <mpi.h>
#endif
#if defined(MESHFLOW_COMM_WITH_NCCL)
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/cli.h"
#include "meshflow/base/parse.h"
#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#if !defined(MESHFLOW_COMM_NO_MPI)
#include "meshflow/collectives/mpi/mpi_communicator.h"
#endif
#if defined(MESHFLOW_COMM_WITH_NCCL)
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/collectives/nccl/nccl_communicator.h"
#endif
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"

namespace meshflow {
namespace {

enum class Op { kAllGather, kReduceScatter, kAllReduce, kAllToAll, kRedistribute };

struct Config {
  std::string backend = "threads";
  Op op = Op::kAllReduce;
  std::string op_name = "all_reduce";
  std::string from = "S(0)";
  std::string to = "R";
  std::string mesh = "4";
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{128} << 20;
  int64_t factor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  int threads = 4;
  DType dtype = DType::kF32;
  std::string checks = "full";
  bool deterministic = false;
  bool csv = false;
};

// One measured size (rank 0's view after the max/sum over ranks).
struct Row {
  int64_t bytes = 0;
  int64_t count = 0;
  double us = 0;
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = 0;
  double baseline = -1;  // threads: memcpy GB/s; mpi: raw MPI time (us); < 0: none
};

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

StatusOr<int64_t> ParseBytes(std::string_view s) {
  if (s.empty()) return InvalidArgumentError("empty size");
  int64_t mult = 1;
  const char last = s.back();
  if (last == 'K' || last == 'k') mult = int64_t{1} << 10;
  if (last == 'M' || last == 'm') mult = int64_t{1} << 20;
  if (last == 'G' || last == 'g') mult = int64_t{1} << 30;
  std::string digits(mult == 1 ? s : s.substr(0, s.size() - 1));
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || v < 0) return InvalidArgumentError("bad size '" + std::string(s) + "'");
  return static_cast<int64_t>(v) * mult;
}

StatusOr<int> ParseInt(std::string_view s) {
  std::string str(s);
  char* end = nullptr;
  const long v = std::strtol(str.c_str(), &end, 10);
  if (str.empty() || *end != '\0') return InvalidArgumentError("bad integer '" + str + "'");
  return static_cast<int>(v);
}

StatusOr<std::vector<int64_t>> ParseMesh(std::string_view s) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ParseIntList(s, 'x', "--mesh"));
  for (int64_t d : shape) {
    if (d < 1) return InvalidArgumentError("bad --mesh '" + std::string(s) + "': sizes must be >= 1");
  }
  return shape;
}

constexpr const char* kUsage =
    "usage: comm [--backend threads|mpi|nccl] [--op OP] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
    "            [-c 0|1] [-t N] [-d DTYPE] [--checks C] [--csv] [--from P --to P --mesh AxB]\n"
    "\n"
    "nccl-tests style tables of meshflow's collectives: time, algbw, busbw and #wrong per size.\n"
    "\n"
    "flags (defaults in brackets; each value is the next argument):\n"
    "  --backend B        one of threads, mpi, nccl [threads]; mpi: start under mpirun, world =\n"
    "                     MPI_COMM_WORLD; nccl: one rank per visible GPU, -t is ignored\n"
    "  --op OP            one of all_gather, reduce_scatter, all_reduce, all_to_all, redistribute\n"
    "                     [all_reduce]\n"
    "  --from P --to P    redistribute only: placements, one per mesh dim, comma separated, each one\n"
    "                     of S(0), S(1), R, P, P(sum|avg|max|min) [S(0) -> R]\n"
    "  --mesh AxB         redistribute only: mesh shape; its size must be the rank count [4]\n"
    "  -b MIN -e MAX      smallest and largest size in bytes, suffixes K, M, G (powers of 1024) [8, 128M]\n"
    "  -f FACTOR          size step factor, >= 2 [2]\n"
    "  -n ITERS           timed iterations per size, >= 1 [20]\n"
    "  -w WARMUP          warm-up iterations per size, >= 0 [5]\n"
    "  -c 0|1             check the result (one extra, untimed call per size) [1]\n"
    "  -t N               ranks of the threads world, >= 1 [4]\n"
    "  -d DTYPE           element type, one of f32, f64, bf16, i32, i64 [f32]\n"
    "  --checks C         cross-rank call checks, one of full (sequence, arguments, call sites), args\n"
    "                     (no call sites), none (mpi: no header exchange; threads: as args) [full]\n"
    "  --deterministic 0|1  mpi: rank-order reductions, bit-identical to the threads backend\n"
    "                     (MpiOptions::deterministic); 0: MPI's own all_reduce / reduce_scatter [0]\n"
    "  --csv              CSV instead of the table\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "exit codes: 0 success, 1 a run failed or a result was wrong, 2 bad input (message on stderr).\n";

// The redistribute flags (--mesh, --from, --to) as a layout of the benchmark's 2-D tensors.
Status CheckRedistributeFlags(const Config& c) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> mesh_shape, ParseMesh(c.mesh));
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(mesh_shape));
  StatusOr<Placements> from = ParsePlacements(c.from);
  if (!from.ok()) return from.status().WithContext("--from");
  StatusOr<Placements> to = ParsePlacements(c.to);
  if (!to.ok()) return to.status().WithContext("--to");
  if (Status s = Layout::Create({1, 1}, mesh, *from).status(); !s.ok()) return s.WithContext("--from");
  if (Status s = Layout::Create({1, 1}, mesh, *to).status(); !s.ok()) return s.WithContext("--to");
  if (c.backend == "threads" && mesh.size() != c.threads) {
    return InvalidArgumentError("--mesh " + c.mesh + " has " + std::to_string(mesh.size()) + " ranks but -t is " +
                                std::to_string(c.threads));
  }
  return Status();
}

StatusOr<Config> ParseArgs(int argc, char** argv) {
  static constexpr std::string_view kValued[] = {"--backend", "--op", "--from", "--to", "--mesh", "-b", "-e",
                                                 "-f",        "-n",   "-w",     "-c",   "-t",     "-d",   "--checks",
                                                 "--deterministic"};
  static constexpr Op kOps[] = {Op::kAllGather, Op::kReduceScatter, Op::kAllReduce, Op::kAllToAll,
                                Op::kRedistribute};
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--csv") {
      c.csv = true;
      continue;
    }
    if (std::find(std::begin(kValued), std::end(kValued), a) == std::end(kValued)) {
      return UnknownArgumentError("comm", a);
    }
    if (i + 1 >= argc) return InvalidArgumentError("option '" + std::string(a) + "' needs a value; see 'comm --help'");
    const std::string_view v = argv[++i];
    const std::string flag(a);
    if (a == "--backend") {
      MF_RETURN_IF_ERROR(ParseChoice(a, v, {"threads", "mpi", "nccl"}).status());
      c.backend = v;
    } else if (a == "--op") {
      MF_ASSIGN_OR_RETURN(
          size_t op, ParseChoice(a, v, {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "redistribute"}));
      c.op = kOps[op];
      c.op_name = v;
    } else if (a == "--from") {
      c.from = v;
    } else if (a == "--to") {
      c.to = v;
    } else if (a == "--mesh") {
      c.mesh = v;
    } else if (a == "-b" || a == "-e" || a == "-f") {
      StatusOr<int64_t> bytes = ParseBytes(v);
      if (!bytes.ok()) return bytes.status().WithContext(flag);
      (a == "-b" ? c.min_bytes : a == "-e" ? c.max_bytes : c.factor) = *bytes;
    } else if (a == "-n" || a == "-w" || a == "-t") {
      StatusOr<int> n = ParseInt(v);
      if (!n.ok()) return n.status().WithContext(flag);
      (a == "-n" ? c.iters : a == "-w" ? c.warmup : c.threads) = *n;
    } else if (a == "-c") {
      MF_ASSIGN_OR_RETURN(size_t check, ParseChoice(a, v, {"0", "1"}));
      c.check = check == 1;
    } else if (a == "--checks") {
      MF_RETURN_IF_ERROR(ParseChoice(a, v, {"full", "args", "none"}).status());
      c.checks = v;
    } else if (a == "--deterministic") {
      MF_ASSIGN_OR_RETURN(size_t on, ParseChoice(a, v, {"0", "1"}));
      c.deterministic = on == 1;
    } else {  // -d
      StatusOr<DType> dtype = ParseDType(v);
      if (!dtype.ok()) return dtype.status().WithContext(flag);
      c.dtype = *dtype;
    }
  }
  if (c.factor < 2) return InvalidArgumentError("-f must be >= 2");
  if (c.iters < 1 || c.warmup < 0) return InvalidArgumentError("-n must be >= 1 and -w >= 0");
  if (c.min_bytes > c.max_bytes) return InvalidArgumentError("-b must be <= -e");
  if (c.threads < 1) return InvalidArgumentError("-t must be >= 1");
  if (c.op == Op::kRedistribute) MF_RETURN_IF_ERROR(CheckRedistributeFlags(c));
  return c;
}

// nccl-tests type names.
const char* TypeName(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF64: return "double";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// The value rank r contributes at element j of its send buffer: a small integer (<= 16), so every
// sum over up to 15 ranks is exact even in bf16.
double Value(int r, int64_t j) { return static_cast<double>((r * 5 + j) % 17); }

// buf[i] = Value(rank, offset + i).
void Fill(DType dtype, void* buf, int64_t count, int rank, int64_t offset) {
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    for (int64_t i = 0; i < count; ++i) p[i] = FromDouble<T>(Value(rank, offset + i));
  });
}

// Elements i < count of buf whose bytes differ from expected(i) converted to the dtype.
template <typename F>
int64_t CountWrong(DType dtype, const void* buf, int64_t count, F&& expected) {
  return VisitDType(dtype, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(buf);
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) {
      const T e = FromDouble<T>(expected(i));
      if (std::memcmp(&p[i], &e, sizeof(T)) != 0) ++wrong;
    }
    return wrong;
  });
}

double BusFactor(Op op, int n) {
  switch (op) {
    case Op::kAllReduce: return 2.0 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllToAll: return static_cast<double>(n - 1) / n;
    case Op::kRedistribute: return 1.0;
  }
  return 1.0;
}

#if !defined(MESHFLOW_COMM_NO_MPI)
StatusOr<MPI_Datatype> MpiType(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kBF16: break;
  }
  return UnimplementedError("no MPI type for bf16");
}

Status MpiCheck(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return InternalError(std::string(what) + ": " + std::string(msg, static_cast<size_t>(len)));
}
#endif

// The benchmark body every rank runs. Fills `rows` on rank 0.
class Bench {
 public:
  Bench(const Config& config, Communicator& comm) : c_(config), comm_(comm), n_(comm.size()) {
#if defined(MESHFLOW_COMM_WITH_NCCL)
    if (c_.backend == "nccl") nccl_ = dynamic_cast<NcclCommunicator*>(&comm);
#endif
  }

  Status Run(std::vector<Row>& rows) {
    for (int64_t req = c_.min_bytes; req <= c_.max_bytes; req *= c_.factor) {
      Row row;
      MF_RETURN_IF_ERROR(c_.op == Op::kRedistribute ? MeasureRedistribute(req, row) : MeasureCollective(req, row));
      if (comm_.rank() == 0) rows.push_back(row);
      if (req > c_.max_bytes / c_.factor) break;  // no overflow
    }
    return Status();
  }

 private:
  // Max over ranks of a per-rank value.
  StatusOr<double> MaxOverRanks(double v) {
    MF_RETURN_IF_ERROR(comm_.AllReduce(&v, &v, 1, DType::kF64, ReduceOp::kMax));
    return v;
  }
  StatusOr<int64_t> SumOverRanks(int64_t v) {
    MF_RETURN_IF_ERROR(comm_.AllReduce(&v, &v, 1, DType::kI64, ReduceOp::kSum));
    return v;
  }

  Status Call(const void* send, void* recv, int64_t pc, int64_t count) {
    switch (c_.op) {
      case Op::kAllGather: return comm_.AllGather(send, recv, pc, c_.dtype);
      case Op::kReduceScatter: return comm_.ReduceScatter(send, recv, pc, c_.dtype, ReduceOp::kSum);
      case Op::kAllReduce: return comm_.AllReduce(send, recv, count, c_.dtype, ReduceOp::kSum);
      case Op::kAllToAll: return comm_.AllToAll(send, recv, pc, c_.dtype);
      case Op::kRedistribute: break;
    }
    return InternalError("not a collective");
  }

#if defined(MESHFLOW_COMM_WITH_NCCL)
  // The op on device buffers, enqueued on the rank's comm stream.
  Status DeviceCall(const void* send, void* recv, int64_t pc, int64_t count) {
    switch (c_.op) {
      case Op::kAllGather: return nccl_->DeviceAllGather(send, recv, pc, c_.dtype, nccl_->stream());
      case Op::kReduceScatter:
        return nccl_->DeviceReduceScatter(send, recv, pc, c_.dtype, ReduceOp::kSum, nccl_->stream());
      case Op::kAllReduce: return nccl_->DeviceAllReduce(send, recv, count, c_.dtype, ReduceOp::kSum, nccl_->stream());
      case Op::kAllToAll: return nccl_->DeviceAllToAll(send, recv, pc, c_.dtype, nccl_->stream());
      case Op::kRedistribute: break;
    }
    return InternalError("not a collective");
  }

  // Device buffers of one size (freed on destruction).
  struct DeviceBuffers {
    void* send = nullptr;
    void* recv = nullptr;
    DeviceBuffers() = default;
    DeviceBuffers(const DeviceBuffers&) = delete;
    DeviceBuffers& operator=(const DeviceBuffers&) = delete;
    ~DeviceBuffers() {
      if (send != nullptr) cudaFree(send);
      if (recv != nullptr) cudaFree(recv);
    }
  };
#endif

  // Runs the op once (the check). nccl: copies send to the device, calls the device op, copies
  // recv back.
  Status CheckCall(std::vector<std::byte>& send, std::vector<std::byte>& recv, int64_t pc, int64_t count) {
#if defined(MESHFLOW_COMM_WITH_NCCL)
    if (nccl_ != nullptr) {
      MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpy(dev_->send, send.data(), send.size(), cudaMemcpyHostToDevice),
                                   "cudaMemcpy", "comm check"));
      MF_RETURN_IF_ERROR(DeviceCall(dev_->send, dev_->recv, pc, count));
      MF_RETURN_IF_ERROR(nccl_->Synchronize(nccl_->stream(), "comm check"));
      return CheckCuda(cudaMemcpy(recv.data(), dev_->recv, recv.size(), cudaMemcpyDeviceToHost), "cudaMemcpy",
                       "comm check");
    }
#endif
    return Call(send.data(), recv.data(), pc, count);
  }

  // This rank's average seconds per call: WARMUP calls, a barrier, then ITERS timed calls.
  StatusOr<double> TimeCalls(std::vector<std::byte>& send, std::vector<std::byte>& recv, int64_t pc, int64_t count) {
#if defined(MESHFLOW_COMM_WITH_NCCL)
    if (nccl_ != nullptr) {
      const cudaStream_t stream = nccl_->stream();
      for (int i = 0; i < c_.warmup; ++i) MF_RETURN_IF_ERROR(DeviceCall(dev_->send, dev_->recv, pc, count));
      MF_RETURN_IF_ERROR(nccl_->Synchronize(stream, "comm warm-up"));
      MF_RETURN_IF_ERROR(comm_.Barrier());
      cudaEvent_t start = nullptr, stop = nullptr;
      MF_RETURN_IF_ERROR(CheckCuda(cudaEventCreate(&start), "cudaEventCreate", "comm"));
      MF_RETURN_IF_ERROR(CheckCuda(cudaEventCreate(&stop), "cudaEventCreate", "comm"));
      MF_RETURN_IF_ERROR(CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord", "comm"));
      for (int i = 0; i < c_.iters; ++i) MF_RETURN_IF_ERROR(DeviceCall(dev_->send, dev_->recv, pc, count));
      MF_RETURN_IF_ERROR(CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord", "comm"));
      MF_RETURN_IF_ERROR(nccl_->Synchronize(stream, "comm timed calls"));
      float ms = 0;
      MF_RETURN_IF_ERROR(CheckCuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", "comm"));
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      return static_cast<double>(ms) / 1e3 / c_.iters;
    }
#endif
    for (int i = 0; i < c_.warmup; ++i) MF_RETURN_IF_ERROR(Call(send.data(), recv.data(), pc, count));
    MF_RETURN_IF_ERROR(comm_.Barrier());
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < c_.iters; ++i) MF_RETURN_IF_ERROR(Call(send.data(), recv.data(), pc, count));
    auto t1 = std::chrono::steady_clock::now();
    return Seconds(t0, t1) / c_.iters;
  }

#if !defined(MESHFLOW_COMM_NO_MPI)
  Status RawMpiCall(const void* send, void* recv, int64_t pc, int64_t count, MPI_Datatype t) {
    const int ipc = static_cast<int>(pc);
    switch (c_.op) {
      case Op::kAllGather:
        return MpiCheck(MPI_Allgather(send, ipc, t, recv, ipc, t, MPI_COMM_WORLD), "MPI_Allgather");
      case Op::kReduceScatter:
        return MpiCheck(MPI_Reduce_scatter_block(send, recv, ipc, t, MPI_SUM, MPI_COMM_WORLD),
                        "MPI_Reduce_scatter_block");
      case Op::kAllReduce:
        return MpiCheck(MPI_Allreduce(send, recv, static_cast<int>(count), t, MPI_SUM, MPI_COMM_WORLD),
                        "MPI_Allreduce");
      case Op::kAllToAll:
        return MpiCheck(MPI_Alltoall(send, ipc, t, recv, ipc, t, MPI_COMM_WORLD), "MPI_Alltoall");
      case Op::kRedistribute: break;
    }
    return InternalError("not a collective");
  }
#endif

  Status MeasureCollective(int64_t req, Row& row) {
    const int64_t es = DTypeSize(c_.dtype);
    const int me = comm_.rank();
    // pc: elements per rank block; count: all_reduce's buffer.
    const int64_t pc = req / es / n_;
    const int64_t count = c_.op == Op::kAllReduce ? req / es : pc * n_;
    const int64_t send_count = c_.op == Op::kAllGather ? pc : count;
    const int64_t recv_count = c_.op == Op::kReduceScatter ? pc : count;
    std::vector<std::byte> send(static_cast<size_t>(std::max<int64_t>(send_count, 1) * es));
    std::vector<std::byte> recv(static_cast<size_t>(std::max<int64_t>(recv_count, 1) * es));
    row.bytes = count * es;
    row.count = count;
#if defined(MESHFLOW_COMM_WITH_NCCL)
    DeviceBuffers dev;
    if (nccl_ != nullptr) {
      MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&dev.send, send.size()), "cudaMalloc", "comm send buffer"));
      MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&dev.recv, recv.size()), "cudaMalloc", "comm recv buffer"));
      MF_RETURN_IF_ERROR(CheckCuda(cudaMemset(dev.send, 0, send.size()), "cudaMemset", "comm send buffer"));
      dev_ = &dev;
    }
#endif

    // Check (untimed): fill, call once, compare with the exact result.
    int64_t wrong = 0;
    if (c_.check) {
      Fill(c_.dtype, send.data(), send_count, me, 0);
      MF_RETURN_IF_ERROR(CheckCall(send, recv, pc, count));
      switch (c_.op) {
        case Op::kAllGather:
          wrong = CountWrong(c_.dtype, recv.data(), recv_count, [&](int64_t i) {
            const int64_t r = i / std::max<int64_t>(pc, 1);
            return Value(static_cast<int>(r), i % std::max<int64_t>(pc, 1));
          });
          break;
        case Op::kReduceScatter:
          wrong = CountWrong(c_.dtype, recv.data(), recv_count, [&](int64_t i) {
            double s = 0;
            for (int r = 0; r < n_; ++r) s += Value(r, me * pc + i);
            return s;
          });
          break;
        case Op::kAllReduce:
          wrong = CountWrong(c_.dtype, recv.data(), recv_count, [&](int64_t i) {
            double s = 0;
            for (int r = 0; r < n_; ++r) s += Value(r, i);
            return s;
          });
          break;
        case Op::kAllToAll:
          wrong = CountWrong(c_.dtype, recv.data(), recv_count, [&](int64_t i) {
            const int64_t s = i / std::max<int64_t>(pc, 1);
            return Value(static_cast<int>(s), me * pc + i % std::max<int64_t>(pc, 1));
          });
          break;
        case Op::kRedistribute: break;
      }
    }
    MF_ASSIGN_OR_RETURN(row.wrong, SumOverRanks(wrong));

#if !defined(MESHFLOW_COMM_NO_MPI)
    // mpi: ours and raw MPI interleaved (see the file comment), so both see the same machine load.
    if (c_.backend == "mpi") {
      StatusOr<MPI_Datatype> t = MpiType(c_.dtype);
      if (t.ok() && count <= INT32_MAX) {
        MF_RETURN_IF_ERROR(TimeInterleaved(send, recv, pc, count, *t, row));
        return Status();
      }
    }
#endif
    // Timed: warm-up, then ITERS back-to-back calls between a barrier and the clock.
    MF_ASSIGN_OR_RETURN(double mine, TimeCalls(send, recv, pc, count));
    MF_ASSIGN_OR_RETURN(double seconds, MaxOverRanks(mine));
    SetTime(seconds, row);
    return Status();
  }

  void SetTime(double seconds, Row& row) const {
    row.us = seconds * 1e6;
    row.algbw = seconds > 0 ? static_cast<double>(row.bytes) / seconds / 1e9 : 0;
    row.busbw = row.algbw * BusFactor(c_.op, n_);
  }

#if !defined(MESHFLOW_COMM_NO_MPI)
  // ROUNDS rounds; each times a block of ITERS/ROUNDS calls of ours and one of raw MPI (alternating
  // which goes first), every block between a barrier and the clock, max over ranks. Each side's
  // time is its fastest block: other processes on the machine only ever add time, so the minimum
  // is the least disturbed estimate, and both sides get the same number of chances.
  Status TimeInterleaved(std::vector<std::byte>& send, std::vector<std::byte>& recv, int64_t pc, int64_t count,
                         MPI_Datatype t, Row& row) {
    for (int i = 0; i < c_.warmup; ++i) {
      MF_RETURN_IF_ERROR(Call(send.data(), recv.data(), pc, count));
      MF_RETURN_IF_ERROR(RawMpiCall(send.data(), recv.data(), pc, count, t));
    }
    const int rounds = std::min(c_.iters, kRounds);
    const int per_round = std::max(1, c_.iters / rounds);
    double best_ours = 0, best_raw = 0;
    for (int r = 0; r < rounds; ++r) {
      for (int side = 0; side < 2; ++side) {
        const bool ours = (side == 0) == (r % 2 == 0);
        MF_RETURN_IF_ERROR(MpiCheck(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"));
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < per_round; ++i) {
          MF_RETURN_IF_ERROR(ours ? Call(send.data(), recv.data(), pc, count)
                                  : RawMpiCall(send.data(), recv.data(), pc, count, t));
        }
        double sec = Seconds(t0, std::chrono::steady_clock::now()) / per_round;
        MF_RETURN_IF_ERROR(
            MpiCheck(MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce"));
        double& best = ours ? best_ours : best_raw;
        if (r == 0 || sec < best) best = sec;
      }
    }
    SetTime(best_ours, row);
    row.baseline = best_raw * 1e6;
    return Status();
  }
  static constexpr int kRounds = 5;
#endif

  Status MeasureRedistribute(int64_t req, Row& row) {
    const int64_t es = DTypeSize(c_.dtype);
    MF_ASSIGN_OR_RETURN(std::vector<int64_t> mesh_shape, ParseMesh(c_.mesh));
    MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(mesh_shape));
    MF_ASSIGN_OR_RETURN(Placements from_p, ParsePlacements(c_.from));
    MF_ASSIGN_OR_RETURN(Placements to_p, ParsePlacements(c_.to));
    int64_t count = std::max<int64_t>(req / es, 1);
    int64_t cols = 1;
    while ((cols * 2) * (cols * 2) <= count) cols *= 2;
    const int64_t rows_n = count / cols;
    count = rows_n * cols;
    row.bytes = count * es;
    row.count = count;
    MF_ASSIGN_OR_RETURN(Layout from, Layout::Create({rows_n, cols}, mesh, from_p));
    MF_ASSIGN_OR_RETURN(Layout to, Layout::Create({rows_n, cols}, mesh, to_p));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, c_.dtype));
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm_, mesh));
    Tensor global = Tensor::Zeros(c_.dtype, {rows_n, cols});
    Fill(c_.dtype, global.raw(), count, 0, 0);
    const int rank = comm_.world_rank();
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, rank));

    int64_t wrong = 0;
    if (c_.check) {
      MF_ASSIGN_OR_RETURN(Tensor expected, ReferenceLocal(global, to, rank));
      Tensor local = x.local();
      MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, local));
      if (local.shape() != expected.shape()) {
        wrong = std::max(local.NumElements(), expected.NumElements());
      } else {
        const std::byte* e = expected.raw();
        wrong = CountWrong(c_.dtype, local.raw(), local.NumElements(), [&](int64_t i) {
          // Decode the expected element back to double (exact: small integers).
          return VisitDType(c_.dtype, [&](auto tag) -> double {
            using T = decltype(tag);
            T v;
            std::memcpy(&v, e + i * es, sizeof(T));
            return static_cast<double>(static_cast<float>(v));
          });
        });
      }
    }
    MF_ASSIGN_OR_RETURN(row.wrong, SumOverRanks(wrong));

    // Each call needs a fresh copy of the source shard; the copy is not timed.
    double seconds = 0;
    for (int i = 0; i < c_.warmup + c_.iters; ++i) {
      Tensor local = x.local();
      MF_RETURN_IF_ERROR(comm_.Barrier());
      const auto t0 = std::chrono::steady_clock::now();
      MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, local));
      if (i >= c_.warmup) seconds += Seconds(t0, std::chrono::steady_clock::now());
    }
    MF_ASSIGN_OR_RETURN(seconds, MaxOverRanks(seconds / c_.iters));
    row.us = seconds * 1e6;
    row.algbw = seconds > 0 ? static_cast<double>(row.bytes) / seconds / 1e9 : 0;
    row.busbw = seconds > 0 ? static_cast<double>(plan->max_bytes_received_per_rank) / seconds / 1e9 : 0;
    return Status();
  }

  const Config& c_;
  Communicator& comm_;
  int n_;
#if defined(MESHFLOW_COMM_WITH_NCCL)
  NcclCommunicator* nccl_ = nullptr;
  DeviceBuffers* dev_ = nullptr;  // of the size being measured
#endif
};

// Single-thread memcpy of `bytes`, GB/s (average over the copies).
double MemcpyGBps(int64_t bytes, int iters) {
  if (bytes == 0) return 0;
  std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes));
  std::memcpy(dst.data(), src.data(), src.size());  // fault the pages in
  // At least `iters` copies, repeated with 4x more until one batch takes >= 2 ms (tiny sizes are
  // not timer-bound); the clock is read once per batch.
  int64_t reps = iters;
  double s = 0;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < reps; ++i) {
      src[static_cast<size_t>(i) % src.size()] = static_cast<char>(i);
      std::memcpy(dst.data(), src.data(), src.size());
      asm volatile("" : : "r"(dst.data()) : "memory");  // keep every copy (like ClobberMemory)
    }
    const double elapsed = Seconds(t0, std::chrono::steady_clock::now());
    s = elapsed / static_cast<double>(reps);
    if (elapsed >= 2e-3 || reps > (int64_t{1} << 30)) break;
    reps *= 4;
  }
  volatile char sink = dst[dst.size() / 2];
  (void)sink;
  return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
}

void Print(const Config& c, int nranks, const std::vector<Row>& rows) {
  // threads and nccl print a copy-bandwidth baseline (memcpy / device-to-device), mpi raw MPI times.
  const bool threads = c.backend != "mpi";
  const bool nccl = c.backend == "nccl";
  const char* redop = (c.op == Op::kAllReduce || c.op == Op::kReduceScatter) ? "sum" : "none";
  if (c.csv) {
    std::printf("size,count,type,redop,time_us,algbw_GBps,busbw_GBps,wrong,%s\n",
                nccl      ? "d2d_GBps,busbw_over_d2d"
                : threads ? "memcpy_GBps,busbw_over_memcpy"
                          : "mpi_time_us,mpi_busbw_GBps,overhead_pct");
    for (const Row& r : rows) {
      std::printf("%lld,%lld,%s,%s,%.2f,%.3f,%.3f,%lld,", static_cast<long long>(r.bytes),
                  static_cast<long long>(r.count), TypeName(c.dtype), redop, r.us, r.algbw, r.busbw,
                  static_cast<long long>(r.wrong));
      if (r.baseline < 0 || (!threads && r.bytes == 0)) {
        std::printf(",\n");
      } else if (threads) {
        std::printf("%.3f,%.3f\n", r.baseline, r.baseline > 0 ? r.busbw / r.baseline : 0.0);
      } else {
        const double f = BusFactor(c.op, nranks);
        const double mbus = r.baseline > 0 ? static_cast<double>(r.bytes) / r.baseline / 1e3 * f : 0;
        std::printf("%.2f,%.3f,%.1f\n", r.baseline, mbus, r.baseline > 0 ? (r.us - r.baseline) / r.baseline * 100 : 0.0);
      }
    }
    return;
  }
  std::printf("# meshflow comm: backend %s  op %s  nranks %d  minBytes %lld maxBytes %lld step: %lld(factor) "
              "warmup iters: %d iters: %d validation: %d  dtype %s\n",
              c.backend.c_str(), c.op_name.c_str(), nranks, static_cast<long long>(c.min_bytes),
              static_cast<long long>(c.max_bytes), static_cast<long long>(c.factor), c.warmup, c.iters,
              c.check ? 1 : 0, TypeName(c.dtype));
  if (c.op == Op::kRedistribute) {
    std::printf("# redistribute %s -> %s on mesh %s (busbw = plan's max bytes received per rank / time)\n",
                c.from.c_str(), c.to.c_str(), c.mesh.c_str());
  }
  std::printf("#\n");
  if (threads) {
    std::printf("# %10s %12s %8s %6s %10s %8s %8s %6s %8s %7s\n", "size", "count", "type", "redop", "time",
                "algbw", "busbw", "#wrong", nccl ? "d2d" : "memcpy", nccl ? "bus/d2d" : "bus/mem");
    std::printf("# %10s %12s %8s %6s %10s %8s %8s %6s %8s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
                "(GB/s)", "", "(GB/s)", "");
  } else {
    std::printf("# %10s %12s %8s %6s %10s %8s %8s %6s %10s %8s %7s\n", "size", "count", "type", "redop", "time",
                "algbw", "busbw", "#wrong", "mpi time", "mpi bus", "ovh");
    std::printf("# %10s %12s %8s %6s %10s %8s %8s %6s %10s %8s %7s\n", "(B)", "(elements)", "", "", "(us)",
                "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(%)");
  }
  double sum_bus = 0;
  int64_t total_wrong = 0;
  for (const Row& r : rows) {
    std::printf("  %10lld %12lld %8s %6s %10.2f %8.3f %8.3f %6lld", static_cast<long long>(r.bytes),
                static_cast<long long>(r.count), TypeName(c.dtype), redop, r.us, r.algbw, r.busbw,
                static_cast<long long>(r.wrong));
    if (r.baseline < 0 || (!threads && r.bytes == 0)) {
      std::printf(threads ? " %8s %7s\n" : " %10s %8s %7s\n", "-", "-", "-");
    } else if (threads) {
      std::printf(" %8.3f %7.3f\n", r.baseline, r.baseline > 0 ? r.busbw / r.baseline : 0.0);
    } else {
      const double f = BusFactor(c.op, nranks);
      const double mbus = r.baseline > 0 ? static_cast<double>(r.bytes) / r.baseline / 1e3 * f : 0;
      std::printf(" %10.2f %8.3f %+7.1f\n", r.baseline, mbus,
                  r.baseline > 0 ? (r.us - r.baseline) / r.baseline * 100 : 0.0);
    }
    sum_bus += r.busbw;
    total_wrong += r.wrong;
  }
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong), total_wrong == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g \n", rows.empty() ? 0.0 : sum_bus / static_cast<double>(rows.size()));
  std::printf("#\n");
}

int64_t TotalWrong(const std::vector<Row>& rows) {
  int64_t w = 0;
  for (const Row& r : rows) w += r.wrong;
  return w;
}

int RunThreads(const Config& c) {
  ThreadWorldOptions opts;
  opts.check_call_sites = c.checks == "full";
  auto world = ThreadWorld::Create(c.threads, opts);
  if (!world.ok()) {
    std::fprintf(stderr, "comm: %s\n", world.status().ToString().c_str());
    return 2;
  }
  std::vector<Row> rows;
  Status s = (*world)->Run([&](Communicator& comm) -> Status {
    Bench bench(c, comm);
    return bench.Run(rows);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "comm: %s\n", s.ToString().c_str());
    return 1;
  }
  for (Row& r : rows) r.baseline = MemcpyGBps(r.bytes, c.iters);
  Print(c, c.threads, rows);
  std::fflush(stdout);
  return TotalWrong(rows) == 0 ? 0 : 1;
}

#if defined(MESHFLOW_COMM_WITH_NCCL)
// cudaMemcpyAsync device-to-device of `bytes` on GPU 0, GB/s (cudaEvent timing, average of iters).
StatusOr<double> DeviceCopyGBps(int64_t bytes, int iters) {
  if (bytes == 0) return 0.0;
  MF_RETURN_IF_ERROR(CheckCuda(cudaSetDevice(0), "cudaSetDevice", "d2d baseline"));
  void *src = nullptr, *dst = nullptr;
  MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&src, static_cast<size_t>(bytes)), "cudaMalloc", "d2d baseline"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&dst, static_cast<size_t>(bytes)), "cudaMalloc", "d2d baseline"));
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  MF_RETURN_IF_ERROR(CheckCuda(cudaStreamCreate(&stream), "cudaStreamCreate", "d2d baseline"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventCreate(&start), "cudaEventCreate", "d2d baseline"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventCreate(&stop), "cudaEventCreate", "d2d baseline"));
  const size_t n = static_cast<size_t>(bytes);
  MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync", "d2d"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord", "d2d baseline"));
  for (int i = 0; i < iters; ++i) {
    MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync", "d2d"));
  }
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord", "d2d baseline"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventSynchronize(stop), "cudaEventSynchronize", "d2d baseline"));
  float ms = 0;
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", "d2d baseline"));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(src);
  cudaFree(dst);
  const double s = static_cast<double>(ms) / 1e3 / iters;
  return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0.0;
}

int RunNccl(const Config& c) {
  NcclOptions opts;
  opts.reduction = NcclReduction::kNative;
  auto world = NcclWorld::Create({}, opts);
  if (!world.ok()) {
    std::fprintf(stderr, "comm: --backend nccl: %s\n", world.status().ToString().c_str());
    return 1;
  }
  std::vector<Row> rows;
  Status s = (*world)->Run([&](NcclCommunicator& comm) -> Status {
    Bench bench(c, comm);
    return bench.Run(rows);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "comm: %s\n", s.ToString().c_str());
    return 1;
  }
  for (Row& r : rows) {
    auto gbps = DeviceCopyGBps(r.bytes, c.iters);
    if (!gbps.ok()) {
      std::fprintf(stderr, "comm: %s\n", gbps.status().ToString().c_str());
      return 1;
    }
    r.baseline = *gbps;
  }
  Print(c, (*world)->size(), rows);
  std::fflush(stdout);
  return TotalWrong(rows) == 0 ? 0 : 1;
}
#else
int RunNccl(const Config&) {
  std::fprintf(stderr, "comm: --backend nccl: this binary was built without CUDA (@local_cuda found no toolkit)\n");
  return 1;
}
#endif

#if defined(MESHFLOW_COMM_NO_MPI)
int RunMpi(const Config&) {
  std::fprintf(stderr, "comm: --backend mpi: this binary was built without MPI (use //bench:comm)\n");
  return 1;
}
#else
int RunMpi(const Config& c) {
  MpiFinalizeGuard finalize;
  MpiOptions opts;
  opts.validate = c.checks != "none";
  opts.check_call_sites = c.checks == "full";
  opts.deterministic = c.deterministic;
  auto world = MpiWorld(opts);
  if (!world.ok()) MpiAbort(world.status());
  std::vector<Row> rows;
  Bench bench(c, **world);
  Status s = bench.Run(rows);
  if (!s.ok()) MpiAbort(s);
  if ((*world)->rank() == 0) {
    Print(c, (*world)->size(), rows);
    std::fflush(stdout);
  }
  // Only rank 0 holds the rows (#wrong already summed over ranks): broadcast the verdict so that
  // every process exits with the same code.
  int64_t wrong = (*world)->rank() == 0 ? TotalWrong(rows) : 0;
  s = (*world)->Broadcast(&wrong, 1, DType::kI64, 0);
  if (!s.ok()) MpiAbort(s);
  return wrong == 0 ? 0 : 1;
}
#endif

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) {
  if (meshflow::HasHelpFlag(argc, argv)) {
    std::fputs(meshflow::kUsage, stdout);
    return 0;
  }
  auto config = meshflow::ParseArgs(argc, argv);
  if (!config.ok()) {
    std::fprintf(stderr, "comm: %s\n", config.status().ToString().c_str());
    return 2;
  }
  if (config->backend == "nccl") return meshflow::RunNccl(*config);
  return config->backend == "mpi" ? meshflow::RunMpi(*config) : meshflow::RunThreads(*config);
}
