// MixtureDataset: weighted mixing of several datasets into one, deterministic and resumable.
//
// The mixture is itself a Dataset of num_samples virtual samples, so the DataLoader's guarantees
// carry over unchanged: each virtual sample exactly once per loader epoch, the same global stream
// on any number of dp ranks, exact (elastic) resume from a LoaderState, whose fingerprint covers
// the components, their weights and the seed.
//
// Component s gets exactly count(s) virtual samples: its share weight(s) / sum(weights) of
// num_samples, rounded by largest remainder (ties to the lower index), so per loader epoch the
// proportions are exact to one sample. The counts are laid out as consecutive ranges of virtual
// indices (component 0 first); the loader's shuffle (DataLoaderOptions::shuffle, on by default)
// spreads them over the batches, so each batch holds the proportions in expectation. Without
// shuffle the batches follow the ranges: use shuffle with a mixture.
//
// Inside component s, its j-th virtual sample (0 <= j < count(s)) is sample
// SampleOrder(size(s), key(seed, s), j / size(s), shuffle = true).At(j mod size(s)): a component
// with count(s) > size(s) is upsampled (every sample count(s) / size(s) times, the rest once more,
// in a fresh order per pass), one with count(s) < size(s) is downsampled to a pseudo-random subset
// that depends only on (seed, s); the subset is the same in every loader epoch (change
// MixtureOptions::seed between runs to vary it).
//
//   MF_ASSIGN_OR_RETURN(auto mix, MixtureDataset::Create({{web, 0.7}, {code, 0.2}, {books, 0.1}},
//                                                        {.num_samples = 100000, .seed = 7}));
//   MF_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(mix, mesh, rank, {.global_batch_size = 64}));
//   mix->Locate(i)  ->  {component, index in the component} of virtual sample i
//
// Errors of Create (INVALID_ARGUMENT naming the component): no components, a null or empty
// component, a weight that is not finite and > 0, dtype or sample shape differing from component
// 0, num_samples < 0 or > 2^48, a component whose share rounds to 0 samples.
#ifndef MESHFLOW_DATA_MIXTURE_H_
#define MESHFLOW_DATA_MIXTURE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/data/dataset.h"

namespace meshflow {

struct MixtureComponent {
  std::shared_ptr<const Dataset> dataset;
  double weight = 1.0;
};

struct MixtureOptions {
  int64_t num_samples = 0;  // virtual samples per loader epoch; 0 = the sum of the component sizes
  uint64_t seed = 0;        // picks the subsets / orders inside the components
};

class MixtureDataset final : public Dataset {
 public:
  static StatusOr<std::shared_ptr<MixtureDataset>> Create(std::vector<MixtureComponent> components,
                                                          MixtureOptions options = {});

  int64_t size() const override { return total_; }
  DType dtype() const override { return components_[0].dataset->dtype(); }
  const std::vector<int64_t>& sample_shape() const override { return components_[0].dataset->sample_shape(); }
  std::string name() const override;
  uint64_t fingerprint() const override { return fingerprint_; }

  int num_components() const { return static_cast<int>(components_.size()); }
  // Virtual samples of component s per epoch.
  int64_t count(int s) const { return starts_[static_cast<size_t>(s) + 1] - starts_[static_cast<size_t>(s)]; }
  // {component, index in that component} of virtual sample i. Precondition: 0 <= i < size().
  std::pair<int, int64_t> Locate(int64_t i) const;

 protected:
  Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const override;

 private:
  MixtureDataset() = default;
  std::vector<MixtureComponent> components_;
  std::vector<int64_t> starts_;  // starts_[s] = first virtual index of component s; back() = total
  MixtureOptions options_;
  int64_t total_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_DATA_MIXTURE_H_
