#include "meshflow/optim/grad_reducer.h"

#include <algorithm>
#include <string>
#include <utility>

namespace meshflow {

GradReducer::GradReducer(std::vector<Variable*> params, std::vector<Layout> targets, std::vector<DType> dtypes,
                         RankContext& ctx)
    : params_(std::move(params)),
      targets_(std::move(targets)),
      dtypes_(std::move(dtypes)),
      bucket_of_(params_.size(), -1),
      ready_(params_.size(), false),
      ctx_(&ctx) {}

GradReducer::~GradReducer() {
  for (Variable* v : params_) v->ClearHooks();
  for (Bucket& b : buckets_) {
    for (PendingDTensor& p : b.pending) (void)p.Wait();  // nothing may still write into dropped state
  }
}

StatusOr<std::unique_ptr<GradReducer>> GradReducer::Create(std::vector<Variable*> params, const Optimizer& optimizer,
                                                           GradReducerOptions options, RankContext& ctx) {
  if (static_cast<int>(params.size()) != optimizer.num_params()) {
    return InvalidArgumentError("GradReducer: " + std::to_string(params.size()) + " params for an optimizer of " +
                                std::to_string(optimizer.num_params()));
  }
  if (options.bucket_bytes < 1) {
    return InvalidArgumentError("GradReducer: bucket_bytes " + std::to_string(options.bucket_bytes) + " < 1");
  }
  std::vector<Layout> targets;
  std::vector<DType> dtypes;
  for (size_t i = 0; i < params.size(); ++i) {
    Variable* v = params[i];
    if (v == nullptr || !v->defined() || !v->is_leaf() || !v->requires_grad()) {
      return InvalidArgumentError("GradReducer: param " + std::to_string(i) + " ('" +
                                  optimizer.param_name(static_cast<int>(i)) +
                                  "') is not a leaf Variable that requires a gradient");
    }
    targets.push_back(optimizer.state_layout(static_cast<int>(i)));
    dtypes.push_back(optimizer.compute_dtype(static_cast<int>(i)));
  }
  std::unique_ptr<GradReducer> r(new GradReducer(std::move(params), std::move(targets), std::move(dtypes), ctx));
  // Buckets in reverse param order, each up to bucket_bytes (one param at least).
  int64_t filled = 0;
  for (int i = static_cast<int>(r->params_.size()) - 1; i >= 0; --i) {
    int64_t bytes = DTypeSize(r->dtypes_[static_cast<size_t>(i)]);
    for (int64_t d : r->targets_[static_cast<size_t>(i)].global_shape()) bytes *= d;
    if (r->buckets_.empty() || filled + bytes > options.bucket_bytes) {
      r->buckets_.emplace_back();
      filled = 0;
    }
    r->buckets_.back().params.push_back(i);
    r->bucket_of_[static_cast<size_t>(i)] = static_cast<int>(r->buckets_.size()) - 1;
    filled += bytes;
  }
  r->stats_.buckets = static_cast<int64_t>(r->buckets_.size());
  GradReducer* self = r.get();
  for (size_t i = 0; i < self->params_.size(); ++i) {
    const int param = static_cast<int>(i);
    MF_RETURN_IF_ERROR(self->params_[i]->AddGradReadyHook([self, param]() { return self->OnReady(param); }));
  }
  return r;
}

Status GradReducer::OnReady(int param) {
  if (!enabled_) return Status::Ok();
  if (ready_[static_cast<size_t>(param)]) {
    return FailedPreconditionError("GradReducer: the gradient of param " + std::to_string(param) +
                                   " became ready twice before Finish (accumulating over several Backward calls "
                                   "needs set_enabled(false) until the last one)");
  }
  ready_[static_cast<size_t>(param)] = true;
  Bucket& b = buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(param)])];
  if (++b.ready < static_cast<int>(b.params.size())) return Status::Ok();
  ++stats_.launched_in_backward;
  return Launch(b);
}

Status GradReducer::Launch(Bucket& b) {
  b.launched = true;
  std::vector<DTensor> grads;
  std::vector<Layout> targets;
  for (int p : b.params) {
    // Moved out of the leaf (its memory goes with the bucket); Finish puts the reduced one back.
    std::optional<DTensor> g = params_[static_cast<size_t>(p)]->TakeGrad();
    if (!g.has_value()) continue;  // no gradient this step: Step leaves the param alone
    MF_ASSIGN_OR_RETURN(DTensor c, ConvertDTensor(std::move(*g), dtypes_[static_cast<size_t>(p)]));
    grads.push_back(std::move(c));
    targets.push_back(targets_[static_cast<size_t>(p)]);
    b.launched_params.push_back(p);
  }
  if (grads.empty()) return Status::Ok();
  MF_ASSIGN_OR_RETURN(b.pending, RedistributeBucketAsync(std::move(grads), targets, *ctx_));
  return Status::Ok();
}

Status GradReducer::Finish(RankContext& ctx) {
  if (&ctx != ctx_) return InvalidArgumentError("GradReducer::Finish: another RankContext than the one it was made with");
  Status first;
  auto keep = [&first](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  for (Bucket& b : buckets_) {
    if (!b.launched && b.ready > 0) {
      ++stats_.launched_in_finish;
      keep(Launch(b));
    }
  }
  for (Bucket& b : buckets_) {
    for (size_t k = 0; k < b.pending.size(); ++k) {
      StatusOr<DTensor> reduced = b.pending[k].Wait();
      if (!reduced.ok()) {
        keep(reduced.status());
        continue;
      }
      keep(params_[static_cast<size_t>(b.launched_params[k])]->SetGrad(std::move(*reduced)));
    }
    b.ready = 0;
    b.launched = false;
    b.launched_params.clear();
    b.pending.clear();
  }
  std::fill(ready_.begin(), ready_.end(), false);
  return first;
}

}  // namespace meshflow
