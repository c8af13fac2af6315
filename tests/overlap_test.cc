// Overlap of communication with compute on the threads world (issue 34): FSDP prefetch
// (nn/fsdp_prefetch.h) and bucketed gradient reduction during Backward (optim/grad_reducer.h).
//
// The model is a chain of blocks y = tanh(x * w_i) (w_i a [dim] weight broadcast over the rows)
// between a prologue and an epilogue (the embeddings and the head of a language model). Their
// compute time is made long and fixed by a sleep in each block's forward and (through a
// pre-backward hook) its backward, and in the prologue and epilogue, so the share of
// communication that compute hides can be measured from the streams' timelines: the communication
// stream records every collective it ran, the compute stream (the rank's thread) every time it was
// blocked on communication. Every overlapped run is also compared bit for bit with the serial run
// (same losses, same parameters after the optimizer steps).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/nn/fsdp_blocks.h"
#include "meshflow/nn/module.h"
#include "meshflow/optim/grad_reducer.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

constexpr int kRanks = 4;
constexpr int kSteps = 2;

// One block: a weight and the artificial compute time of its forward and backward.
class Block : public nn::Module {
 public:
  static StatusOr<std::unique_ptr<Block>> Create(int64_t dim, uint64_t seed, const RankContext& ctx) {
    std::unique_ptr<Block> b(new Block);
    MF_ASSIGN_OR_RETURN(b->w_, nn::MakeParameter({dim}, DType::kF32, seed, 1.0, 0, ctx));
    b->RegisterParameter("w", &b->w_);
    return b;
  }
  std::string_view type_name() const override { return "Block"; }
  Variable& w() { return w_; }

 private:
  Block() = default;
  Variable w_;
};

struct Timings {
  double comm_us = 0;       // communication stream time of the labelled work
  double exposed_us = 0;    // compute stream time blocked on communication
  std::vector<double> item_us;  // every communication work item of the last step
};

double Sum(const std::vector<StreamRecord>& records, const std::string& label_prefix) {
  double us = 0;
  for (const StreamRecord& r : records) {
    if (std::string(r.label).rfind(label_prefix, 0) == 0) {
      us += std::chrono::duration<double, std::micro>(r.end - r.start).count();
    }
  }
  return us;
}

struct RunOptions {
  bool fsdp = false;      // weights Shard(0) over the mesh; else replicated (DDP)
  bool overlap = false;   // prefetch (fsdp) or bucketed reduction (ddp)
  int blocks = 8;
  int64_t dim = 1 << 16;  // 256 KiB per weight
  int64_t batch = 2;      // rows per rank
  int compute_ms = 12;    // artificial compute per block, forward and backward
};

struct RankResult {
  std::vector<float> losses;
  std::vector<Tensor> params;  // full weights after the steps
  Timings fwd_bwd;             // of the last step
  PrefetchStats prefetch;
};

// One rank's training run.
StatusOr<RankResult> RunRank(Communicator& comm, const RunOptions& o) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({kRanks}, {"dp"}));
  MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
  std::vector<std::unique_ptr<Block>> blocks;
  for (int i = 0; i < o.blocks; ++i) {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Block> b, Block::Create(o.dim, 100 + i, ctx));
    if (o.fsdp) {
      MF_ASSIGN_OR_RETURN(Layout sharded, Layout::Create({o.dim}, mesh, {Shard{0}}));
      MF_ASSIGN_OR_RETURN(DTensor w, Redistribute(b->w().value(), sharded, ctx));
      *b->w().mutable_leaf_value() = std::move(w);
    }
    blocks.push_back(std::move(b));
  }
  std::vector<nn::Module*> mods;
  std::vector<Variable*> params;
  std::vector<ParamSpec> specs;
  for (auto& b : blocks) {
    mods.push_back(b.get());
    params.push_back(&b->w());
    specs.push_back(ParamSpec{"w" + std::to_string(params.size()), b->w().mutable_leaf_value(), std::nullopt});
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(specs, AdamWOptions{.lr = 1e-2}, ctx));
  std::unique_ptr<nn::FsdpBlocks> fsdp;
  std::unique_ptr<GradReducer> reducer;
  if (o.fsdp) {
    MF_ASSIGN_OR_RETURN(fsdp, nn::FsdpBlocks::Create(mods, {0}, {.prefetch = o.overlap}, ctx));
  }
  if (o.overlap && !o.fsdp) {
    int64_t one_block = o.dim * 4;
    MF_ASSIGN_OR_RETURN(reducer, GradReducer::Create(params, *opt, GradReducerOptions{.bucket_bytes = one_block}, ctx));
  }
  MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({o.batch * kRanks, o.dim}, mesh, {Shard{0}}));
  const auto compute = [&o]() -> Status {
    std::this_thread::sleep_for(std::chrono::milliseconds(o.compute_ms));
    return Status::Ok();
  };
  RankResult out;
  for (int step = 0; step < kSteps; ++step) {
    Tensor xg = Tensor::Zeros(DType::kF32, {o.batch * kRanks, o.dim});
    for (int64_t i = 0; i < xg.NumElements(); ++i) xg.SetFromDouble(i, static_cast<double>((i * 37 + step * 11) % 97) / 97.0 - 0.5);
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(xg, xl, ctx.world_rank()));
    MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(std::move(xd), false));
    const bool last = step == kSteps - 1;
    ctx.comm_stream().set_record_timeline(last);
    ctx.compute_stream().set_record_timeline(last);
    if (fsdp) MF_RETURN_IF_ERROR(fsdp->BeginForward(ctx));
    MF_RETURN_IF_ERROR(compute());  // the prologue
    for (int i = 0; i < o.blocks; ++i) {
      if (fsdp) MF_RETURN_IF_ERROR(fsdp->BeforeBlock(i, ctx));
      MF_ASSIGN_OR_RETURN(Variable h, autograd::Mul(x, blocks[static_cast<size_t>(i)]->w(), ctx));
      MF_ASSIGN_OR_RETURN(x, autograd::Tanh(h, ctx));
      MF_RETURN_IF_ERROR(compute());  // the block's forward compute
      if (fsdp) MF_RETURN_IF_ERROR(fsdp->AfterBlock(i, x, ctx));
      MF_RETURN_IF_ERROR(x.AddPreBackwardHook(compute));  // the block's backward compute
    }
    MF_RETURN_IF_ERROR(compute());  // the epilogue
    MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(x, {}, false, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    if (reducer) MF_RETURN_IF_ERROR(reducer->Finish(ctx));
    if (fsdp) MF_RETURN_IF_ERROR(fsdp->Finish(ctx));
    if (last) {
      const std::vector<StreamRecord> comm_t = ctx.comm_stream().TakeTimeline();
      const std::vector<StreamRecord> compute_t = ctx.compute_stream().TakeTimeline();
      // The overlapped communication, and the time the rank's thread was blocked on communication
      // beyond the synchronous collectives' own run time (those run on the rank's thread either way).
      const char* async_label = o.fsdp ? "prefetch" : "bucket";
      out.fwd_bwd.comm_us = o.overlap ? Sum(comm_t, async_label) : Sum(comm_t, "");
      const double sync_us = Sum(comm_t, "") - Sum(comm_t, async_label);
      out.fwd_bwd.exposed_us = std::max(0.0, Sum(compute_t, "") - (o.overlap ? sync_us : 0.0));
      for (const StreamRecord& r : comm_t) {
        out.fwd_bwd.item_us.push_back(std::chrono::duration<double, std::micro>(r.end - r.start).count());
      }
    }
    MF_ASSIGN_OR_RETURN(Tensor l, FullTensor(loss.value(), ctx));
    out.losses.push_back(l.data<float>()[0]);
    std::vector<const DTensor*> grads;
    for (Variable* p : params) grads.push_back(p->grad() ? &*p->grad() : nullptr);
    MF_RETURN_IF_ERROR(opt->Step(grads, ctx));
    for (Variable* p : params) p->ZeroGrad();
    if (last) {  // the optimizer's collectives too (the serial path's reductions)
      for (const StreamRecord& r : ctx.comm_stream().TakeTimeline()) {
        out.fwd_bwd.item_us.push_back(std::chrono::duration<double, std::micro>(r.end - r.start).count());
      }
      ctx.comm_stream().set_record_timeline(false);
      ctx.compute_stream().set_record_timeline(false);
    }
  }
  for (Variable* p : params) {
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(p->value(), ctx));
    out.params.push_back(std::move(full));
  }
  out.prefetch = ctx.prefetches().stats();
  return out;
}

std::vector<RankResult> RunWorld(const RunOptions& o) {
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(kRanks).value());
  std::vector<RankResult> results(kRanks);
  std::mutex mu;
  const Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankResult r, RunRank(comm, o));
    std::lock_guard<std::mutex> lock(mu);
    results[static_cast<size_t>(comm.world_rank())] = std::move(r);
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s;
  return results;
}

void ExpectSameTraining(const std::vector<RankResult>& serial, const std::vector<RankResult>& overlapped) {
  for (int r = 0; r < kRanks; ++r) {
    const RankResult& a = serial[static_cast<size_t>(r)];
    const RankResult& b = overlapped[static_cast<size_t>(r)];
    ASSERT_EQ(a.losses.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(a.losses, b.losses) << "rank " << r;  // bitwise
    ASSERT_EQ(a.params.size(), b.params.size());
    for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(a.params[i] == b.params[i]) << "rank " << r << " w" << i;
  }
}

// The worst rank's hidden share of the overlapped communication: 1 - blocked / communication.
double WorstHidden(const std::vector<RankResult>& results, std::string* detail) {
  double worst = 1.0;
  for (int r = 0; r < kRanks; ++r) {
    const Timings& t = results[static_cast<size_t>(r)].fwd_bwd;
    const double hidden = t.comm_us > 0 ? 1.0 - t.exposed_us / t.comm_us : 0.0;
    if (hidden < worst) {
      worst = hidden;
      *detail = "rank " + std::to_string(r) + ": communication " + std::to_string(t.comm_us) + " us, blocked " +
                std::to_string(t.exposed_us) + " us";
    }
  }
  return worst;
}

// Runs the serial and the overlapped training, checks that they are bitwise equal, and returns the
// worst rank's hidden share. Timing is measured on a shared machine (CI runs two tests at once on
// two cores): the artificial compute per block is set to four times the median collective of the
// serial run just before (so the question is whether the design overlaps, not whether this
// machine is fast right now; 12 ms at least), and since another process can only make the overlap
// look worse, a measurement below the bar is retried, up to 3 times. Equality is checked every time.
double BestHiddenOverAttempts(RunOptions o, std::string* detail) {
  double best = -1e9;
  for (int attempt = 0; attempt < 3 && best < 0.8; ++attempt) {
    o.overlap = false;
    const std::vector<RankResult> serial = RunWorld(o);
    std::vector<double> items;
    for (const RankResult& r : serial) items.insert(items.end(), r.fwd_bwd.item_us.begin(), r.fwd_bwd.item_us.end());
    std::sort(items.begin(), items.end());
    const double median_us = items.empty() ? 0 : items[items.size() / 2];
    o.compute_ms = std::clamp(static_cast<int>(4 * median_us / 1000), 12, 250);
    o.overlap = true;
    const std::vector<RankResult> overlapped = RunWorld(o);
    ExpectSameTraining(serial, overlapped);
    if (o.fsdp) {
      // Forward and backward each take every block's gathered weight from the prefetches.
      for (int r = 0; r < kRanks; ++r) {
        EXPECT_EQ(overlapped[static_cast<size_t>(r)].prefetch.hits, int64_t{2} * o.blocks * kSteps) << "rank " << r;
      }
    }
    std::string d;
    const double h = WorstHidden(overlapped, &d);
    if (h > best) {
      best = h;
      *detail = d + " (compute " + std::to_string(o.compute_ms) + " ms per block)";
    }
  }
  return best;
}

TEST(OverlapTest, FsdpPrefetchHidesTheAllGathersAndEqualsTheSerialPath) {
  RunOptions o;
  o.fsdp = true;
  std::string detail;
  EXPECT_GE(BestHiddenOverAttempts(o, &detail), 0.8) << "all-gathers hidden; worst " << detail;
}

TEST(OverlapTest, BucketedDdpReductionIsExposedAtMostAFifthAndEqualsTheSerialPath) {
  RunOptions o;
  o.fsdp = false;
  // The last bucket (block 0's gradient, ready when Backward ends) cannot overlap anything: with 16
  // equal buckets it is a sixteenth of the reduction time.
  o.blocks = 16;
  o.dim = 1 << 15;
  std::string detail;
  EXPECT_GE(BestHiddenOverAttempts(o, &detail), 0.8) << "reductions exposed > 20%; worst " << detail;
}

}  // namespace
}  // namespace meshflow
