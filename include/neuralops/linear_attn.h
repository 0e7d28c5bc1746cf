// Linear attention from C++: the same op as neuralops.core.triton_kernels.linear_attn in Python.
//
//   q, k [B, H(kv), N, D], v [B, Hkv, N, Dv]; out [B, H, N, Dv]
//   out_i = sum_j s_ij v_j / (sum_j s_ij + eps),  s_ij = phi(q_i) . phi(k_j) * scale,
//   j <= i when causal; phi in "elu+1", "relu", "identity", "softmax_free" (no normalizer);
//   Cosformer re-weighting with per-position cos/sin weights [N] or [B, N].
//
// CUDA tensors of float16, bfloat16 or float32 run on the AOT-compiled kernels; CPU tensors on a
// chunked ATen path. Bad arguments throw c10::ValueError / c10::TypeError naming the argument.
#pragma once

#include <optional>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "neuralops/export.h"

namespace neuralops::linear_attn {

struct Options {
  bool causal = false;
  std::string phi = "elu+1";
  double eps = 1e-6;
  double scale = 1.0;
  std::optional<at::Tensor> cos_weight, sin_weight;
  // Streaming: the state carried from the previous piece of the sequence (fp32; S [B, Hkv, D, Dv]
  // and z [B, Hkv, D], with a dimension of 2 after Hkv under Cosformer), and whether to return it.
  std::optional<at::Tensor> initial_S, initial_z;
  bool return_state = false;
};

struct Result {
  at::Tensor out;
  at::Tensor S, z;  // the final state when return_state, else undefined
};

// Differentiable: libtorch autograd records it when q, k, v or the initial state require grad,
// twice too (create_graph: the second derivative runs the backward on ATen ops).
NEURALOPS_API Result fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const Options& options = {});

// (dq, dk, dv) of fwd's output for grad_out; differentiable like fwd.
NEURALOPS_API std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd(const at::Tensor& q,
                                                                 const at::Tensor& k,
                                                                 const at::Tensor& v,
                                                                 const at::Tensor& grad_out,
                                                                 const Options& options = {});

}  // namespace neuralops::linear_attn
