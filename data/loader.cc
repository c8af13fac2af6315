#include "meshflow/data/loader.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <cctype>
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
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Exactly 16 lower- or upper-case hex digits.
bool ParseHex64(std::string_view s, uint64_t* out) {
  if (s.size() != 16) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && ptr == s.data() + s.size();
}

std::string BoolName(bool b) { return b ? "true" : "false"; }

}  // namespace

std::string LoaderState::ToString() const {
  std::string out = std::string(kStatePrefix) + " v" + std::to_string(version) + " seed=" + std::to_string(seed) +
                    " epoch=" + std::to_string(epoch) + " consumed=" + std::to_string(consumed) +
                    " num_samples=" + std::to_string(num_samples);
  if (batch_size) out += " batch_size=" + std::to_string(*batch_size);
  if (shuffle) out += std::string(" shuffle=") + (*shuffle ? "1" : "0");
  if (drop_last) out += std::string(" drop_last=") + (*drop_last ? "1" : "0");
  if (dataset_fingerprint) out += " dataset=" + FingerprintHex(*dataset_fingerprint);
  return out;
}

StatusOr<LoaderState> LoaderState::Parse(std::string_view text) {
  // Quote at most 200 characters of hostile input in messages.
  const std::string quoted = "'" + std::string(text.substr(0, 200)) + (text.size() > 200 ? "...'" : "'");
  const std::vector<std::string_view> tokens = SplitWhitespace(text);
  if (tokens.size() < 2 || tokens[0] != kStatePrefix || tokens[1].size() < 2 || tokens[1][0] != 'v') {
    return InvalidArgumentError("bad loader state " + quoted + ": expected \"" + std::string(kStatePrefix) +
                                " v2 seed=.. epoch=.. consumed=.. num_samples=.. [batch_size=.. shuffle=0|1 "
                                "drop_last=0|1 dataset=<16 hex digits>]\"");
  }
  uint64_t version = 0;
  if (!ParseU64(tokens[1].substr(1), &version)) {
    return InvalidArgumentError("bad loader state " + quoted + ": bad version '" + std::string(tokens[1]) + "'");
  }
  if (version != 1 && version != static_cast<uint64_t>(kVersion)) {
    return UnimplementedError("loader state " + quoted + " has version " + std::to_string(version) +
                              ", this build reads versions 1 and " + std::to_string(kVersion));
  }
  LoaderState s;
  s.version = static_cast<int>(version);
  static constexpr std::string_view kFields[] = {"seed",       "epoch",   "consumed",  "num_samples",
                                                 "batch_size", "shuffle", "drop_last", "dataset"};
  constexpr int kNumFields = 8, kRequired = 4;
  bool seen[kNumFields] = {};
  for (size_t i = 2; i < tokens.size(); ++i) {
    const std::string_view tok = tokens[i];
    const size_t eq = tok.find('=');
    const std::string_view key = tok.substr(0, eq == std::string_view::npos ? tok.size() : eq);
    int f = -1;
    for (int k = 0; k < kNumFields; ++k) {
      if (kFields[k] == key) f = k;
    }
    if (eq == std::string_view::npos || f < 0) {
      return InvalidArgumentError("bad loader state " + quoted + ": unknown field '" +
                                  std::string(tok.substr(0, 64)) + "'");
    }
    if (seen[f]) return InvalidArgumentError("bad loader state " + quoted + ": repeated field '" + std::string(key) + "'");
    seen[f] = true;
    const std::string_view value = tok.substr(eq + 1);
    const Status bad = InvalidArgumentError("bad loader state " + quoted + ": bad value in '" +
                                            std::string(tok.substr(0, 64)) + "'");
    if (f == 7) {
      uint64_t fp = 0;
      if (!ParseHex64(value, &fp)) return bad;
      s.dataset_fingerprint = fp;
      continue;
    }
    uint64_t v = 0;
    if (!ParseU64(value, &v) || (f > 0 && v > static_cast<uint64_t>(INT64_MAX))) return bad;
    switch (f) {
      case 0: s.seed = v; break;
      case 1: s.epoch = static_cast<int64_t>(v); break;
      case 2: s.consumed = static_cast<int64_t>(v); break;
      case 3: s.num_samples = static_cast<int64_t>(v); break;
      case 4:
        if (v < 1) return bad;
        s.batch_size = static_cast<int64_t>(v);
        break;
      case 5:
      case 6:
        if (v > 1 || value.size() != 1) return bad;
        (f == 5 ? s.shuffle : s.drop_last) = v == 1;
        break;
      default: break;
    }
  }
  for (int k = 0; k < kNumFields; ++k) {
    // v2 texts carry the config Restore checks (batch_size, field 4, is elastic and optional).
    const bool required = k < kRequired || (version >= 2 && k != 4);
    if (required && !seen[k]) {
      return InvalidArgumentError("bad loader state " + quoted + ": missing field '" + std::string(kFields[k]) + "'");
    }
  }
  return s;
}

bool IsDataParallelDimName(std::string_view name) {
  return name == "dp" || name == "data" || name == "ddp" || name == "fsdp" || name.starts_with("dp_");
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
  if (b > (int64_t{1} << 40)) {
    return InvalidArgumentError("DataLoader: global_batch_size " + std::to_string(b) + " is too large (max 2^40)");
  }
  if (options.prefetch_depth < 0) {
    return InvalidArgumentError("DataLoader: prefetch_depth must be >= 0, got " + std::to_string(options.prefetch_depth));
  }
  if (options.num_readers < 1 || options.num_readers > 256) {
    return InvalidArgumentError("DataLoader: num_readers must be in [1, 256], got " +
                                std::to_string(options.num_readers));
  }
  if (options.num_epochs < 0) {
    return InvalidArgumentError("DataLoader: num_epochs must be >= 0, got " + std::to_string(options.num_epochs));
  }
  if (options.drop_last && b > n) {
    return InvalidArgumentError("DataLoader: global batch size " + std::to_string(b) + " > " + std::to_string(n) +
                                " samples with drop_last: an epoch would have no batch");
  }
  if (options.replicate_batch && !options.dp_dims.empty()) {
    return InvalidArgumentError("DataLoader: replicate_batch is set but dp_dims names " +
                                std::to_string(options.dp_dims.size()) + " dim(s); give one or the other");
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
  if (options.dp_dims.empty() && !options.replicate_batch) {
    for (int d = 0; d < static_cast<int>(mesh.names().size()); ++d) {
      if (IsDataParallelDimName(mesh.names()[static_cast<size_t>(d)])) dp.push_back(d);
    }
    if (dp.empty() && mesh.size() > 1) {
      return InvalidArgumentError(
          "DataLoader: dp_dims is empty and " + mesh.ToString() +
          " has no data-parallel dim (named dp, data, ddp, fsdp or dp_*): every rank would get the same rows; "
          "name the data-parallel dims in dp_dims, or set replicate_batch");
    }
  }
  MF_ASSIGN_OR_RETURN(std::vector<int> group, mesh.Group(rank, dp));
  const int64_t dp_size = static_cast<int64_t>(group.size());
  const int64_t rows = options.even_batches ? dp_size * ((b + dp_size - 1) / dp_size) : b;
  std::vector<int64_t> shape = {rows};
  shape.insert(shape.end(), dataset->sample_shape().begin(), dataset->sample_shape().end());
  Placements placements(static_cast<size_t>(mesh.ndim()), Replicate{});
  for (int d : dp) placements[static_cast<size_t>(d)] = Shard{0};
  ShardOrder order;
  if (dp.size() > 1) order = {dp};  // the dims in the order given, first = outermost
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
  state_.batch_size = options_.global_batch_size;
  state_.shuffle = options_.shuffle;
  state_.drop_last = options_.drop_last;
  state_.dataset_fingerprint = dataset_->fingerprint();
}

DataLoader::~DataLoader() { StopWorkers(); }

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

LoaderState DataLoader::Advance(LoaderState s) const {
  s.consumed += options_.global_batch_size;
  return Normalize(s);
}

StatusOr<Batch> DataLoader::Produce(const LoaderState& at) const {
  if (AtEnd(at)) {
    return OutOfRangeError("end of data: DataLoader finished its " + std::to_string(options_.num_epochs) +
                           " epoch(s)");
  }
  const int64_t n = dataset_->size(), b = options_.global_batch_size;
  const SampleOrder order(n, at.seed, static_cast<uint64_t>(at.epoch), options_.shuffle);
  std::vector<int64_t> local_shape = layout_.global_shape();
  local_shape[0] = rows_.size();
  // Every row is written below (or the batch is dropped on an error).
  Tensor local = Tensor::Uninitialized(dataset_->dtype(), local_shape);
  const int64_t sample_bytes = dataset_->sample_bytes();
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(rows_.size()));
  for (int64_t r = rows_.begin; r < rows_.end; ++r) {
    // Rows past B (even_batches padding) repeat the batch's first rows.
    const int64_t row = r < b ? r : (r - b) % b;
    indices.push_back(order.At((at.consumed + row) % n));
  }
  auto row_bytes = [&](size_t k, size_t count) {
    return std::span<std::byte>(local.raw() + static_cast<int64_t>(k) * sample_bytes,
                                static_cast<size_t>(sample_bytes) * count);
  };
  auto context = [&](const Status& s, size_t k) {
    return s.WithContext("DataLoader rank " + std::to_string(rank_) + " epoch " + std::to_string(at.epoch) + " batch " +
                         std::to_string(at.consumed / b) + " row " + std::to_string(rows_.begin + static_cast<int64_t>(k)));
  };
  // Rows whose samples are consecutive (a sequential order, a batch that wraps an epoch's
  // start) are one ReadRun: for a token file, one read instead of one per row.
  for (size_t k = 0; k < indices.size();) {
    size_t e = k + 1;
    while (e < indices.size() && indices[e] == indices[e - 1] + 1) ++e;
    const Status s = dataset_->ReadRun(indices[k], static_cast<int64_t>(e - k), row_bytes(k, e - k));
    if (!s.ok()) {
      // Name the first failing row of a longer run: read its rows one by one up to it.
      for (size_t j = k; j < e && e - k > 1; ++j) {
        const Status rs = dataset_->Read(indices[j], row_bytes(j, 1));
        if (!rs.ok()) return context(rs, j);
      }
      return context(s, k);
    }
    k = e;
  }
  MF_ASSIGN_OR_RETURN(DTensor data, DTensor::FromLocal(std::move(local), layout_, rank_));
  const int64_t global_rows = layout_.global_shape()[0];
  return Batch{.data = std::move(data),
               .epoch = at.epoch,
               .step = at.consumed / b,
               .position = at.consumed,
               .row_offset = rows_.begin,
               .sample_indices = std::move(indices),
               .num_repeated = std::max<int64_t>(0, at.consumed + b - n),
               .num_padding = global_rows - b,
               .local_valid_rows = std::clamp<int64_t>(b - rows_.begin, 0, rows_.size()),
               .state_after = Advance(at)};
}

void DataLoader::StartWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
    claims_done_ = false;
    ready_.clear();
    claim_cursor_ = state_;
    next_claim_ = 0;
    next_consume_ = 0;
  }
  for (int i = 0; i < options_.num_readers; ++i) readers_.emplace_back([this] { ReaderLoop(); });
  workers_running_ = true;
}

void DataLoader::StopWorkers() {
  if (!workers_running_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  can_claim_.notify_all();
  for (std::thread& t : readers_) t.join();
  readers_.clear();
  workers_running_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  ready_.clear();
}

void DataLoader::ReaderLoop() {
  const int64_t window = std::max(options_.prefetch_depth, options_.num_readers);
  while (true) {
    int64_t seq = 0;
    LoaderState at;
    {
      std::unique_lock<std::mutex> lock(mu_);
      can_claim_.wait(lock, [&] { return stop_ || claims_done_ || next_claim_ < next_consume_ + window; });
      if (stop_ || claims_done_) return;
      seq = next_claim_++;
      at = claim_cursor_;
      if (AtEnd(at)) {
        claims_done_ = true;  // this claim yields "end of data", the last item
      } else {
        claim_cursor_ = Advance(at);
      }
    }
    StatusOr<Batch> batch = Produce(at);  // reads outside the lock
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      if (!batch.ok()) claims_done_ = true;  // the error is the last item the consumer takes
      ready_.emplace(seq, std::move(batch));
    }
    ready_cv_.notify_all();
    can_claim_.notify_all();
  }
}

StatusOr<Batch> DataLoader::NextBatch() {
  if (!sticky_.ok()) return sticky_;
  std::optional<StatusOr<Batch>> item;
  if (options_.prefetch_depth == 0) {
    item.emplace(Produce(state_));
  } else {
    if (!workers_running_) StartWorkers();
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_cv_.wait(lock, [&] { return ready_.count(next_consume_) > 0; });
      auto it = ready_.find(next_consume_);
      item.emplace(std::move(it->second));
      ready_.erase(it);
      ++next_consume_;
    }
    can_claim_.notify_all();
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
  std::string missing;
  if (!state.shuffle) missing += "shuffle";
  if (!state.drop_last) missing += missing.empty() ? "drop_last" : ", drop_last";
  if (!state.dataset_fingerprint) missing += missing.empty() ? "dataset" : ", dataset";
  if (!missing.empty()) {
    return FailedPreconditionError("DataLoader::Restore(" + state.ToString() + "): the state lacks " + missing +
                                   ", so it cannot be checked against this loader (a v1 state, or one built in "
                                   "code); RestoreUnchecked resumes it if it is known to match");
  }
  return RestoreImpl(state);
}

Status DataLoader::RestoreUnchecked(const LoaderState& state) { return RestoreImpl(state); }

Status DataLoader::RestoreImpl(const LoaderState& state) {
  const std::string what = "DataLoader::Restore(" + state.ToString() + ")";
  if (state.version != 1 && state.version != LoaderState::kVersion) {
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
  if (state.shuffle && *state.shuffle != options_.shuffle) {
    return FailedPreconditionError(what + ": state was saved with shuffle=" + BoolName(*state.shuffle) +
                                   ", this loader has shuffle=" + BoolName(options_.shuffle) +
                                   " (the sample order would differ)");
  }
  if (state.drop_last && *state.drop_last != options_.drop_last) {
    return FailedPreconditionError(what + ": state was saved with drop_last=" + BoolName(*state.drop_last) +
                                   ", this loader has drop_last=" + BoolName(options_.drop_last) +
                                   " (the epoch boundaries would differ)");
  }
  if (state.dataset_fingerprint && *state.dataset_fingerprint != dataset_->fingerprint()) {
    return FailedPreconditionError(what + ": state was saved for dataset fingerprint " +
                                   FingerprintHex(*state.dataset_fingerprint) + ", " + dataset_->name() +
                                   " has fingerprint " + FingerprintHex(dataset_->fingerprint()) +
                                   " (another dataset or other contents)");
  }
  if (state.epoch < 0) return InvalidArgumentError(what + ": negative epoch " + std::to_string(state.epoch));
  if (state.epoch > (int64_t{1} << 62)) {
    return InvalidArgumentError(what + ": epoch " + std::to_string(state.epoch) + " is too large (max 2^62)");
  }
  if (state.consumed < 0 || state.consumed > dataset_->size()) {
    return InvalidArgumentError(what + ": consumed " + std::to_string(state.consumed) + " outside [0, " +
                                std::to_string(dataset_->size()) + "]");
  }
  StopWorkers();
  sticky_ = Status::Ok();
  LoaderState s = state_;  // this loader's config fields
  s.epoch = state.epoch;
  s.consumed = state.consumed;
  state_ = Normalize(s);
  return Status::Ok();
}

}  // namespace meshflow
