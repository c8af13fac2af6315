// The kinds of the parametrized ops: plain enums, shared by the sharding rules (sharding_rule.h,
// which documents each op), the CPU kernels and the device kernels (elementwise.h, compiled by
// nvcc too). C++17 and no other include, so that CUDA sources can include it.
//
//   const UnaryOp op = UnaryOp::kGelu;           // UnaryOpName(op) == "gelu" (sharding_rule.h)
//   const ReduceKind kind = ReduceKind::kMean;   // ReduceKindName(kind) == "mean"
#ifndef MESHFLOW_OPS_OP_KINDS_H_
#define MESHFLOW_OPS_OP_KINDS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

namespace meshflow {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

enum class UnaryOp {
  kNeg, kScale, kRelu, kExp, kGelu,
  kTanh, kSigmoid, kSilu, kSqrt, kRsqrt, kPow, kAddScalar, kLog, kStep,
  kGeluDeriv, kSiluDeriv, kTanhDeriv, kSigmoidDeriv,
  kFill,  // alpha everywhere (x's shape and dtype): constants of backward computations
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };

enum class ReduceKind { kSum, kMean, kMax, kMin };

enum class NormKind { kLayerNorm, kRmsNorm };

enum class LossReduction { kMean, kSum, kNone };

}  // namespace meshflow

#endif  // MESHFLOW_OPS_OP_KINDS_H_
