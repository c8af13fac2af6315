// Fuzz target: LoaderState::Parse and DataLoader::Restore (data/loader.h).
//
// The input is the state text. Checks: Parse OK -> ToString parses back to the same state;
// Restore of a parsed state onto a fixed loader (40 samples, B = 6, seed 42, 2 dp ranks, prefetch
// with 2 readers) either fails with FAILED_PRECONDITION / INVALID_ARGUMENT / UNIMPLEMENTED or
// succeeds, and then the next batch is the one at the restored position (epoch and position
// match the state after the roll-over); every error has a message; nothing crashes or hangs.
// Seeds: tests/fuzz/corpus/loader_state/ (make_data_seeds.py).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "meshflow/data/dataset.h"
#include "meshflow/data/loader.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/tests/fuzz/fuzz_input.h"

namespace meshflow::fuzz {
namespace {

DataLoader& Loader() {
  static DataLoader* loader = [] {
    auto ds = *InMemoryDataset::FromTensor(Tensor::Iota(DType::kI32, {40, 2}));
    return DataLoader::Create(ds, *DeviceMesh::Create({2}, {"dp"}), 1,
                              {.global_batch_size = 6, .seed = 42, .prefetch_depth = 2, .num_readers = 2})
        ->release();
  }();
  return *loader;
}

void Run(std::string_view text) {
  auto st = LoaderState::Parse(text);
  if (!st.ok()) {
    FUZZ_CHECK(!st.status().message().empty(), "Parse: error without a message");
    FUZZ_CHECK(st.status().code() == StatusCode::kInvalidArgument || st.status().code() == StatusCode::kUnimplemented,
               "Parse: unexpected code " << st.status());
    return;
  }
  auto again = LoaderState::Parse(st->ToString());
  FUZZ_CHECK(again.ok() && *again == *st, "round trip of '" << text << "': " << again.status());
  DataLoader& loader = Loader();
  const Status s = loader.Restore(*st);
  if (!s.ok()) {
    FUZZ_CHECK(!s.message().empty(), "Restore: error without a message");
    FUZZ_CHECK(s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kInvalidArgument ||
                   s.code() == StatusCode::kUnimplemented,
               "Restore: unexpected code " << s);
    return;
  }
  const LoaderState at = loader.state();
  if (at.epoch > (int64_t{1} << 40)) return;  // SampleOrder keys any epoch; skip absurd ones for speed
  auto b = loader.NextBatch();
  FUZZ_CHECK(b.ok(), "Next after a successful Restore: " << b.status());
  FUZZ_CHECK(b->epoch == at.epoch && b->position == at.consumed,
             "batch at epoch " << b->epoch << " position " << b->position << ", state said " << at.ToString());
}

}  // namespace
}  // namespace meshflow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshflow::fuzz::Run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
