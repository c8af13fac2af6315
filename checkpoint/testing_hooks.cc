// The process-wide test hook of checkpoint saves and loads (testing_hooks.h).
#include "meshflow/checkpoint/testing_hooks.h"

#include <memory>
#include <mutex>

namespace meshflow {
namespace {

std::mutex& HookMu() {
  static auto* mu = new std::mutex();
  return *mu;
}

std::shared_ptr<const CheckpointTestHook>& HookSlot() {
  static auto* slot = new std::shared_ptr<const CheckpointTestHook>();
  return *slot;
}

}  // namespace

void SetCheckpointTestHook(CheckpointTestHook hook) {
  auto p = hook ? std::make_shared<const CheckpointTestHook>(std::move(hook)) : nullptr;
  std::lock_guard<std::mutex> lock(HookMu());
  HookSlot() = std::move(p);
}

Status RunCheckpointTestHook(std::string_view point, int world_rank) {
  std::shared_ptr<const CheckpointTestHook> hook;
  {
    std::lock_guard<std::mutex> lock(HookMu());
    hook = HookSlot();
  }
  if (hook && *hook) return (*hook)(point, world_rank);
  return Status();
}

}  // namespace meshflow
