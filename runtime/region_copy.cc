#include "meshflow/runtime/region_copy.h"

#include <cstring>
#include <vector>

namespace meshflow {

void CopyRegion(const std::byte* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                std::byte* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                std::span<const int64_t> extent, int64_t elem_size) {
  const int r = static_cast<int>(extent.size());
  for (int d = 0; d < r; ++d) {
    if (extent[d] == 0) return;
  }
  if (r == 0) {
    std::memcpy(dst, src, static_cast<size_t>(elem_size));
    return;
  }
  // Merge trailing dims that are contiguous in both src and dst into one run.
  int inner = r - 1;
  int64_t run = extent[inner];
  while (inner > 0 && extent[inner] == src_shape[inner] && extent[inner] == dst_shape[inner]) {
    --inner;
    run *= extent[inner];
  }
  std::vector<int64_t> src_strides(r, 1), dst_strides(r, 1);
  for (int d = r - 2; d >= 0; --d) {
    src_strides[d] = src_strides[d + 1] * src_shape[d + 1];
    dst_strides[d] = dst_strides[d + 1] * dst_shape[d + 1];
  }
  std::vector<int64_t> idx(inner, 0);  // counters over dims [0, inner)
  const size_t run_bytes = static_cast<size_t>(run * elem_size);
  while (true) {
    int64_t so = 0, doff = 0;
    for (int d = 0; d < r; ++d) {
      const int64_t i = d < inner ? idx[d] : 0;
      so += (src_offset[d] + i) * src_strides[d];
      doff += (dst_offset[d] + i) * dst_strides[d];
    }
    std::memcpy(dst + doff * elem_size, src + so * elem_size, run_bytes);
    int d = inner - 1;
    while (d >= 0 && ++idx[d] == extent[d]) idx[d--] = 0;
    if (d < 0) break;
  }
}

}  // namespace meshflow
