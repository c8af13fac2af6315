#include "meshflow/train/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/runtime/device_copy.h"

namespace meshflow {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The step of a directory named "step-<digits>" (also "step-<digits>.old"), else nullopt.
std::optional<int64_t> StepOf(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return std::nullopt;
  std::string digits = name.substr(5);
  if (digits.size() > 4 && digits.compare(digits.size() - 4, 4, ".old") == 0) digits.resize(digits.size() - 4);
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string StepCheckpointDir(const std::string& root, int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return (std::filesystem::path(root) / buf).string();
}

StatusOr<std::vector<TrainCheckpoint>> ListCheckpoints(const std::string& root) {
  std::vector<TrainCheckpoint> out;
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) return out;
  std::vector<int64_t> steps;
  for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<int64_t> step = StepOf(it->path().filename().string());
    if (step && std::find(steps.begin(), steps.end(), *step) == steps.end()) steps.push_back(*step);
  }
  if (ec) return UnavailableError("cannot list checkpoint root '" + root + "': " + ec.message());
  std::sort(steps.begin(), steps.end());
  for (int64_t step : steps) {
    const std::string dir = StepCheckpointDir(root, step);
    // Complete = the loaders can read its metadata (dir itself, or dir.old after a crash between
    // the commit renames); temporary directories never match "step-<digits>".
    if (ReadCheckpointMetadata(dir).ok()) out.push_back(TrainCheckpoint{step, dir});
  }
  return out;
}

StatusOr<std::optional<TrainCheckpoint>> LatestCheckpoint(const std::string& root) {
  MF_ASSIGN_OR_RETURN(std::vector<TrainCheckpoint> all, ListCheckpoints(root));
  if (all.empty()) return std::optional<TrainCheckpoint>();
  return std::optional<TrainCheckpoint>(all.back());
}

CheckpointManager::CheckpointManager(CheckpointManagerOptions options, RankContext ctx)
    : options_(std::move(options)), comms_(std::move(ctx)) {}

CheckpointManager::~CheckpointManager() {
  if (writer_.joinable()) writer_.join();
}

StatusOr<std::unique_ptr<CheckpointManager>> CheckpointManager::Create(CheckpointManagerOptions options,
                                                                       Communicator& world, const DeviceMesh& mesh) {
  if (options.root.empty()) return InvalidArgumentError("CheckpointManager: empty root directory");
  if (options.keep_last < 1) {
    return InvalidArgumentError("CheckpointManager: keep_last must be >= 1, got " + std::to_string(options.keep_last));
  }
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> writer, world.Split(0, world.rank()));
  MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(std::move(writer), mesh));
  std::error_code ec;
  std::filesystem::create_directories(options.root, ec);
  if (ec) return UnavailableError("CheckpointManager: cannot create '" + options.root + "': " + ec.message());
  return std::unique_ptr<CheckpointManager>(new CheckpointManager(std::move(options), std::move(ctx)));
}

Status CheckpointManager::Wait() {
  if (!writer_.joinable()) return Status::Ok();
  const Clock::time_point t0 = Clock::now();
  writer_.join();
  stats_.wait_seconds += Since(t0);
  stats_.write_seconds += writer_seconds_;
  const Status s = writer_status_;
  writer_status_ = Status::Ok();
  if (s.ok()) {
    ++stats_.saves;
    stats_.last_committed_step = writer_step_;
  }
  return s;
}

Status CheckpointManager::Write(int64_t step, const std::vector<std::pair<std::string, DTensor>>& snapshot,
                                const std::string& extra) {
  std::vector<std::pair<std::string, const DTensor*>> refs;
  refs.reserve(snapshot.size());
  for (const auto& [name, t] : snapshot) refs.emplace_back(name, &t);
  SaveOptions so;
  so.extra_state = extra;
  MF_RETURN_IF_ERROR(SaveCheckpoint(StepCheckpointDir(options_.root, step), refs, comms_, so));
  if (comms_.world_rank() != 0) return Status::Ok();
  // Retention: remove the oldest complete checkpoints beyond keep_last (never the one just saved).
  MF_ASSIGN_OR_RETURN(std::vector<TrainCheckpoint> all, ListCheckpoints(options_.root));
  const size_t keep = static_cast<size_t>(options_.keep_last);
  for (size_t i = 0; i + keep < all.size(); ++i) {
    if (all[i].step >= step) break;
    std::error_code ec;
    std::filesystem::remove_all(all[i].dir, ec);
    std::filesystem::remove_all(all[i].dir + ".old", ec);
    std::filesystem::remove(all[i].dir + ".lock", ec);
    std::filesystem::remove(all[i].dir + ".commit-lock", ec);
  }
  return Status::Ok();
}

Status CheckpointManager::Save(int64_t step, const std::vector<std::pair<std::string, const DTensor*>>& tensors,
                               std::string extra_state) {
  if (step < 0) return InvalidArgumentError("CheckpointManager::Save: negative step " + std::to_string(step));
  MF_RETURN_IF_ERROR(Wait());
  if (step <= last_step_) {
    return InvalidArgumentError("CheckpointManager::Save: step " + std::to_string(step) +
                                " is not above the previous save's step " + std::to_string(last_step_));
  }
  const Clock::time_point t0 = Clock::now();
  std::vector<std::pair<std::string, DTensor>> snapshot;
  snapshot.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (t == nullptr) return InvalidArgumentError("CheckpointManager::Save: tensor '" + name + "' is null");
    MF_ASSIGN_OR_RETURN(DTensor copy, OnHost(*t));  // a deep copy of the local part, in host memory
    snapshot.emplace_back(name, std::move(copy));
  }
  stats_.snapshot_seconds += Since(t0);
  last_step_ = step;
  writer_step_ = step;
  if (!options_.async) {
    const Clock::time_point w0 = Clock::now();
    const Status s = Write(step, snapshot, extra_state);
    stats_.write_seconds += Since(w0);
    if (s.ok()) {
      ++stats_.saves;
      stats_.last_committed_step = step;
    }
    return s;
  }
  writer_seconds_ = 0;
  writer_ = std::thread([this, step, snap = std::move(snapshot), extra = std::move(extra_state)]() {
    const Clock::time_point w0 = Clock::now();
    writer_status_ = Write(step, snap, extra);
    writer_seconds_ = Since(w0);
  });
  return Status::Ok();
}

}  // namespace meshflow
