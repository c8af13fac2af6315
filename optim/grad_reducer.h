// GradReducer: gradient reduction in buckets, launched during Backward (the overlap of torch DDP's
// Reducer and FSDP2's reduce-scatter).
//
// Without it, Optimizer::Step converts each gradient to its compute dtype and redistributes it to
// its state layout after Backward returned (an all-reduce for DDP, a reduce-scatter for ZeRO and
// FSDP): the whole reduction is exposed. A GradReducer assigns the optimizer's params to buckets
// (reverse order: Backward makes the last layers' gradients first; at most bucket_bytes of
// compute-dtype gradient per bucket, one param at least) and registers a grad-ready hook on each
// param's leaf Variable (autograd/variable.h). When every gradient of a bucket is final in
// Backward, the bucket's conversions run and its redistributions start on the communication
// stream (RedistributeBucketAsync: one fused all-reduce for a DDP bucket), while Backward goes on
// computing the earlier layers. Finish() starts the buckets that are still open (a param that got
// no gradient is left out), waits for every bucket and replaces each leaf's gradient by its reduced
// form (state layout, compute dtype), so Step finds nothing left to convert or redistribute. The
// results have the bits of the serial path (the same conversions and plans; a fused all-reduce
// reduces each element with the same rank-order fold).
//
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<GradReducer> reducer,
//                       GradReducer::Create(params, *opt, GradReducerOptions{.bucket_bytes = 1 << 20}, ctx));
//   MF_RETURN_IF_ERROR(Backward(loss, ctx));      // buckets start as their gradients are ready
//   MF_RETURN_IF_ERROR(reducer->Finish(ctx));     // waits; leaves hold the reduced gradients
//   MF_RETURN_IF_ERROR(opt->Step(grads, ctx));
//
// Every rank fires its hooks in the same order (the same graph), so the buckets' collectives run in
// the same order everywhere. For gradient accumulation, set_enabled(false) during the micro-batches
// whose gradients are only accumulated, and enable it for the last one.
//
// Errors: Create with a param count other than the optimizer's, a null or non-leaf param, a
// bucket_bytes < 1 (INVALID_ARGUMENT); a gradient that becomes ready twice before Finish
// (FAILED_PRECONDITION: a second Backward without set_enabled(false)); the redistributions' errors
// (from the hook, i.e. from Backward, or from Finish).
#ifndef MESHFLOW_OPTIM_GRAD_REDUCER_H_
#define MESHFLOW_OPTIM_GRAD_REDUCER_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <vector>

#include "meshflow/autograd/variable.h"
#include "meshflow/base/status.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {

struct GradReducerOptions {
  // Compute-dtype gradient bytes (global) per bucket; torch DDP's default is 25 MiB.
  int64_t bucket_bytes = int64_t{25} << 20;
};

struct GradReducerStats {
  int64_t buckets = 0;            // buckets of the assignment
  int64_t launched_in_backward = 0;  // bucket launches from hooks (summed over steps)
  int64_t launched_in_finish = 0;    // bucket launches left for Finish (summed over steps)
};

class GradReducer {
 public:
  // params[i] is the leaf of the optimizer's param i (same order as its ParamSpecs; for a module,
  // NamedParameters()). The hooks hold `ctx` and the params: both must outlive the reducer.
  static StatusOr<std::unique_ptr<GradReducer>> Create(std::vector<Variable*> params, const Optimizer& optimizer,
                                                       GradReducerOptions options, RankContext& ctx);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Collective: starts the open buckets, waits for all, writes the reduced gradients into the
  // leaves. A step without any gradient does nothing.
  Status Finish(RankContext& ctx);

  // While disabled the hooks do nothing (gradient accumulation micro-batches).
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // The params of bucket b (indices into params), in launch order within the bucket.
  const std::vector<int>& bucket(int b) const { return buckets_[static_cast<size_t>(b)].params; }
  const GradReducerStats& stats() const { return stats_; }

 private:
  struct Bucket {
    std::vector<int> params;
    int ready = 0;          // params whose gradient is final this step
    bool launched = false;
    std::vector<int> launched_params;        // the params launched (those with a gradient)
    std::vector<PendingDTensor> pending;     // one per launched param
  };
  GradReducer(std::vector<Variable*> params, std::vector<Layout> targets, std::vector<DType> dtypes,
              RankContext& ctx);
  Status OnReady(int param);
  Status Launch(Bucket& b);

  std::vector<Variable*> params_;
  std::vector<Layout> targets_;
  std::vector<DType> dtypes_;
  std::vector<int> bucket_of_;
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  RankContext* ctx_;
  bool enabled_ = true;
  GradReducerStats stats_;
};

}  // namespace meshflow

#endif  // MESHFLOW_OPTIM_GRAD_REDUCER_H_
