#include "meshflow/data/loader.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <cstring>
#include <span>
#include <utility>

#include "meshflow/data/sample_order.h"

namespace meshflow {
namespace {

constexpr std::string_view kStatePrefix = "meshflow.data.LoaderState";

std::vector<std::string_view> SplitWhitespace(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    size_t j = i;
    while (j < s.size() && !(s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r')) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

std::string LoaderState::ToString() const {
  return std::string(kStatePrefix) + " v" + std::to_string(version) + " seed=" + std::to_string(seed) +
         " epoch=" + std::to_string(epoch) + " consumed=" + std::to_string(consumed) +
         " num_samples=" + std::to_string(num_samples);
}

StatusOr<LoaderState> LoaderState::Parse(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  const std::vector<std::string_view> tokens = SplitWhitespace(text);
  if (tokens.size() < 2 || tokens[0] != kStatePrefix || tokens[1].size() < 2 || tokens[1][0] != 'v') {
    return InvalidArgumentError("bad loader state " + quoted + ": expected \"" + std::string(kStatePrefix) +
                                " v1 seed=.. epoch=.. consumed=.. num_samples=..\"");
  }
  uint64_t version = 0;
  if (!ParseU64(tokens[1].substr(1), &version)) {
    return InvalidArgumentError("bad loader state " + quoted + ": bad version '" + std::string(tokens[1]) + "'");
  }
  if (version != static_cast<uint64_t>(kVersion)) {
    return UnimplementedError("loader state " + quoted + " has version " + std::to_string(version) +
                              ", this build reads version " + std::to_string(kVersion));
  }
  LoaderState s;
  static constexpr std::string_view kFields[] = {"seed", "epoch", "consumed", "num_samples"};
  bool seen[4] = {false, false, false, false};
  for (size_t i = 2; i < tokens.size(); ++i) {
    const std::string_view tok = tokens[i];
    const size_t eq = tok.find('=');
    const std::string_view key = tok.substr(0, eq == std::string_view::npos ? tok.size() : eq);
    int f = -1;
    for (int k = 0; k < 4; ++k) {
      if (kFields[k] == key) f = k;
    }
    if (eq == std::string_view::npos || f < 0) {
      return InvalidArgumentError("bad loader state " + quoted + ": unknown field '" + std::string(tok) + "'");
    }
    if (seen[f]) return InvalidArgumentError("bad loader state " + quoted + ": repeated field '" + std::string(key) + "'");
    seen[f] = true;
    uint64_t v = 0;
    if (!ParseU64(tok.substr(eq + 1), &v) || (f > 0 && v > static_cast<uint64_t>(INT64_MAX))) {
      return InvalidArgumentError("bad loader state " + quoted + ": bad value in '" + std::string(tok) + "'");
    }
    if (f == 0) s.seed = v;
    if (f == 1) s.epoch = static_cast<int64_t>(v);
    if (f == 2) s.consumed = static_cast<int64_t>(v);
    if (f == 3) s.num_samples = static_cast<int64_t>(v);
  }
  for (int k = 0; k < 4; ++k) {
    if (!seen[k]) {
      return InvalidArgumentError("bad loader state " + quoted + ": missing field '" + std::string(kFields[k]) + "'");
    }
  }
  return s;
}

StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(std::shared_ptr<const Dataset> dataset, DeviceMesh mesh,
                                                         int rank, DataLoaderOptions options) {
  if (dataset == nullptr) return InvalidArgumentError("DataLoader: dataset is null");
  const int64_t n = dataset->size();
  if (n < 1) return InvalidArgumentError("DataLoader: " + dataset->name() + " has no samples");
  if (!mesh.Contains(rank)) {
    return InvalidArgumentError("DataLoader: rank " + std::to_string(rank) + " is not in " + mesh.ToString());
  }
  const int64_t b = options.global_batch_size;
  if (b < 1) return InvalidArgumentError("DataLoader: global_batch_size must be >= 1, got " + std::to_string(b));
  if (options.prefetch_depth < 0) {
    return InvalidArgumentError("DataLoader: prefetch_depth must be >= 0, got " + std::to_string(options.prefetch_depth));
  }
  if (options.num_epochs < 0) {
    return InvalidArgumentError("DataLoader: num_epochs must be >= 0, got " + std::to_string(options.num_epochs));
  }
  if (options.drop_last && b > n) {
    return InvalidArgumentError("DataLoader: global batch size " + std::to_string(b) + " > " + std::to_string(n) +
                                " samples with drop_last: an epoch would have no batch");
  }
  std::vector<int> dp;
  for (const MeshDimRef& ref : options.dp_dims) {
    int d = -1;
    if (const int* idx = std::get_if<int>(&ref.ref)) {
      d = *idx;
      if (d < 0 || d >= mesh.ndim()) {
        return InvalidArgumentError("DataLoader: dp mesh dim " + std::to_string(d) + " out of range for " +
                                    mesh.ToString());
      }
    } else {
      const std::string& name = std::get<std::string>(ref.ref);
      StatusOr<int> found = mesh.DimIndex(name);
      if (!found.ok()) return found.status().WithContext("DataLoader: dp mesh dim '" + name + "'");
      d = *found;
    }
    if (std::find(dp.begin(), dp.end(), d) != dp.end()) {
      return InvalidArgumentError("DataLoader: dp mesh dim " + mesh.DimName(d) + " given twice");
    }
    dp.push_back(d);
  }
  std::vector<int64_t> shape = {b};
  shape.insert(shape.end(), dataset->sample_shape().begin(), dataset->sample_shape().end());
  Placements placements(static_cast<size_t>(mesh.ndim()), Replicate{});
  for (int d : dp) placements[static_cast<size_t>(d)] = Shard{0};
  ShardOrder order;
  if (dp.size() > 1) order = {dp};  // the dims in the order given, first = outermost
  MF_ASSIGN_OR_RETURN(std::vector<int> group, mesh.Group(rank, dp));
  MF_ASSIGN_OR_RETURN(Layout layout, Layout::Create(std::move(shape), mesh, std::move(placements), std::move(order)));
  MF_ASSIGN_OR_RETURN(Box box, layout.LocalBox(rank));
  auto loader = std::unique_ptr<DataLoader>(new DataLoader(std::move(dataset), std::move(options), std::move(layout), rank));
  loader->dp_size_ = static_cast<int>(group.size());
  loader->dp_rank_ = static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
  loader->rows_ = box.dim(0);
  return loader;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options, Layout layout, int rank)
    : dataset_(std::move(dataset)), options_(std::move(options)), layout_(std::move(layout)), rank_(rank) {
  state_.seed = options_.seed;
  state_.num_samples = dataset_->size();
}

DataLoader::~DataLoader() { StopWorker(); }

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = dataset_->size(), b = options_.global_batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t DataLoader::repeated_per_epoch() const {
  return options_.drop_last ? 0 : batches_per_epoch() * options_.global_batch_size - dataset_->size();
}

int64_t DataLoader::dropped_per_epoch() const {
  return options_.drop_last ? dataset_->size() - batches_per_epoch() * options_.global_batch_size : 0;
}

LoaderState DataLoader::Normalize(LoaderState s) const {
  const int64_t n = dataset_->size(), b = options_.global_batch_size;
  const bool has_batch = options_.drop_last ? s.consumed + b <= n : s.consumed < n;
  if (!has_batch) {
    ++s.epoch;
    s.consumed = 0;
  }
  return s;
}

StatusOr<Batch> DataLoader::Produce(const LoaderState& at) const {
  if (options_.num_epochs > 0 && at.epoch >= options_.num_epochs) {
    return OutOfRangeError("end of data: DataLoader finished its " + std::to_string(options_.num_epochs) +
                           " epoch(s)");
  }
  const int64_t n = dataset_->size(), b = options_.global_batch_size;
  const SampleOrder order(n, at.seed, static_cast<uint64_t>(at.epoch), options_.shuffle);
  std::vector<int64_t> local_shape = layout_.global_shape();
  local_shape[0] = rows_.size();
  Tensor local = Tensor::Zeros(dataset_->dtype(), local_shape);
  const int64_t sample_bytes = dataset_->sample_bytes();
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(rows_.size()));
  for (int64_t r = rows_.begin; r < rows_.end; ++r) {
    const int64_t index = order.At((at.consumed + r) % n);
    indices.push_back(index);
    const Status s = dataset_->Read(
        index, std::span<std::byte>(local.raw() + (r - rows_.begin) * sample_bytes, static_cast<size_t>(sample_bytes)));
    if (!s.ok()) {
      return s.WithContext("DataLoader rank " + std::to_string(rank_) + " epoch " + std::to_string(at.epoch) +
                           " batch " + std::to_string(at.consumed / b) + " row " + std::to_string(r));
    }
  }
  MF_ASSIGN_OR_RETURN(DTensor data, DTensor::FromLocal(std::move(local), layout_, rank_));
  LoaderState after = at;
  after.consumed += b;
  after = Normalize(after);
  return Batch{.data = std::move(data),
               .epoch = at.epoch,
               .step = at.consumed / b,
               .position = at.consumed,
               .row_offset = rows_.begin,
               .sample_indices = std::move(indices),
               .num_repeated = std::max<int64_t>(0, at.consumed + b - n),
               .state_after = after};
}

void DataLoader::StartWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
    queue_.clear();
  }
  worker_ = std::thread([this, cursor = state_] { WorkerLoop(cursor); });
  worker_running_ = true;
}

void DataLoader::StopWorker() {
  if (!worker_running_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  not_full_.notify_all();
  worker_.join();
  worker_running_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
}

void DataLoader::WorkerLoop(LoaderState cursor) {
  const size_t depth = static_cast<size_t>(options_.prefetch_depth);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      not_full_.wait(lock, [&] { return stop_ || queue_.size() < depth; });
      if (stop_) return;
    }
    StatusOr<Batch> batch = Produce(cursor);  // reads outside the lock
    const bool ok = batch.ok();
    if (ok) cursor = batch->state_after;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      queue_.push_back(std::move(batch));
    }
    not_empty_.notify_one();
    if (!ok) return;  // the error (or end of data) is the last item
  }
}

StatusOr<Batch> DataLoader::NextBatch() {
  if (!sticky_.ok()) return sticky_;
  std::optional<StatusOr<Batch>> item;
  if (options_.prefetch_depth == 0) {
    item.emplace(Produce(state_));
  } else {
    if (!worker_running_) StartWorker();
    {
      std::unique_lock<std::mutex> lock(mu_);
      not_empty_.wait(lock, [&] { return !queue_.empty(); });
      item.emplace(std::move(queue_.front()));
      queue_.pop_front();
    }
    not_full_.notify_one();
  }
  if (!item->ok()) {
    sticky_ = item->status();
    return sticky_;
  }
  state_ = (*item)->state_after;
  return std::move(*item);
}

StatusOr<DTensor> DataLoader::Next() {
  MF_ASSIGN_OR_RETURN(Batch batch, NextBatch());
  return std::move(batch.data);
}

Status DataLoader::Restore(const LoaderState& state) {
  const std::string what = "DataLoader::Restore(" + state.ToString() + ")";
  if (state.version != LoaderState::kVersion) {
    return UnimplementedError(what + ": unsupported version " + std::to_string(state.version));
  }
  if (state.seed != options_.seed) {
    return FailedPreconditionError(what + ": state seed " + std::to_string(state.seed) + " != loader seed " +
                                   std::to_string(options_.seed));
  }
  if (state.num_samples != dataset_->size()) {
    return FailedPreconditionError(what + ": state was saved for " + std::to_string(state.num_samples) +
                                   " samples, " + dataset_->name() + " has " + std::to_string(dataset_->size()));
  }
  if (state.epoch < 0) return InvalidArgumentError(what + ": negative epoch " + std::to_string(state.epoch));
  if (state.consumed < 0 || state.consumed > dataset_->size()) {
    return InvalidArgumentError(what + ": consumed " + std::to_string(state.consumed) + " outside [0, " +
                                std::to_string(dataset_->size()) + "]");
  }
  StopWorker();
  sticky_ = Status::Ok();
  state_ = Normalize(state);
  return Status::Ok();
}

}  // namespace meshflow
