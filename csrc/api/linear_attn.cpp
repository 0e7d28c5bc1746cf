#include "neuralops/linear_attn.h"

#include "ops/dispatch.h"

namespace neuralops::linear_attn {
namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

}  // namespace

Result fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Options& o) {
  static auto handle = ops::op<ops::LinearAttnFwd>();
  auto [out, S, z] = handle.call(q, k, v, o.cos_weight, o.sin_weight, o.initial_S, o.initial_z,
                                 o.phi, o.causal, o.eps, o.scale, o.return_state);
  return {out, S.value_or(at::Tensor()), z.value_or(at::Tensor())};
}

Triple bwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
           const at::Tensor& grad_out, const Options& o) {
  static auto handle = ops::op<ops::LinearAttnBwd>();
  auto [dq, dk, dv, dS, dz] =
      handle.call(grad_out, q, k, v, o.cos_weight, o.sin_weight, o.initial_S, o.initial_z,
                  std::nullopt, std::nullopt, o.phi, o.causal, o.eps, o.scale, false,
                  std::nullopt);
  return {dq, dk, dv};
}

}  // namespace neuralops::linear_attn
