// Calls a registered neuralops op through the PyTorch dispatcher, as Python's torch.ops does, so
// the C++ API takes the same CPU / CUDA paths.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace neuralops::api {

template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace neuralops::api
