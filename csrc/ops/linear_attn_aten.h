// linear_attn_bwd on ATen ops (the CPU path of csrc/ops/linear_attn.cpp), on tensors of any device.
// Autograd records its ops, so it serves where the backward is itself differentiated (double
// backward, create_graph=True): the kernels' results have no autograd history.
#pragma once

#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

namespace neuralops::ops {

std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>>
linear_attn_bwd_aten(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& cos, const std::optional<at::Tensor>& sin,
                     const std::optional<at::Tensor>& s0, const std::optional<at::Tensor>& z0,
                     const std::optional<at::Tensor>& grad_s, const std::optional<at::Tensor>& grad_z,
                     c10::string_view phi, bool causal, double eps, double scale, bool state_grad);

}  // namespace neuralops::ops
