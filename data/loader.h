// DataLoader: deterministic, sharded, exactly resumable data loading that yields DTensor batches.
//
// The global stream. Epoch e visits the dataset's n samples in the order SampleOrder(n, seed, e,
// shuffle) (sample_order.h): a function of (seed, epoch) only, never of the world size. Global
// batch k of an epoch covers stream positions [k*B, k*B + B) (B = global batch size). Remainder
// policy for the last batch of an epoch when B does not divide n:
//   drop_last = false (default): positions >= n wrap around to position (p mod n) of the same
//     epoch's order, like torch's DistributedSampler padding; an epoch has ceil(n/B) batches and
//     ceil(n/B)*B - n repeated samples (repeated_per_epoch(), Batch::num_repeated).
//   drop_last = true: the n mod B samples at the end of the epoch's order are skipped this epoch;
//     an epoch has floor(n/B) batches (an error when that is 0).
// After an epoch's last batch the stream continues with epoch e+1 (a new order). With
// num_epochs > 0, Next() returns OUT_OF_RANGE ("end of data") once that many epochs are done.
//
// Sharding. Next() returns this rank's DTensor of the global batch, global shape
// [B, ...sample shape], layout Shard(0) on the data-parallel mesh dims and Replicate on the others.
// The rank's rows are its layout box on dim 0: with one dp mesh dim exactly torch.chunk of the
// batch over the dp group (chunk = ceil(B/dp), trailing ranks may get short or empty shards; see
// DataLoaderOptions::even_batches for equal ones); with several dp dims the layout's nested
// torch.chunk in the order the dims are given (identical to a flat chunk over the flattened group
// whenever B is a multiple of the dp size). Ranks that differ only in non-dp mesh coordinates get
// identical rows. Row r of the global batch at position k*B + r holds sample
// SampleOrder(...).At((k*B + r) mod n). Without DataLoaderOptions::dp_dims the dp dims are the
// mesh's data-parallel names (IsDataParallelDimName).
//
// State and elastic resumption. state() is the LoaderState after the last batch Next() returned
// (prefetched batches do not count): the position {seed, epoch, consumed = stream positions
// consumed in this epoch, num_samples} plus the config the stream depends on (batch_size,
// shuffle, drop_last) and the dataset's fingerprint. Restore(state) makes the next batch start at
// that position without reading any earlier sample, after checking that seed, size, shuffle,
// drop_last and fingerprint match (another dataset of the same size, or the same one with another
// order, is refused). The stream does not depend on the mesh, so a state saved with one dp size
// (or batch size, even_batches, reader count) restores on another: the union of the ranks' rows
// of every later global batch is the same as in an uninterrupted run - nothing lost, nothing
// repeated.
//
// Prefetch. With prefetch_depth > 0, num_readers background threads read whole batches ahead
// (up to max(prefetch_depth, num_readers) of them) and the consumer takes them in stream order
// (the threads start on the first Next(), so Restore right after Create reads nothing twice). A
// read error is returned by the Next() that would have returned that batch, and by every later
// call (until Restore). Restore and the destructor stop and join the threads.
// Next/NextBatch/state/Restore must be called from one thread at a time; datasets must have a
// thread-safe Read.
//
//   MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({2, 2}, {"dp", "tp"}));
//   MF_ASSIGN_OR_RETURN(auto ds, TokenFileDataset::Open("train.bin", {.seq_len = 256}));
//   MF_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(ds, mesh, my_rank,
//                           {.dp_dims = {"dp"}, .global_batch_size = 32, .seed = 1234}));
//   MF_ASSIGN_OR_RETURN(DTensor batch, loader->Next());   // global [32, 257], local [16, 257]
//   std::string saved = loader->state().ToString();        // ... later, maybe on another mesh:
//   MF_ASSIGN_OR_RETURN(LoaderState st, LoaderState::Parse(saved));
//   MF_RETURN_IF_ERROR(other_loader->Restore(st));
#ifndef MESHFLOW_DATA_LOADER_H_
#define MESHFLOW_DATA_LOADER_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/data/dataset.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {

// Where the loader is in the global stream, plus the config and dataset the stream depends on.
// Text form (ToString / Parse round-trip exactly):
//   "meshflow.data.LoaderState v2 seed=42 epoch=3 consumed=128 num_samples=1000 batch_size=32
//    shuffle=1 drop_last=0 dataset=00c0ffee12345678"                          (one line)
// A v2 text carries shuffle, drop_last and dataset (batch_size is optional: it is elastic); a v1
// text has none of them, and a state built in code may leave them unset. Restore refuses a state
// without them (it could not check that the stream is the same); RestoreUnchecked takes it and
// checks only the fields that are present.
struct LoaderState {
  static constexpr int kVersion = 2;
  int version = kVersion;
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t consumed = 0;     // stream positions of this epoch already returned (padding included)
  int64_t num_samples = 0;  // dataset size, checked by Restore
  // The config the stream depends on. batch_size is recorded but elastic (Restore accepts another
  // one: the stream continues at the same position); shuffle, drop_last and the dataset
  // fingerprint (Dataset::fingerprint(), e.g. the manifest hash) must match.
  std::optional<int64_t> batch_size = std::nullopt;
  std::optional<bool> shuffle = std::nullopt;
  std::optional<bool> drop_last = std::nullopt;
  std::optional<uint64_t> dataset_fingerprint = std::nullopt;

  std::string ToString() const;
  // Errors (INVALID_ARGUMENT naming the text): wrong prefix, missing / unknown / repeated field,
  // a non-numeric or negative value, a flag other than 0/1, a fingerprint that is not 16 hex
  // digits; UNIMPLEMENTED for a version other than 1 or 2.
  static StatusOr<LoaderState> Parse(std::string_view text);
  // Only the position (seed, epoch, consumed, num_samples), for comparisons in tests and tools.
  bool SamePosition(const LoaderState& o) const {
    return seed == o.seed && epoch == o.epoch && consumed == o.consumed && num_samples == o.num_samples;
  }
  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

// A mesh dim given by name ("dp") or index (0).
struct MeshDimRef {
  MeshDimRef(int index) : ref(index) {}                     // NOLINT
  MeshDimRef(std::string name) : ref(std::move(name)) {}    // NOLINT
  MeshDimRef(const char* name) : ref(std::string(name)) {}  // NOLINT
  std::variant<int, std::string> ref;
};

// The mesh dims a loader treats as data-parallel when DataLoaderOptions::dp_dims is empty: every
// dim named "dp", "data", "ddp", "fsdp" or starting with "dp_" (e.g. "dp_replicate", "dp_shard"),
// in mesh order.
bool IsDataParallelDimName(std::string_view name);

struct DataLoaderOptions {
  // Data-parallel mesh dims. Empty: the mesh's dims with a data-parallel name (above); a mesh of
  // more than one rank without such a dim is an error unless replicate_batch is set.
  std::vector<MeshDimRef> dp_dims = {};
  int64_t global_batch_size = 0;    // B >= 1
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;   // see the remainder policy above
  int prefetch_depth = 2;   // batches read ahead on background threads; 0 = read inside Next()
  int64_t num_epochs = 0;   // 0 = unbounded
  // Equal local batches: every dp rank gets ceil(B / dp) rows. The global batch tensor then has
  // dp * ceil(B / dp) rows; the (at most dp - 1) rows past B are padding that repeat the batch's
  // first rows (they sit at the end of the last ranks' shards: Batch::local_valid_rows). The
  // stream still advances by B per batch, so coverage and resume are unchanged.
  bool even_batches = false;
  // Reader threads filling the prefetch window (prefetch_depth >= 1). Each reads whole batches;
  // batches are returned in stream order. Up to max(prefetch_depth, num_readers) batches are in
  // flight or ready ahead of the consumer.
  int num_readers = 1;
  // Every rank gets the whole batch (no dp dims), on any mesh. Exclusive with dp_dims.
  bool replicate_batch = false;
};

// One batch with its bookkeeping.
struct Batch {
  DTensor data;                         // this rank's rows of the global batch
  int64_t epoch = 0;
  int64_t step = 0;                     // index of the global batch in its epoch
  int64_t position = 0;                 // stream position of global row 0 in its epoch
  int64_t row_offset = 0;               // first global row held by this rank
  std::vector<int64_t> sample_indices;  // dataset index of each local row
  int64_t num_repeated = 0;             // wrap-around rows in the whole global batch
  int64_t num_padding = 0;              // even_batches: padding rows past B in the global batch
  int64_t local_valid_rows = 0;         // leading local rows that are not padding
  LoaderState state_after;              // state() once this batch is returned
};

class DataLoader {
 public:
  // Errors: null or empty dataset; rank not in the mesh; an unknown, out-of-range or repeated dp
  // dim; no dp dim named or found on a mesh of several ranks (without replicate_batch);
  // dp_dims with replicate_batch; global_batch_size < 1; prefetch_depth < 0; num_readers < 1;
  // num_epochs < 0; drop_last with B > n.
  static StatusOr<std::unique_ptr<DataLoader>> Create(std::shared_ptr<const Dataset> dataset, DeviceMesh mesh,
                                                      int rank, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch for this rank. OUT_OF_RANGE at the end of num_epochs; read errors as above.
  StatusOr<DTensor> Next();
  StatusOr<Batch> NextBatch();

  LoaderState state() const { return state_; }
  // Resumes at `state`. Errors (FAILED_PRECONDITION naming the field and both values): seed,
  // num_samples, shuffle, drop_last or the dataset fingerprint differ from this loader's, or the
  // state lacks shuffle, drop_last or the fingerprint (a v1 state, one built in code: it cannot be
  // checked; see RestoreUnchecked); INVALID_ARGUMENT for a negative epoch, consumed outside
  // [0, n]. A different batch_size (and any mesh / dp size / even_batches) is accepted: the next
  // batch starts at position `consumed` of the same epoch order.
  Status Restore(const LoaderState& state);
  // Restore for a state that may lack the config fields (old v1 states, states built in code):
  // the caller vouches that it was saved with this loader's shuffle, drop_last and dataset; the
  // fields that are present are still checked.
  Status RestoreUnchecked(const LoaderState& state);

  const Layout& layout() const { return layout_; }
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  int rank() const { return rank_; }
  int dp_size() const { return dp_size_; }
  int dp_rank() const { return dp_rank_; }
  // This rank's rows [begin, end) of every global batch.
  Interval local_rows() const { return rows_; }
  int64_t batches_per_epoch() const;
  // Wrap-around samples per epoch (drop_last = false) and samples skipped per epoch (true).
  int64_t repeated_per_epoch() const;
  int64_t dropped_per_epoch() const;

 private:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options, Layout layout, int rank);

  // The state that starts the next batch: rolls (epoch, consumed) over to the next epoch when no
  // batch starts at `consumed`.
  LoaderState Normalize(LoaderState s) const;
  // The state after the batch starting at `s`.
  LoaderState Advance(LoaderState s) const;
  bool AtEnd(const LoaderState& s) const { return options_.num_epochs > 0 && s.epoch >= options_.num_epochs; }
  StatusOr<Batch> Produce(const LoaderState& at) const;
  void StartWorkers();
  void StopWorkers();
  void ReaderLoop();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  Layout layout_;
  int rank_ = 0;
  int dp_size_ = 1;
  int dp_rank_ = 0;
  Interval rows_;
  LoaderState state_;          // consumer side: after the last returned batch
  Status RestoreImpl(const LoaderState& state);
  Status sticky_;              // first error returned by Next (repeated until Restore)

  // Prefetch (guarded by mu_). Readers claim batch sequence numbers in order (claim_cursor_ is
  // the state the next claimed batch starts at), read outside the lock and file the result under
  // its number; the consumer takes number next_consume_ when it is ready.
  std::mutex mu_;
  std::condition_variable can_claim_, ready_cv_;
  std::map<int64_t, StatusOr<Batch>> ready_;
  LoaderState claim_cursor_;
  int64_t next_claim_ = 0;
  int64_t next_consume_ = 0;
  bool claims_done_ = false;  // an error or the end of data was claimed
  bool stop_ = false;
  std::vector<std::thread> readers_;
  bool workers_running_ = false;  // touched only by the consumer thread
};

}  // namespace meshflow

#endif  // MESHFLOW_DATA_LOADER_H_
