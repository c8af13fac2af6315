// Element-wise reductions shared by the collective backends (threads, MPI fallback paths, tests).
//
// ReduceBuffers combines n input arrays of one dtype into an output array:
//
//   out[i] = op(inputs[0][i], inputs[1][i], ..., inputs[n-1][i])
//
// always folding left in input order (((x0 op x1) op x2) ...), so the result is bit-for-bit
// deterministic for a given input order. Backends pass their group's buffers in group-rank order
// 0..n-1 (see collectives/communicator.h).
//
// Per dtype:
//   f32, f64   accumulate in the type itself.
//   bf16       accumulate in float, round to bf16 once at the end (nearest even).
//   i32        accumulate in int64; sum wraps modulo 2^32 when stored back.
//   i64        accumulate in a 128-bit integer; sum wraps modulo 2^64 when stored back.
// Per op:
//   kSum       the sum.
//   kAvg       the sum divided by n (the number of inputs); for integers the exact sum is
//              divided with truncation toward zero; for floats sum / float(n), rounded once (bf16).
//   kMax/kMin  for floats a NaN anywhere propagates (the result is NaN); among equal values
//              (e.g. -0.0 and +0.0) the earliest input wins.
//
// Aliasing: `out` may be exactly one of the inputs (in-place accumulation), but must not
// partially overlap any input.
//
// Example:
//   std::vector<float> a = {1, 2}, b = {3, 4}, out(2);
//   const void* in[] = {a.data(), b.data()};
//   MF_RETURN_IF_ERROR(ReduceBuffers(in, out.data(), 2, DType::kF32, ReduceOp::kAvg));  // {2, 3}
#ifndef MESHFLOW_COLLECTIVES_REDUCE_H_
#define MESHFLOW_COLLECTIVES_REDUCE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <span>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"

namespace meshflow {

// out[0..count) = op over inputs (see above).
// Errors (InvalidArgument, naming the value): count < 0; count > 0 with no inputs, a null input or
// a null out.
Status ReduceBuffers(std::span<const void* const> inputs, void* out, int64_t count, DType dtype, ReduceOp op);

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_REDUCE_H_
