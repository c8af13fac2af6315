// The op kernels of the fake GPU (runtime/fake_device.h) for host tests: the shared kernel bodies
// (ops/shared_kernels.h) run in host loops on the fake device's memory, each in its stream's order.
//
// With the fake GPU's streams (asynchronous host workers) and these kernels, a whole training step
// runs on "device" ranks on a machine without a GPU: parameters, activations and gradients are
// device tensors, kernels and copies are ordered on the compute stream, collectives on the
// communication stream, and every host read must go through a copy. The bodies are the CUDA
// kernels' own, so the results have the CPU kernels' bits.
//
//   ASSERT_TRUE(InstallFakeCudaDevices());     // runtime/fake_device.h
//   ASSERT_TRUE(InstallFakeCudaOpKernels());
//   MF_ASSIGN_OR_RETURN(DeviceOpKernels* k, DeviceOpKernelsFor(Device::Cuda(0)));
//
// Test support only (testonly target //ops:fake_device_op_kernels). A process that installs it
// cannot use the CUDA op kernels (the factory is registered once).
#ifndef MESHFLOW_OPS_FAKE_DEVICE_OP_KERNELS_H_
#define MESHFLOW_OPS_FAKE_DEVICE_OP_KERNELS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

namespace meshflow {

// Registers the fake kernels as the CUDA op kernels (idempotent). False when another factory (the
// real CUDA kernels) was registered first.
bool InstallFakeCudaOpKernels();

}  // namespace meshflow

#endif  // MESHFLOW_OPS_FAKE_DEVICE_OP_KERNELS_H_
