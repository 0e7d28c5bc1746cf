// GQA head expansion from C++: the same ops as neuralops.core.triton_kernels.gqa in Python.
//
//   k [B, num_kv_heads, N, Dk], v [B, num_kv_heads, N', Dv]  ->  [B, num_heads, ., .] (contiguous)
//   head h of the output is head h / (num_heads / num_kv_heads) of the input.
//
// CUDA tensors of float16, bfloat16 or float32 run on the AOT-compiled kernels; CPU tensors on an
// ATen reference path. Bad arguments throw c10::ValueError / c10::TypeError naming the argument.
#pragma once

#include <cstdint>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "neuralops/export.h"

namespace neuralops::gqa {

// Expands k and v to num_heads heads. Differentiable: with inputs that require grad, libtorch
// autograd records it, and gradients reach k and v through bwd.
NEURALOPS_API std::tuple<at::Tensor, at::Tensor> fwd(const at::Tensor& k, const at::Tensor& v,
                                                     int64_t num_kv_heads, int64_t num_heads);

// Sums each group of num_heads / num_kv_heads gradient heads (fp32 accumulation); differentiable
// too (its backward is fwd).
NEURALOPS_API std::tuple<at::Tensor, at::Tensor> bwd(const at::Tensor& grad_k,
                                                     const at::Tensor& grad_v, int64_t num_kv_heads,
                                                     int64_t num_heads);

}  // namespace neuralops::gqa
