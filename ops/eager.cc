#include "ops/eager.h"

#include <optional>
#include <tuple>

#include "collectives/executor.h"
#include "ops/kernels.h"
#include "planner/cost_model.h"

namespace meshflow::ops {
namespace {

inline void Mix(uint64_t& h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
}

// The op without alpha (alpha does not change the strategy).
bool SameStructure(const OpSpec& a, const OpSpec& b) {
  return a.kind == b.kind && a.binary == b.binary && a.unary == b.unary && a.reduce == b.reduce &&
         a.dims == b.dims && a.keepdim == b.keepdim && a.dim == b.dim && a.log == b.log;
}

std::string Ints(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

int CountShards(const Placements& p) {
  int n = 0;
  for (const Placement& x : p) n += IsShard(x) ? 1 : 0;
  return n;
}
int CountPartials(const Placements& p) {
  int n = 0;
  for (const Placement& x : p) n += IsPartial(x) ? 1 : 0;
  return n;
}

}  // namespace

OpSpec OpSpec::Binary(BinaryOp op) {
  OpSpec s;
  s.kind = Kind::kBinary;
  s.binary = op;
  return s;
}
OpSpec OpSpec::Unary(UnaryOp op, double alpha) {
  OpSpec s;
  s.kind = Kind::kUnary;
  s.unary = op;
  s.alpha = alpha;
  return s;
}
OpSpec OpSpec::Reduce(ReduceKind kind, std::vector<int> dims, bool keepdim) {
  OpSpec s;
  s.kind = Kind::kReduce;
  s.reduce = kind;
  s.dims = std::move(dims);
  s.keepdim = keepdim;
  return s;
}
OpSpec OpSpec::Softmax(int dim, bool log) {
  OpSpec s;
  s.kind = Kind::kSoftmax;
  s.dim = dim;
  s.log = log;
  return s;
}

std::string OpSpec::ToString() const {
  switch (kind) {
    case Kind::kMatmul: return "matmul";
    case Kind::kBinary: return std::string(BinaryOpName(binary));
    case Kind::kUnary:
      return std::string(UnaryOpName(unary)) + (unary == UnaryOp::kScale ? "(" + std::to_string(alpha) + ")" : "");
    case Kind::kReduce:
      return std::string(ReduceKindName(reduce)) + "(dims=" + Ints(dims) + (keepdim ? ",keepdim)" : ")");
    case Kind::kSoftmax: return std::string(log ? "log_softmax" : "softmax") + "(dim=" + std::to_string(dim) + ")";
  }
  return "?";
}

StatusOr<ShardingRule> RuleFor(const OpSpec& op, std::span<const std::vector<int64_t>* const> shapes) {
  if (static_cast<int>(shapes.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) +
                                " operands, got " + std::to_string(shapes.size()));
  }
  switch (op.kind) {
    case OpSpec::Kind::kMatmul: return MatmulRule(*shapes[0], *shapes[1]);
    case OpSpec::Kind::kBinary: return BinaryRule(op.binary, *shapes[0], *shapes[1]);
    case OpSpec::Kind::kUnary: return UnaryRule(op.unary, *shapes[0]);
    case OpSpec::Kind::kReduce: return ReduceRule(op.reduce, *shapes[0], op.dims, op.keepdim);
    case OpSpec::Kind::kSoftmax: return SoftmaxRule(op.log, *shapes[0], op.dim);
  }
  return InternalError("unknown op kind");
}

StatusOr<Tensor> RunKernel(const OpSpec& op, std::span<const Tensor* const> x, int64_t mean_count) {
  if (static_cast<int>(x.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) +
                                " operands, got " + std::to_string(x.size()));
  }
  switch (op.kind) {
    case OpSpec::Kind::kMatmul: return MatmulKernel(*x[0], *x[1]);
    case OpSpec::Kind::kBinary: return BinaryKernel(op.binary, *x[0], *x[1]);
    case OpSpec::Kind::kUnary: return UnaryKernel(op.unary, *x[0], op.alpha);
    case OpSpec::Kind::kReduce: return ReduceKernel(op.reduce, *x[0], op.dims, op.keepdim, mean_count);
    case OpSpec::Kind::kSoftmax: return SoftmaxKernel(*x[0], op.dim, op.log);
  }
  return InternalError("unknown op kind");
}

// ---- DispatchCache ----

uint64_t DispatchCache::Hash(const OpSpec& op, std::span<const DTensor* const> inputs) {
  uint64_t h = static_cast<uint64_t>(op.kind) * 1000003u;
  Mix(h, static_cast<uint64_t>(op.binary));
  Mix(h, static_cast<uint64_t>(op.unary));
  Mix(h, static_cast<uint64_t>(op.reduce));
  for (int d : op.dims) Mix(h, static_cast<uint64_t>(d));
  Mix(h, static_cast<uint64_t>(op.keepdim) * 2 + static_cast<uint64_t>(op.log));
  Mix(h, static_cast<uint64_t>(op.dim));
  for (const DTensor* x : inputs) {
    Mix(h, static_cast<uint64_t>(x->dtype()));
    const Layout& l = x->layout();
    for (int64_t s : l.global_shape()) Mix(h, static_cast<uint64_t>(s));
    Mix(h, 0xabcdu);
    for (int64_t s : l.mesh().shape()) Mix(h, static_cast<uint64_t>(s));
    for (const Placement& p : l.placements()) {
      uint64_t v = p.index() * 64;
      if (IsShard(p)) v += static_cast<uint64_t>(std::get<Shard>(p).dim);
      if (IsPartial(p)) v += static_cast<uint64_t>(std::get<Partial>(p).op);
      Mix(h, v);
    }
  }
  return h;
}

bool DispatchCache::Matches(const Entry& e, const OpSpec& op, std::span<const DTensor* const> inputs) {
  if (!SameStructure(e.op, op) || e.layouts.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i]->dtype() != e.dtype || !(inputs[i]->layout() == e.layouts[i])) return false;
  }
  return true;
}

std::shared_ptr<const StrategyChoice> DispatchCache::Find(const OpSpec& op,
                                                          std::span<const DTensor* const> inputs) const {
  const uint64_t h = Hash(op, inputs);
  std::lock_guard<std::mutex> lock(mu_);
  auto [begin, end] = entries_.equal_range(h);
  for (auto it = begin; it != end; ++it) {
    if (Matches(it->second, op, inputs)) {
      ++hits_;
      return it->second.choice;
    }
  }
  ++misses_;
  return nullptr;
}

void DispatchCache::Insert(const OpSpec& op, std::span<const DTensor* const> inputs,
                           std::shared_ptr<const StrategyChoice> c) {
  const uint64_t h = Hash(op, inputs);
  Entry e{op, {}, inputs.empty() ? DType::kF32 : inputs[0]->dtype(), std::move(c)};
  for (const DTensor* x : inputs) e.layouts.push_back(x->layout());
  std::lock_guard<std::mutex> lock(mu_);
  auto [begin, end] = entries_.equal_range(h);
  for (auto it = begin; it != end; ++it) {
    if (Matches(it->second, op, inputs)) return;  // first insertion wins
  }
  entries_.emplace(h, std::move(e));
}

int64_t DispatchCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
int64_t DispatchCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}
size_t DispatchCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}
void DispatchCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  hits_ = misses_ = 0;
}

DispatchCache& DefaultDispatchCache() {
  static DispatchCache* const kCache = new DispatchCache();
  return *kCache;
}

// ---- Strategy choice ----

StatusOr<StrategyChoice> EvaluateStrategy(const OpSpec& op, const ShardingRule& rule, const Strategy& strategy,
                                          std::span<const Layout* const> input_layouts, DType dtype) {
  if (input_layouts.size() != strategy.operands.size()) {
    return InvalidArgumentError(op.ToString() + ": strategy has " + std::to_string(strategy.operands.size()) +
                                " operands, got " + std::to_string(input_layouts.size()) + " inputs");
  }
  StrategyChoice c{strategy, {}, {}, *input_layouts[0], 0, -1};  // result set below
  for (size_t i = 0; i < input_layouts.size(); ++i) {
    const Layout& in = *input_layouts[i];
    MF_ASSIGN_OR_RETURN(Layout need, in.WithPlacements(strategy.operands[i]));
    std::shared_ptr<const Plan> plan;
    if (!(need == in)) {
      MF_ASSIGN_OR_RETURN(plan, PlanFor(in, need, dtype));
      if (plan->steps.empty()) plan = nullptr;
    }
    if (plan) c.modelled_us += plan->modelled_us;
    c.operand_layouts.push_back(std::move(need));
    c.plans.push_back(std::move(plan));
  }
  MF_ASSIGN_OR_RETURN(c.result, Layout::Create(rule.result_shape, input_layouts[0]->mesh(), strategy.result));
  if (op.kind == OpSpec::Kind::kReduce && op.reduce == ReduceKind::kMean) {
    MF_ASSIGN_OR_RETURN(std::vector<int> rd, NormalizeReduceDims(input_layouts[0]->global_shape(), op.dims));
    c.mean_count = 1;
    for (int d : rd) c.mean_count *= input_layouts[0]->global_shape()[d];
  }
  return c;
}

namespace {

Status CheckInputs(const OpSpec& op, std::span<const DTensor* const> inputs) {
  if (static_cast<int>(inputs.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) +
                                " operands, got " + std::to_string(inputs.size()));
  }
  const DType t = inputs[0]->dtype();
  if (t != DType::kF32 && t != DType::kF64 && t != DType::kBF16) {
    return UnimplementedError(op.ToString() + ": dtype " + std::string(DTypeName(t)) +
                              " not supported (f32, f64, bf16 only)");
  }
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i]->dtype() != t) {
      return InvalidArgumentError(op.ToString() + ": operand dtypes differ: " + std::string(DTypeName(t)) +
                                  " vs " + std::string(DTypeName(inputs[i]->dtype())));
    }
    if (!(inputs[i]->layout().mesh() == inputs[0]->layout().mesh())) {
      return InvalidArgumentError(op.ToString() + ": operands on different meshes: " +
                                  inputs[0]->layout().mesh().ToString() + " vs " +
                                  inputs[i]->layout().mesh().ToString());
    }
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<const StrategyChoice>> ChooseUncached(const OpSpec& op,
                                                               std::span<const DTensor* const> inputs) {
  std::vector<const std::vector<int64_t>*> shapes;
  std::vector<const Layout*> layouts;
  for (const DTensor* x : inputs) {
    shapes.push_back(&x->global_shape());
    layouts.push_back(&x->layout());
  }
  MF_ASSIGN_OR_RETURN(ShardingRule rule, RuleFor(op, shapes));
  const std::vector<Strategy> strategies = EnumerateStrategies(rule, inputs[0]->layout().mesh().ndim());
  std::optional<StrategyChoice> best;
  std::tuple<int64_t, int, int> best_key;
  Status first_error;
  for (const Strategy& s : strategies) {
    StatusOr<StrategyChoice> c = EvaluateStrategy(op, rule, s, layouts, inputs[0]->dtype());
    if (!c.ok()) {
      if (first_error.ok()) first_error = c.status();
      continue;
    }
    const std::tuple<int64_t, int, int> key{CostUnits(c->modelled_us), -CountShards(s.result),
                                            CountPartials(s.result)};
    if (!best || key < best_key) {
      best_key = key;
      best = std::move(*c);
    }
  }
  if (!best) {
    return first_error.ok() ? InternalError(op.ToString() + ": no strategy") : first_error.WithContext(op.ToString());
  }
  return std::shared_ptr<const StrategyChoice>(std::make_shared<StrategyChoice>(std::move(*best)));
}

}  // namespace

StatusOr<std::shared_ptr<const StrategyChoice>> ChooseStrategy(const OpSpec& op,
                                                               std::span<const DTensor* const> inputs,
                                                               DispatchCache* cache) {
  if (cache == nullptr) cache = &DefaultDispatchCache();
  if (static_cast<int>(inputs.size()) == op.num_operands()) {
    if (std::shared_ptr<const StrategyChoice> c = cache->Find(op, inputs)) return c;
  }
  MF_RETURN_IF_ERROR(CheckInputs(op, inputs));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseUncached(op, inputs));
  cache->Insert(op, inputs, c);
  return c;
}

StatusOr<DTensor> RunOp(const OpSpec& op, std::span<const DTensor* const> inputs, MeshComms& comms,
                        const Strategy* forced) {
  std::shared_ptr<const StrategyChoice> choice;
  if (forced != nullptr) {
    MF_RETURN_IF_ERROR(CheckInputs(op, inputs));
    std::vector<const std::vector<int64_t>*> shapes;
    std::vector<const Layout*> layouts;
    for (const DTensor* x : inputs) {
      shapes.push_back(&x->global_shape());
      layouts.push_back(&x->layout());
    }
    MF_ASSIGN_OR_RETURN(ShardingRule rule, RuleFor(op, shapes));
    MF_ASSIGN_OR_RETURN(StrategyChoice c, EvaluateStrategy(op, rule, *forced, layouts, inputs[0]->dtype()));
    choice = std::make_shared<StrategyChoice>(std::move(c));
  } else {
    MF_ASSIGN_OR_RETURN(choice, ChooseStrategy(op, inputs));
  }
  if (!(comms.mesh() == choice->result.mesh())) {
    return InvalidArgumentError(op.ToString() + ": operands on " + choice->result.mesh().ToString() +
                                " but comms on " + comms.mesh().ToString());
  }
  // Redistribute inputs that are not in place; others are used without a copy.
  std::optional<Tensor> moved[2];
  const Tensor* locals[2] = {nullptr, nullptr};
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (choice->plans[i]) {
      moved[i] = inputs[i]->local();
      MF_RETURN_IF_ERROR(ExecutePlan(*choice->plans[i], comms, *moved[i]));
      locals[i] = &*moved[i];
    } else {
      locals[i] = &inputs[i]->local();
    }
  }
  MF_ASSIGN_OR_RETURN(Tensor out, RunKernel(op, std::span<const Tensor* const>(locals, inputs.size()),
                                            choice->mean_count));
  return DTensor::FromLocal(std::move(out), choice->result, inputs[0]->rank());
}

namespace {
StatusOr<DTensor> Run1(const OpSpec& op, const DTensor& x, MeshComms& comms) {
  const DTensor* in[1] = {&x};
  return RunOp(op, in, comms);
}
StatusOr<DTensor> Run2(const OpSpec& op, const DTensor& a, const DTensor& b, MeshComms& comms) {
  const DTensor* in[2] = {&a, &b};
  return RunOp(op, in, comms);
}
}  // namespace

StatusOr<DTensor> Matmul(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Matmul();
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Add(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Binary(BinaryOp::kAdd);
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Sub(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Binary(BinaryOp::kSub);
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Mul(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Binary(BinaryOp::kMul);
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Div(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Binary(BinaryOp::kDiv);
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Neg(const DTensor& x, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Unary(UnaryOp::kNeg);
  return Run1(kOp, x, comms);
}
StatusOr<DTensor> Scale(const DTensor& x, double alpha, MeshComms& comms) {
  return Run1(OpSpec::Unary(UnaryOp::kScale, alpha), x, comms);
}
StatusOr<DTensor> Relu(const DTensor& x, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Unary(UnaryOp::kRelu);
  return Run1(kOp, x, comms);
}
StatusOr<DTensor> Exp(const DTensor& x, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Unary(UnaryOp::kExp);
  return Run1(kOp, x, comms);
}
StatusOr<DTensor> Gelu(const DTensor& x, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Unary(UnaryOp::kGelu);
  return Run1(kOp, x, comms);
}
StatusOr<DTensor> Sum(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms) {
  return Run1(OpSpec::Reduce(ReduceKind::kSum, std::move(dims), keepdim), x, comms);
}
StatusOr<DTensor> Mean(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms) {
  return Run1(OpSpec::Reduce(ReduceKind::kMean, std::move(dims), keepdim), x, comms);
}
StatusOr<DTensor> Max(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms) {
  return Run1(OpSpec::Reduce(ReduceKind::kMax, std::move(dims), keepdim), x, comms);
}
StatusOr<DTensor> Min(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms) {
  return Run1(OpSpec::Reduce(ReduceKind::kMin, std::move(dims), keepdim), x, comms);
}
StatusOr<DTensor> Softmax(const DTensor& x, int dim, MeshComms& comms) {
  return Run1(OpSpec::Softmax(dim, false), x, comms);
}
StatusOr<DTensor> LogSoftmax(const DTensor& x, int dim, MeshComms& comms) {
  return Run1(OpSpec::Softmax(dim, true), x, comms);
}

}  // namespace meshflow::ops
