#include "meshflow/optim/device_math.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/ops/device_op_kernels.h"

namespace meshflow::optim_internal {
namespace {

// Local ops on one device's tensors, issued on one stream.
class Math {
 public:
  static StatusOr<Math> For(const Tensor& x, const std::shared_ptr<Stream>& stream) {
    if (x.is_host()) return InvalidArgumentError("optimizer device math on a host tensor");
    MF_ASSIGN_OR_RETURN(DeviceOpKernels * k, DeviceOpKernelsFor(x.device()));
    return Math(k, stream, x.dtype());
  }
  StatusOr<Tensor> Unary(UnaryOp op, const Tensor& x, double alpha) {
    const Tensor* in[] = {&x};
    return k_->Run(OpSpec::Unary(op, alpha), in, KernelContext{}, stream_);
  }
  StatusOr<Tensor> Scale(const Tensor& x, double alpha) { return Unary(UnaryOp::kScale, x, alpha); }
  StatusOr<Tensor> Binary(BinaryOp op, const Tensor& a, const Tensor& b) {
    const Tensor* in[] = {&a, &b};
    return k_->Run(OpSpec::Binary(op), in, KernelContext{}, stream_);
  }
  // A 0-d tensor holding `value` in the math's dtype, on the device.
  StatusOr<Tensor> Scalar(double value, Device device) {
    Tensor t = Tensor::Zeros(dtype_, {});
    t.SetFromDouble(0, value);
    return t.CopyTo(device, stream_);
  }
  StatusOr<Tensor> SumAll(const Tensor& x) {
    const Tensor* in[] = {&x};
    std::vector<int> dims;  // empty: all dims
    return k_->Run(OpSpec::Reduce(ReduceKind::kSum, dims, false), in, KernelContext{}, stream_);
  }

 private:
  Math(DeviceOpKernels* k, std::shared_ptr<Stream> s, DType dtype) : k_(k), stream_(std::move(s)), dtype_(dtype) {}
  DeviceOpKernels* k_;
  std::shared_ptr<Stream> stream_;
  DType dtype_;
};

}  // namespace

Status AdamWOnDevice(const AdamWHyper& o, int64_t t, Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                     const std::shared_ptr<Stream>& stream) {
  MF_ASSIGN_OR_RETURN(Math x, Math::For(p, stream));
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
  // p = p * decay
  MF_ASSIGN_OR_RETURN(Tensor p1, x.Scale(p, 1 - o.lr * o.weight_decay));
  // m = b1 * m + (1 - b1) * g
  MF_ASSIGN_OR_RETURN(Tensor m_a, x.Scale(m, o.beta1));
  MF_ASSIGN_OR_RETURN(Tensor m_b, x.Scale(g, 1 - o.beta1));
  MF_ASSIGN_OR_RETURN(Tensor m1, x.Binary(BinaryOp::kAdd, m_a, m_b));
  // v = b2 * v + ((1 - b2) * g) * g
  MF_ASSIGN_OR_RETURN(Tensor v_a, x.Scale(v, o.beta2));
  MF_ASSIGN_OR_RETURN(Tensor v_b, x.Scale(g, 1 - o.beta2));
  MF_ASSIGN_OR_RETURN(Tensor v_c, x.Binary(BinaryOp::kMul, v_b, g));
  MF_ASSIGN_OR_RETURN(Tensor v1, x.Binary(BinaryOp::kAdd, v_a, v_c));
  // denom = sqrt(v) / sqrt(bc2) + eps
  MF_ASSIGN_OR_RETURN(Tensor root, x.Unary(UnaryOp::kSqrt, v1, 1.0));
  MF_ASSIGN_OR_RETURN(Tensor bc2_sqrt, x.Scalar(std::sqrt(bc2), p.device()));
  MF_ASSIGN_OR_RETURN(Tensor scaled, x.Binary(BinaryOp::kDiv, root, bc2_sqrt));
  MF_ASSIGN_OR_RETURN(Tensor denom, x.Unary(UnaryOp::kAddScalar, scaled, o.eps));
  // p = p - (lr / bc1) * (m / denom)
  MF_ASSIGN_OR_RETURN(Tensor ratio, x.Binary(BinaryOp::kDiv, m1, denom));
  MF_ASSIGN_OR_RETURN(Tensor step, x.Scale(ratio, o.lr / bc1));
  MF_ASSIGN_OR_RETURN(Tensor p2, x.Binary(BinaryOp::kSub, p1, step));
  p = std::move(p2);
  m = std::move(m1);
  v = std::move(v1);
  return Status::Ok();
}

Status SgdOnDevice(const SgdHyper& o, int64_t t, Tensor& p, const Tensor& g, Tensor* buf,
                   const std::shared_ptr<Stream>& stream) {
  MF_ASSIGN_OR_RETURN(Math x, Math::For(p, stream));
  Tensor d = g;  // a device copy on its stream
  if (o.weight_decay != 0) {  // d = d + wd * p
    MF_ASSIGN_OR_RETURN(Tensor wp, x.Scale(p, o.weight_decay));
    MF_ASSIGN_OR_RETURN(d, x.Binary(BinaryOp::kAdd, d, wp));
  }
  if (o.momentum != 0) {
    if (buf == nullptr) return InternalError("SGD with momentum without a momentum buffer");
    if (t == 1) {
      *buf = d;
    } else {  // buf = mu * buf + (1 - dampening) * d
      MF_ASSIGN_OR_RETURN(Tensor a, x.Scale(*buf, o.momentum));
      MF_ASSIGN_OR_RETURN(Tensor b, x.Scale(d, 1 - o.dampening));
      MF_ASSIGN_OR_RETURN(*buf, x.Binary(BinaryOp::kAdd, a, b));
    }
    if (o.nesterov) {  // d = d + mu * buf
      MF_ASSIGN_OR_RETURN(Tensor mb, x.Scale(*buf, o.momentum));
      MF_ASSIGN_OR_RETURN(d, x.Binary(BinaryOp::kAdd, d, mb));
    } else {
      d = *buf;
    }
  }
  MF_ASSIGN_OR_RETURN(Tensor ld, x.Scale(d, o.lr));  // p = p - lr * d
  MF_ASSIGN_OR_RETURN(p, x.Binary(BinaryOp::kSub, p, ld));
  return Status::Ok();
}

Status ScaleOnDevice(Tensor& t, double coef, const std::shared_ptr<Stream>& stream) {
  MF_ASSIGN_OR_RETURN(Math x, Math::For(t, stream));
  MF_ASSIGN_OR_RETURN(t, x.Scale(t, coef));
  return Status::Ok();
}

StatusOr<double> SumOfSquaresOnDevice(const Tensor& t, const std::shared_ptr<Stream>& stream) {
  MF_ASSIGN_OR_RETURN(Math x, Math::For(t, stream));
  MF_ASSIGN_OR_RETURN(Tensor sq, x.Binary(BinaryOp::kMul, t, t));
  MF_ASSIGN_OR_RETURN(Tensor sum, x.SumAll(sq));
  MF_ASSIGN_OR_RETURN(Tensor host, sum.ToHost());
  return host.GetAsDouble(0);
}

}  // namespace meshflow::optim_internal
