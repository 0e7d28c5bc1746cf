// Helpers shared by the ops' CUDA paths: argument checks and launch configuration.
#pragma once

#include <cstdint>
#include <limits>

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

#include "runtime/kernel.h"

namespace neuralops::ops {

inline bool kernel_dtype(c10::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

inline void check_kernel_dtype(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK_TYPE(kernel_dtype(t.scalar_type()), "neuralops.", op, ": ", name,
                   " must be float16, bfloat16 or float32 on CUDA, got ", t.scalar_type());
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* op,
                              const char* a_name, const char* b_name) {
  TORCH_CHECK_VALUE(a.device() == b.device(), "neuralops.", op, ": ", a_name, " is on ", a.device(),
                    " but ", b_name, " is on ", b.device());
}

// A stride as a kernel argument. A dimension of size 1 is never stepped along, so its stride is
// passed as 0: it keeps the 16-divisible kernel variants eligible whatever PyTorch stored there.
inline int64_t kernel_stride(const at::Tensor& t, int64_t dim) {
  return t.size(dim) == 1 ? 0 : t.stride(dim);
}

inline std::uint32_t grid_dim(int64_t blocks, const char* op, int64_t limit) {
  TORCH_CHECK_VALUE(blocks <= limit, "neuralops.", op, ": the input needs ", blocks,
                    " thread blocks, more than one launch allows (", limit,
                    "); split it along the batch dimension");
  return static_cast<std::uint32_t>(blocks);
}

// Launch configuration on the tensor's device and PyTorch's current stream for that device.
inline runtime::LaunchConfig launch_config(const at::Tensor& t, int64_t x, int64_t y, int64_t z,
                                           const char* op) {
  const int device = t.get_device();
  return runtime::LaunchConfig{
      {grid_dim(x, op, std::numeric_limits<int32_t>::max()), grid_dim(y, op, 65535),
       grid_dim(z, op, 65535)},
      device,
      c10::cuda::getCurrentCUDAStream(device).stream()};
}

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace neuralops::ops
