// Low-rank projection from C++: the same ops as neuralops.core.triton_kernels.low_rank in Python.
//
//   y = (x @ V.T) @ U.T + bias      x [..., in], V [rank, in], U [out, rank], bias [out]
//
// CUDA tensors of float16, bfloat16 or float32 run on the AOT-compiled kernels or cuBLAS, per shape
// (backend "auto"; "triton" or "cublas" force one); CPU tensors on ATen. Bad arguments throw
// c10::ValueError / c10::TypeError naming the argument.
#pragma once

#include <optional>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "neuralops/export.h"

namespace neuralops::low_rank {

// y. Differentiable: libtorch autograd records it when an input requires grad (gradients for x,
// U, V and bias; double backward too).
NEURALOPS_API at::Tensor fwd(const at::Tensor& x, const at::Tensor& U, const at::Tensor& V,
                             const std::optional<at::Tensor>& bias = std::nullopt,
                             const std::string& backend = "auto");

// (dx, dU, dV, dbias): dbias only when bias is given. Recomputes x @ V.T.
NEURALOPS_API std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>> bwd(
    const at::Tensor& x, const at::Tensor& U, const at::Tensor& V, const at::Tensor& grad_out,
    const std::optional<at::Tensor>& bias = std::nullopt, const std::string& backend = "auto");

}  // namespace neuralops::low_rank
