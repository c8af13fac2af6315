#include "meshflow/data/mixture.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "meshflow/data/sample_order.h"

namespace meshflow {

StatusOr<std::shared_ptr<MixtureDataset>> MixtureDataset::Create(std::vector<MixtureComponent> components,
                                                                 MixtureOptions options) {
  if (components.empty()) return InvalidArgumentError("MixtureDataset: no components");
  double sum = 0;
  int64_t total_size = 0;
  for (size_t s = 0; s < components.size(); ++s) {
    const std::string what = "MixtureDataset: component " + std::to_string(s);
    const MixtureComponent& c = components[s];
    if (c.dataset == nullptr) return InvalidArgumentError(what + " is null");
    if (c.dataset->size() < 1) return InvalidArgumentError(what + " (" + c.dataset->name() + ") has no samples");
    if (!std::isfinite(c.weight) || c.weight <= 0) {
      return InvalidArgumentError(what + " has weight " + std::to_string(c.weight) + "; weights must be finite and > 0");
    }
    if (c.dataset->dtype() != components[0].dataset->dtype() ||
        c.dataset->sample_shape() != components[0].dataset->sample_shape()) {
      return InvalidArgumentError(what + " (" + c.dataset->name() + ") has dtype or sample shape unlike component 0 (" +
                                  components[0].dataset->name() + ")");
    }
    sum += c.weight;
    total_size += std::min<int64_t>(c.dataset->size(), int64_t{1} << 48);
  }
  if (options.num_samples < 0 || options.num_samples > (int64_t{1} << 48)) {
    return InvalidArgumentError("MixtureDataset: num_samples must be in [0, 2^48], got " +
                                std::to_string(options.num_samples));
  }
  const int64_t n = options.num_samples == 0 ? std::min<int64_t>(total_size, int64_t{1} << 48) : options.num_samples;
  // Largest remainder: floor shares, then one more to the largest fractional parts.
  std::vector<int64_t> counts(components.size());
  std::vector<double> frac(components.size());
  int64_t assigned = 0;
  for (size_t s = 0; s < components.size(); ++s) {
    const double share = static_cast<double>(n) * (components[s].weight / sum);
    counts[s] = static_cast<int64_t>(std::floor(share));
    frac[s] = share - std::floor(share);
    assigned += counts[s];
  }
  std::vector<size_t> order(components.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return frac[a] > frac[b]; });
  for (size_t k = 0; assigned < n; k = (k + 1) % order.size(), ++assigned) ++counts[order[k]];
  for (size_t k = 0; assigned > n; k = (k + 1) % order.size()) {  // floating-point excess (rare)
    if (counts[order[order.size() - 1 - k]] > 0) {
      --counts[order[order.size() - 1 - k]];
      --assigned;
    }
  }
  for (size_t s = 0; s < components.size(); ++s) {
    if (counts[s] == 0) {
      return InvalidArgumentError("MixtureDataset: component " + std::to_string(s) + " (weight " +
                                  std::to_string(components[s].weight) + ") gets 0 of " + std::to_string(n) +
                                  " samples; raise its weight or num_samples");
    }
  }
  auto ds = std::shared_ptr<MixtureDataset>(new MixtureDataset());
  ds->starts_.push_back(0);
  uint64_t fp = FingerprintCombine(0x6d662d6d69787475ull, options.seed);
  for (size_t s = 0; s < components.size(); ++s) {
    ds->starts_.push_back(ds->starts_.back() + counts[s]);
    fp = FingerprintCombine(fp, components[s].dataset->fingerprint());
    fp = FingerprintCombine(fp, std::bit_cast<uint64_t>(components[s].weight));
    fp = FingerprintCombine(fp, static_cast<uint64_t>(counts[s]));
  }
  ds->components_ = std::move(components);
  ds->options_ = options;
  ds->total_ = n;
  ds->fingerprint_ = fp;
  return ds;
}

std::string MixtureDataset::name() const {
  std::string out = "mixture of " + std::to_string(components_.size()) + " datasets (";
  for (size_t s = 0; s < components_.size(); ++s) {
    out += (s ? ", " : "") + components_[s].dataset->name() + " x" + std::to_string(count(static_cast<int>(s)));
  }
  return out + ")";
}

std::pair<int, int64_t> MixtureDataset::Locate(int64_t i) const {
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), i);
  const int s = static_cast<int>(it - starts_.begin()) - 1;
  const int64_t j = i - starts_[static_cast<size_t>(s)];
  const int64_t size = components_[static_cast<size_t>(s)].dataset->size();
  const SampleOrder order(size, SplitMix64(options_.seed ^ SplitMix64(static_cast<uint64_t>(s) + 0x6d6978ull)),
                          static_cast<uint64_t>(j / size), /*shuffle=*/true);
  return {s, order.At(j % size)};
}

Status MixtureDataset::ReadUnchecked(int64_t index, std::span<std::byte> dst) const {
  const auto [s, i] = Locate(index);
  return components_[static_cast<size_t>(s)].dataset->Read(i, dst);
}

}  // namespace meshflow
