// Property tests of MixtureDataset (mixture.h) and PackedTokenDataset (packed.h) under the
// DataLoader: exactly-once per epoch, world-size independence, exact elastic resume; plus the
// exact proportions of a mixture and the boundary rows of packing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "meshflow/data/dataset.h"
#include "meshflow/data/loader.h"
#include "meshflow/data/mixture.h"
#include "meshflow/data/packed.h"
#include "meshflow/data/test_util.h"
#include "meshflow/data/token_file.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Sample i of dataset `tag` = {tag, i} (i64).
std::shared_ptr<const Dataset> Tagged(int64_t tag, int64_t n) {
  Tensor t = Tensor::Zeros(DType::kI64, {n, 2});
  for (int64_t i = 0; i < n; ++i) {
    t.data<int64_t>()[static_cast<size_t>(2 * i)] = tag;
    t.data<int64_t>()[static_cast<size_t>(2 * i + 1)] = i;
  }
  return *InMemoryDataset::FromTensor(t);
}

// One global batch: the rows (as element vectors) assembled from every dp coordinate of a mesh
// {dp, tp}, plus the virtual sample index of each row.
struct Global {
  std::vector<std::vector<int64_t>> rows;
  std::vector<int64_t> indices;
  friend bool operator==(const Global&, const Global&) = default;
};

struct Job {
  std::vector<std::unique_ptr<DataLoader>> loaders;
  int64_t batch = 0;
};

Job Make(std::shared_ptr<const Dataset> ds, int dp, int tp, DataLoaderOptions o) {
  Job r;
  r.batch = o.global_batch_size;
  const DeviceMesh mesh = *DeviceMesh::Create({dp, tp}, {"dp", "tp"});
  for (int rank = 0; rank < mesh.size(); ++rank) {
    auto l = DataLoader::Create(ds, mesh, rank, o);
    EXPECT_TRUE(l.ok()) << l.status();
    r.loaders.push_back(std::move(*l));
  }
  return r;
}

std::vector<int64_t> AsI64(const Tensor& t, int64_t row, int64_t elems) {
  std::vector<int64_t> out(static_cast<size_t>(elems));
  if (t.dtype() == DType::kI64) {
    std::memcpy(out.data(), t.data<int64_t>().data() + row * elems, static_cast<size_t>(elems) * 8);
  } else {
    for (int64_t e = 0; e < elems; ++e) out[static_cast<size_t>(e)] = t.data<int32_t>()[static_cast<size_t>(row * elems + e)];
  }
  return out;
}

Global Step(Job& r) {
  Global g;
  g.rows.assign(static_cast<size_t>(r.batch), {});
  g.indices.assign(static_cast<size_t>(r.batch), -1);
  for (auto& l : r.loaders) {
    auto b = l->NextBatch();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return g;
    const int64_t elems = l->dataset().sample_elements();
    for (size_t i = 0; i < b->sample_indices.size(); ++i) {
      const size_t row = static_cast<size_t>(b->row_offset) + i;
      std::vector<int64_t> v = AsI64(b->data.local(), static_cast<int64_t>(i), elems);
      if (g.indices[row] >= 0) {
        EXPECT_EQ(g.rows[row], v) << "tp replicas differ";
      }
      g.rows[row] = std::move(v);
      g.indices[row] = b->sample_indices[i];
    }
  }
  return g;
}

std::vector<Global> Steps(Job& r, int64_t n) {
  std::vector<Global> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(Step(r));
  return out;
}

// The loader guarantees for any dataset: exactly-once per epoch (the first n positions), the
// same stream on other meshes, exact resume on another dp size from a state saved anywhere.
void CheckLoaderGuarantees(std::shared_ptr<const Dataset> ds, int64_t batch) {
  const int64_t n = ds->size();
  DataLoaderOptions o{.global_batch_size = batch, .seed = 99, .prefetch_depth = 2, .num_readers = 2};
  Job ref = Make(ds, 1, 1, o);
  const int64_t per_epoch = (n + batch - 1) / batch;
  const std::vector<Global> expected = Steps(ref, 2 * per_epoch + 1);
  // Exactly once per epoch.
  for (int64_t e = 0; e < 2; ++e) {
    std::vector<int64_t> seen;
    for (int64_t s = 0; s < per_epoch; ++s) {
      const Global& g = expected[static_cast<size_t>(e * per_epoch + s)];
      seen.insert(seen.end(), g.indices.begin(), g.indices.end());
    }
    seen.resize(static_cast<size_t>(n));  // the tail repeats the epoch's start
    std::sort(seen.begin(), seen.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], i) << "epoch " << e;
  }
  // World-size independence.
  for (auto [dp, tp] : {std::pair{3, 1}, std::pair{2, 2}, std::pair{8, 1}}) {
    Job other = Make(ds, dp, tp, o);
    EXPECT_EQ(Steps(other, static_cast<int64_t>(expected.size())), expected) << "dp=" << dp << " tp=" << tp;
  }
  // Exact elastic resume.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t stop = 1 + static_cast<int64_t>(rng() % (expected.size() - 1));
    Job first = Make(ds, 2, 1, o);
    std::vector<Global> got = Steps(first, stop);
    const std::string saved = first.loaders[1]->state().ToString();
    Job second = Make(ds, 3, 2, o);
    for (auto& l : second.loaders) ASSERT_TRUE(l->Restore(*LoaderState::Parse(saved)).ok());
    std::vector<Global> rest = Steps(second, static_cast<int64_t>(expected.size()) - stop);
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, expected) << "stop=" << stop;
  }
}

// Every (epoch, stream position) a run returned, with the sample index and the dp coordinate
// that returned it. Padding rows (even_batches) are not positions.
struct Positions {
  std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, int>> at;  // (epoch, p) -> (index, dp rank)
};

struct Config {
  int dp = 1, tp = 1;
  DataLoaderOptions options;
};

std::string Describe(const Config& c) {
  return "dp=" + std::to_string(c.dp) + " tp=" + std::to_string(c.tp) + " B=" +
         std::to_string(c.options.global_batch_size) + " shuffle=" + std::to_string(c.options.shuffle) +
         " drop_last=" + std::to_string(c.options.drop_last) + " even=" + std::to_string(c.options.even_batches) +
         " prefetch=" + std::to_string(c.options.prefetch_depth) + " readers=" + std::to_string(c.options.num_readers);
}

// Runs `steps` global batches of every rank of c's mesh (after restoring `from`, if given) and
// records their positions into `out`. Checks each row's data against Dataset::Read, that tp
// replicas agree and that no position is returned by two dp coordinates or twice. Returns the
// state after the last batch.
LoaderState Run(std::shared_ptr<const Dataset> ds, const Config& c, int64_t steps, const std::string* from,
                Positions* out) {
  Job job = Make(ds, c.dp, c.tp, c.options);
  LoaderState last;
  if (job.loaders.size() != static_cast<size_t>(c.dp * c.tp)) return last;
  if (from != nullptr) {
    const StatusOr<LoaderState> st = LoaderState::Parse(*from);
    EXPECT_TRUE(st.ok()) << st.status();
    for (auto& l : job.loaders) EXPECT_TRUE(l->Restore(*st).ok());
  }
  const int64_t bytes = ds->sample_bytes();
  std::vector<std::byte> want(static_cast<size_t>(bytes));
  for (int64_t step = 0; step < steps; ++step) {
    std::map<std::pair<int64_t, int64_t>, int64_t> this_step;  // tp replicas of this step
    for (auto& l : job.loaders) {
      auto b = l->NextBatch();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok()) return last;
      last = b->state_after;
      for (int64_t i = 0; i < b->local_valid_rows; ++i) {
        const int64_t index = b->sample_indices[static_cast<size_t>(i)];
        EXPECT_TRUE(ds->Read(index, want).ok());
        EXPECT_EQ(std::memcmp(b->data.local().raw() + i * bytes, want.data(), static_cast<size_t>(bytes)), 0)
            << "row data differs from sample " << index;
        const std::pair<int64_t, int64_t> key{b->epoch, b->position + b->row_offset + i};
        auto [it, fresh] = out->at.emplace(key, std::pair{index, l->dp_rank()});
        if (!fresh) {
          const bool replica = this_step.count(key) > 0 && it->second.second == l->dp_rank();
          EXPECT_TRUE(replica) << "epoch " << key.first << " position " << key.second << " returned twice";
          EXPECT_EQ(it->second.first, index) << "tp replicas differ";
        }
        this_step[key] = index;
      }
    }
  }
  return last;
}

// Checks the recorded positions of epochs [0, epochs) against the reference order `ref`
// (ref[e][p] = sample of position p of epoch e, from a batch-1 loader): each epoch's positions
// are [0, end) without a gap, end is n without drop_last (plus the wrap-around repeats of the
// last batch) and within one batch of n with it, and position p holds ref[e][p mod n].
void CheckPositions(const Positions& got, const std::vector<std::vector<int64_t>>& ref, int64_t epochs,
                    bool drop_last, int64_t max_batch) {
  const int64_t n = static_cast<int64_t>(ref[0].size());
  for (int64_t e = 0; e < epochs; ++e) {
    int64_t end = 0;
    for (const auto& [key, v] : got.at) {
      if (key.first != e) continue;
      ASSERT_EQ(key.second, end) << "epoch " << e << ": a gap before position " << key.second;
      EXPECT_EQ(v.first, ref[static_cast<size_t>(e)][static_cast<size_t>(key.second % n)])
          << "epoch " << e << " position " << key.second;
      ++end;
    }
    if (drop_last) {
      EXPECT_LE(end, n) << "epoch " << e;
      EXPECT_LT(n - end, max_batch) << "epoch " << e;
    } else {
      EXPECT_GE(end, n) << "epoch " << e;
      EXPECT_LT(end - n, max_batch) << "epoch " << e;
    }
  }
}

// The loader's guarantees for `ds` over many configs: exactly once per epoch (the reference
// order is a permutation and every run follows it position by position), independence of the
// mesh, even_batches, readers and prefetch, and exact elastic resume onto another mesh, batch
// size, even_batches and reader count.
void CheckGuaranteesAcrossConfigs(std::shared_ptr<const Dataset> ds, uint64_t seed) {
  const int64_t n = ds->size();
  for (bool shuffle : {true, false}) {
    for (bool drop_last : {false, true}) {
      SCOPED_TRACE("shuffle=" + std::to_string(shuffle) + " drop_last=" + std::to_string(drop_last));
      // Reference: batch size 1, synchronous, one rank; three epochs.
      std::vector<std::vector<int64_t>> ref(3);
      {
        Job r = Make(ds, 1, 1, {.global_batch_size = 1, .seed = 77, .shuffle = shuffle, .prefetch_depth = 0});
        for (auto& epoch : ref) {
          for (int64_t p = 0; p < n; ++p) epoch.push_back(r.loaders[0]->NextBatch()->sample_indices[0]);
          std::vector<int64_t> sorted = epoch;
          std::sort(sorted.begin(), sorted.end());
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i) << "not a permutation";
        }
        if (shuffle) {
          EXPECT_NE(ref[0], ref[1]) << "a fresh order per epoch";
        }
      }
      std::mt19937_64 rng(seed);
      auto random_config = [&] {
        Config c;
        const int meshes[][2] = {{1, 1}, {2, 1}, {3, 1}, {2, 2}, {4, 2}, {8, 1}};
        const auto& m = meshes[rng() % 6];
        c.dp = m[0];
        c.tp = m[1];
        c.options = {.global_batch_size = 1 + static_cast<int64_t>(rng() % 11),
                     .seed = 77,
                     .shuffle = shuffle,
                     .drop_last = drop_last,
                     .prefetch_depth = static_cast<int>(rng() % 4),
                     .even_batches = rng() % 2 == 1,
                     .num_readers = 1 + static_cast<int>(rng() % 3)};
        return c;
      };
      // Whole runs of two epochs.
      for (int trial = 0; trial < 4; ++trial) {
        const Config c = random_config();
        SCOPED_TRACE(Describe(c));
        const int64_t b = c.options.global_batch_size;
        const int64_t per_epoch = drop_last ? n / b : (n + b - 1) / b;
        Positions got;
        Run(ds, c, 2 * per_epoch, nullptr, &got);
        CheckPositions(got, ref, 2, drop_last, b);
      }
      // A stop anywhere in the first two epochs, resumed on another config.
      for (int trial = 0; trial < 4; ++trial) {
        const Config c1 = random_config(), c2 = random_config();
        const int64_t b1 = c1.options.global_batch_size, b2 = c2.options.global_batch_size;
        const int64_t stop = static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * n / b1 + 1));
        SCOPED_TRACE("stop after " + std::to_string(stop) + " of " + Describe(c1) + ", resumed on " + Describe(c2));
        Positions got;
        const LoaderState st = Run(ds, c1, stop, nullptr, &got);
        const std::string saved = stop > 0 ? st.ToString() : std::string();
        Run(ds, c2, (2 * n + 2 * b1) / b2 + 2, stop > 0 ? &saved : nullptr, &got);
        CheckPositions(got, ref, 2, drop_last, std::max(b1, b2));
      }
    }
  }
}

// ---- Mixing ----

TEST(Mixture, ExactProportionsUpAndDownSampling) {
  auto mix = MixtureDataset::Create({{Tagged(0, 10), 0.5}, {Tagged(1, 100), 0.3}, {Tagged(2, 7), 0.2}},
                                    {.num_samples = 101, .seed = 3});
  ASSERT_TRUE(mix.ok()) << mix.status();
  // 50.5, 30.3, 20.2 -> 50, 30, 20 + the largest remainder (component 0) -> 51, 30, 20.
  EXPECT_EQ((*mix)->size(), 101);
  EXPECT_EQ((*mix)->count(0), 51);
  EXPECT_EQ((*mix)->count(1), 30);
  EXPECT_EQ((*mix)->count(2), 20);
  std::map<std::pair<int, int64_t>, int> hits;
  std::vector<int64_t> per(3, 0);
  for (int64_t i = 0; i < 101; ++i) {
    const auto [s, j] = (*mix)->Locate(i);
    ++hits[{s, j}];
    ++per[static_cast<size_t>(s)];
    std::vector<int64_t> v(2);
    ASSERT_TRUE((*mix)->Read(i, std::as_writable_bytes(std::span<int64_t>(v))).ok());
    EXPECT_EQ(v, (std::vector<int64_t>{s, j}));
  }
  EXPECT_EQ(per, (std::vector<int64_t>{51, 30, 20}));
  // Upsampled component 0 (10 samples, 51 slots): each sample 5 or 6 times; component 2 (7, 20):
  // 2 or 3 times; downsampled component 1: 30 distinct samples.
  for (int64_t j = 0; j < 10; ++j) { const int c = hits[{0, j}]; EXPECT_TRUE(c == 5 || c == 6) << j; }
  for (int64_t j = 0; j < 7; ++j) { const int c = hits[{2, j}]; EXPECT_TRUE(c == 2 || c == 3) << j; }
  int distinct1 = 0;
  for (const auto& [k, c] : hits) {
    if (k.first == 1) {
      EXPECT_EQ(c, 1);
      ++distinct1;
    }
  }
  EXPECT_EQ(distinct1, 30);
  // Deterministic, seed-dependent, fingerprinted.
  auto again = MixtureDataset::Create({{Tagged(0, 10), 0.5}, {Tagged(1, 100), 0.3}, {Tagged(2, 7), 0.2}},
                                      {.num_samples = 101, .seed = 3});
  auto other_seed = MixtureDataset::Create({{Tagged(0, 10), 0.5}, {Tagged(1, 100), 0.3}, {Tagged(2, 7), 0.2}},
                                           {.num_samples = 101, .seed = 4});
  auto other_weights = MixtureDataset::Create({{Tagged(0, 10), 0.4}, {Tagged(1, 100), 0.4}, {Tagged(2, 7), 0.2}},
                                              {.num_samples = 101, .seed = 3});
  for (int64_t i = 0; i < 101; ++i) EXPECT_EQ((*again)->Locate(i), (*mix)->Locate(i));
  EXPECT_EQ((*again)->fingerprint(), (*mix)->fingerprint());
  EXPECT_NE((*other_seed)->fingerprint(), (*mix)->fingerprint());
  EXPECT_NE((*other_weights)->fingerprint(), (*mix)->fingerprint());
}

TEST(Mixture, KeepsTheLoaderGuarantees) {
  auto mix = MixtureDataset::Create({{Tagged(0, 13), 2.0}, {Tagged(1, 40), 1.0}, {Tagged(2, 5), 1.0}},
                                    {.num_samples = 57, .seed = 11});
  ASSERT_TRUE(mix.ok()) << mix.status();
  CheckLoaderGuarantees(*mix, 8);
  CheckGuaranteesAcrossConfigs(*mix, 1);
  // Per loader epoch the components appear exactly count(s) times.
  Job r = Make(*mix, 2, 1, {.global_batch_size = 8, .seed = 5, .drop_last = false});
  std::vector<int64_t> per(3, 0);
  int64_t rows = 0;
  for (const Global& g : Steps(r, 8)) {  // ceil(57 / 8) = 8 batches = 64 rows, the last 7 repeat
    for (const auto& row : g.rows) {
      if (rows++ < 57) ++per[static_cast<size_t>(row[0])];
    }
  }
  EXPECT_EQ(per, (std::vector<int64_t>{(*mix)->count(0), (*mix)->count(1), (*mix)->count(2)}));
  // A state from another mixture (other weights, same size) is refused.
  auto other = MixtureDataset::Create({{Tagged(0, 13), 1.0}, {Tagged(1, 40), 2.0}, {Tagged(2, 5), 1.0}},
                                      {.num_samples = 57, .seed = 11});
  Job o = Make(*other, 1, 1, {.global_batch_size = 8, .seed = 5});
  const Status s = o.loaders[0]->Restore(r.loaders[0]->state());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "dataset fingerprint")) << s;
}

TEST(Mixture, Errors) {
  auto err = [](std::vector<MixtureComponent> c, MixtureOptions o = {}) {
    return MixtureDataset::Create(std::move(c), o).status();
  };
  EXPECT_TRUE(Contains(err({}).message(), "no components"));
  EXPECT_TRUE(Contains(err({{nullptr, 1.0}}).message(), "component 0 is null"));
  EXPECT_TRUE(Contains(err({{Tagged(0, 3), 1.0}, {Tagged(1, 3), -1.0}}).message(),
                       "component 1 has weight -1.000000; weights must be finite and > 0"));
  EXPECT_TRUE(Contains(err({{Tagged(0, 3), 1.0}, {*InMemoryDataset::FromTensor(Tensor::Iota(DType::kI64, {3, 3})), 1.0}})
                           .message(),
                       "component 1 (in-memory dataset) has dtype or sample shape unlike component 0"));
  EXPECT_TRUE(Contains(err({{Tagged(0, 3), 1000.0}, {Tagged(1, 3), 1.0}}, {.num_samples = 10}).message(),
                       "component 1 (weight 1.000000) gets 0 of 10 samples"));
  EXPECT_TRUE(Contains(err({{Tagged(0, 3), 1.0}}, {.num_samples = -1}).message(), "num_samples must be in [0, 2^48]"));
}

// ---- Packing ----

std::shared_ptr<const TokenFileDataset> Tokens(const std::vector<uint32_t>& t) {
  const std::string path = testing::FreshTempDir() + "/docs.mftok";
  EXPECT_TRUE(WriteTokenFile(path, t, TokenWidth::kU16).ok());
  return *TokenFileDataset::Open(path, {.seq_len = 1});
}

TEST(Packing, HeaderExample) {
  const uint32_t e = 99;
  auto packed = PackedTokenDataset::Create(Tokens({5, 6, e, 7, 8, 9, e, 3, 4}), {.seq_len = 8, .eos_token = 99});
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ((*packed)->sample_shape(), (std::vector<int64_t>{3, 9}));
  EXPECT_EQ((*packed)->size(), 1);
  EXPECT_EQ((*packed)->num_documents(), 3);
  std::vector<int32_t> v(27);
  ASSERT_TRUE((*packed)->Read(0, std::as_writable_bytes(std::span<int32_t>(v))).ok());
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.begin() + 9), (std::vector<int32_t>{5, 6, 99, 7, 8, 9, 99, 3, 4}));
  EXPECT_EQ(std::vector<int32_t>(v.begin() + 9, v.begin() + 18), (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(std::vector<int32_t>(v.begin() + 18, v.end()), (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 1, 2, 2}));
}

// Random documents: positions and segments match a brute-force walk; the loader guarantees hold.
TEST(Packing, RowsMatchBruteForceAndKeepTheLoaderGuarantees) {
  std::mt19937_64 rng(2024);
  const uint32_t eos = 0;
  std::vector<uint32_t> t;
  while (t.size() < 700) {
    const size_t len = 1 + rng() % 40;
    for (size_t i = 0; i < len; ++i) t.push_back(1 + static_cast<uint32_t>(rng() % 500));
    t.push_back(eos);
  }
  auto tokens = Tokens(t);
  const int64_t seq_len = 16;
  auto packed = PackedTokenDataset::Create(tokens, {.seq_len = seq_len, .eos_token = eos, .dtype = DType::kI64});
  ASSERT_TRUE(packed.ok()) << packed.status();
  const int64_t len = seq_len + 1;
  for (int64_t i = 0; i < (*packed)->size(); ++i) {
    std::vector<int64_t> v(static_cast<size_t>(3 * len));
    ASSERT_TRUE((*packed)->Read(i, std::as_writable_bytes(std::span<int64_t>(v))).ok());
    int64_t pos = 0, seg = 0;
    for (int64_t k = 0; k < len; ++k) {
      const size_t at = static_cast<size_t>(i * seq_len + k);
      if (k > 0 && t[at - 1] == eos) {
        pos = 0;
        ++seg;
      }
      ASSERT_EQ(v[static_cast<size_t>(k)], t[at]);
      ASSERT_EQ(v[static_cast<size_t>(len + k)], pos) << "sample " << i << " token " << k;
      ASSERT_EQ(v[static_cast<size_t>(2 * len + k)], seg) << "sample " << i << " token " << k;
      ++pos;
    }
  }
  CheckLoaderGuarantees(*packed, 6);
  CheckGuaranteesAcrossConfigs(*packed, 2);
}

TEST(Packing, Errors) {
  auto tokens = Tokens({1, 2, 3, 0, 4});
  EXPECT_TRUE(Contains(PackedTokenDataset::Create(nullptr, {.seq_len = 2}).status().message(), "token dataset is null"));
  EXPECT_TRUE(Contains(PackedTokenDataset::Create(tokens, {.seq_len = 0}).status().message(),
                       "seq_len must be in [1, 2^40], got 0"));
  EXPECT_TRUE(Contains(PackedTokenDataset::Create(tokens, {.seq_len = 5}).status().message(),
                       "holds 5 tokens, fewer than one sample (seq_len + 1 = 6)"));
  EXPECT_TRUE(Contains(PackedTokenDataset::Create(tokens, {.seq_len = 2, .eos_token = -1}).status().message(),
                       "eos_token must be >= 0, got -1"));
  EXPECT_TRUE(Contains(PackedTokenDataset::Create(tokens, {.seq_len = 2, .dtype = DType::kF32}).status().message(),
                       "output dtype must be i32 or i64, got f32"));
}

}  // namespace
}  // namespace meshflow
