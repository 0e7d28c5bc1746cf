// Calls a registered neuralops op through the PyTorch dispatcher, as Python's torch.ops does, so the
// C++ API and the autograd kernels take the same CPU / CUDA / autograd paths.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace neuralops::ops {

template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace neuralops::ops
