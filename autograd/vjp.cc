#include "meshflow/autograd/vjp.h"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"

namespace meshflow {
namespace {

// Runs every emitted op at once (RunOp). The VJP's inputs (operands, output, seed gradient) are
// borrowed from the caller, never copied; the values it emits are owned here.
class EagerBuilder : public GradBuilder {
 public:
  explicit EagerBuilder(RankContext& ctx) : comms_(ctx) {}
  int Borrow(const DTensor& v) {
    values_.push_back(&v);
    owned_.push_back(nullptr);
    return static_cast<int>(values_.size()) - 1;
  }
  StatusOr<int> Emit(const OpSpec& op, std::span<const int> operands) override {
    std::vector<const DTensor*> in;
    for (int v : operands) in.push_back(values_[static_cast<size_t>(v)]);
    MF_ASSIGN_OR_RETURN(DTensor out, RunOp(op, in, comms_));
    storage_.push_back(std::move(out));
    values_.push_back(&storage_.back());
    owned_.push_back(&storage_.back());
    return static_cast<int>(values_.size()) - 1;
  }
  std::vector<int64_t> Shape(int v) const override { return values_[static_cast<size_t>(v)]->global_shape(); }
  // The value: moved out when this builder made it, else a copy of the caller's.
  DTensor Take(int v) {
    if (DTensor* own = owned_[static_cast<size_t>(v)]) return std::move(*own);
    return *values_[static_cast<size_t>(v)];
  }
  const DTensor& Get(int v) const { return *values_[static_cast<size_t>(v)]; }

 private:
  RankContext& comms_;
  std::vector<const DTensor*> values_;  // every handle
  std::vector<DTensor*> owned_;         // per handle: its storage here, or null (borrowed)
  std::deque<DTensor> storage_;         // emitted values (stable references)
};

}  // namespace

StatusOr<DTensor> ScalarLike(const DTensor& like, double value) {
  const DeviceMesh& mesh = like.layout().mesh();
  MF_ASSIGN_OR_RETURN(Layout layout, Layout::Create({}, mesh, Placements(static_cast<size_t>(mesh.ndim()), Replicate{})));
  Tensor t = Tensor::Zeros(like.dtype(), {});
  t.SetFromDouble(0, value);
  if (!like.local().is_host()) {  // on `like`'s device, in its stream's order
    MF_ASSIGN_OR_RETURN(t, t.CopyTo(like.local().device(), like.local().stream()));
  }
  return DTensor::FromLocal(std::move(t), std::move(layout), like.rank());
}

StatusOr<DTensor> SumTo(const DTensor& x, const std::vector<int64_t>& shape, RankContext& ctx) {
  EagerBuilder b(ctx);
  const int xi = b.Borrow(x);
  MF_ASSIGN_OR_RETURN(int r, SumTo(b, xi, shape));
  return b.Take(r);
}

StatusOr<std::vector<std::optional<DTensor>>> Vjp(const OpSpec& op, std::span<const DTensor* const> inputs,
                                                  const DTensor& output, const DTensor& grad, RankContext& ctx) {
  EagerBuilder b(ctx);
  std::vector<int> in;
  for (const DTensor* x : inputs) in.push_back(b.Borrow(*x));
  const int y = b.Borrow(output);
  const int g = b.Borrow(grad);
  MF_ASSIGN_OR_RETURN(std::vector<std::optional<int>> r, Vjp(op, b, in, y, g));
  // A VJP may return one handle for several operands (add: g for both): move a value out only
  // when no other operand gets it too.
  std::vector<std::optional<DTensor>> out;
  for (size_t i = 0; i < r.size(); ++i) {
    if (!r[i]) {
      out.push_back(std::nullopt);
      continue;
    }
    const bool shared = std::count(r.begin(), r.end(), r[i]) > 1;
    out.push_back(shared ? b.Get(*r[i]) : b.Take(*r[i]));
  }
  return out;
}

}  // namespace meshflow
