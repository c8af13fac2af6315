#include "meshflow/data/dataset.h"

#include <cstring>
#include <utility>

#include "meshflow/base/checksum.h"

namespace meshflow {

uint64_t FingerprintCombine(uint64_t h, uint64_t v) {
  uint64_t x = h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::string FingerprintHex(uint64_t fingerprint) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, fingerprint >>= 4) out[static_cast<size_t>(i)] = kDigits[fingerprint & 0xF];
  return out;
}

uint64_t Dataset::fingerprint() const {
  uint64_t h = FingerprintCombine(0x6d662e6461746173ull, static_cast<uint64_t>(dtype()));
  for (int64_t d : sample_shape()) h = FingerprintCombine(h, static_cast<uint64_t>(d));
  return FingerprintCombine(h, static_cast<uint64_t>(size()));
}

int64_t Dataset::sample_elements() const {
  // A zero dim first: the other dims of an empty sample may be large enough to overflow.
  for (int64_t d : sample_shape()) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : sample_shape()) n *= d;
  return n;
}

Status Dataset::Read(int64_t index, std::span<std::byte> dst) const {
  if (index < 0 || index >= size()) {
    return OutOfRangeError("sample index " + std::to_string(index) + " out of range [0, " + std::to_string(size()) +
                           ") in " + name());
  }
  if (static_cast<int64_t>(dst.size()) != sample_bytes()) {
    return InvalidArgumentError("Read of sample " + std::to_string(index) + " from " + name() + ": buffer has " +
                                std::to_string(dst.size()) + " bytes, a sample has " +
                                std::to_string(sample_bytes()));
  }
  return ReadUnchecked(index, dst);
}

Status Dataset::ReadRun(int64_t first, int64_t count, std::span<std::byte> dst) const {
  if (count < 1 || first < 0 || first > size() - count) {
    return OutOfRangeError("sample run [" + std::to_string(first) + ", +" + std::to_string(count) +
                           ") out of range [0, " + std::to_string(size()) + ") in " + name());
  }
  if (static_cast<int64_t>(dst.size()) != count * sample_bytes()) {
    return InvalidArgumentError("ReadRun of " + std::to_string(count) + " samples from " + name() + ": buffer has " +
                                std::to_string(dst.size()) + " bytes, the samples have " +
                                std::to_string(count * sample_bytes()));
  }
  return ReadRunUnchecked(first, count, dst);
}

Status Dataset::ReadRunUnchecked(int64_t first, int64_t count, std::span<std::byte> dst) const {
  const size_t bytes = static_cast<size_t>(sample_bytes());
  for (int64_t i = 0; i < count; ++i) {
    MF_RETURN_IF_ERROR(ReadUnchecked(first + i, dst.subspan(static_cast<size_t>(i) * bytes, bytes)));
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<InMemoryDataset>> InMemoryDataset::FromTensor(const Tensor& samples) {
  if (samples.rank() == 0) return InvalidArgumentError("InMemoryDataset::FromTensor: tensor has rank 0 (no sample dim)");
  std::vector<int64_t> sample_shape(samples.shape().begin() + 1, samples.shape().end());
  std::vector<std::byte> bytes(samples.raw(), samples.raw() + samples.NumBytes());
  return Create(samples.dtype(), std::move(sample_shape), std::move(bytes));
}

StatusOr<std::shared_ptr<InMemoryDataset>> InMemoryDataset::Create(DType dtype, std::vector<int64_t> sample_shape,
                                                                   std::vector<std::byte> bytes) {
  int64_t elems = 1;
  for (size_t d = 0; d < sample_shape.size(); ++d) {
    if (sample_shape[d] < 0) {
      return InvalidArgumentError("InMemoryDataset: sample shape has negative size " +
                                  std::to_string(sample_shape[d]) + " at dim " + std::to_string(d));
    }
    elems *= sample_shape[d];
  }
  const int64_t sample_bytes = elems * DTypeSize(dtype);
  const int64_t total = static_cast<int64_t>(bytes.size());
  if (sample_bytes == 0 ? total != 0 : total % sample_bytes != 0) {
    return InvalidArgumentError("InMemoryDataset: " + std::to_string(total) +
                                " bytes is not a multiple of the sample size " + std::to_string(sample_bytes));
  }
  auto ds = std::shared_ptr<InMemoryDataset>(new InMemoryDataset());
  ds->dtype_ = dtype;
  ds->sample_shape_ = std::move(sample_shape);
  ds->num_samples_ = sample_bytes == 0 ? 0 : total / sample_bytes;
  ds->bytes_ = std::move(bytes);
  ds->fingerprint_ = FingerprintCombine(ds->Dataset::fingerprint(), Crc32c(ds->bytes_));
  return ds;
}

Status InMemoryDataset::ReadUnchecked(int64_t index, std::span<std::byte> dst) const {
  if (!dst.empty()) std::memcpy(dst.data(), bytes_.data() + index * static_cast<int64_t>(dst.size()), dst.size());
  return Status::Ok();
}

}  // namespace meshflow
