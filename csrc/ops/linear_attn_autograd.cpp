// Autograd for linear_attn_fwd (csrc/ops/linear_attn.cpp), in C++ so Python and C++ callers share it
// and a call runs no Python beyond the API's checks. Gradients reach q, k, v and the initial state;
// the Cosformer weights get none (documented). The forward is linear_attn_fwd_train, whose forward
// states the backward, linear_attn_bwd, reads instead of a second state pass over k and v.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ops/dispatch.h"

namespace neuralops::ops {
namespace {

using OptTensor = std::optional<at::Tensor>;
using FwdResult = std::tuple<at::Tensor, OptTensor, OptTensor>;
using TrainResult = std::tuple<at::Tensor, OptTensor, OptTensor, at::Tensor>;
using BwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, OptTensor, OptTensor>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

TrainResult call_fwd_train(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const OptTensor& cos,
                           const OptTensor& sin, const OptTensor& s0, const OptTensor& z0, c10::string_view phi,
                           bool causal, double eps, double scale, bool return_state) {
  static auto handle = op<LinearAttnFwdTrain>();
  return handle.call(q, k, v, cos, sin, s0, z0, phi, causal, eps, scale, return_state);
}

BwdResult call_bwd(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
              const at::Tensor& v, const OptTensor& cos, const OptTensor& sin, const OptTensor& s0,
              const OptTensor& z0, const OptTensor& grad_s, const OptTensor& grad_z,
              c10::string_view phi, bool causal, double eps, double scale, bool state_grad,
              const OptTensor& fwd_states) {
  static auto handle = op<LinearAttnBwd>();
  return handle.call(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, phi, causal, eps, scale,
                     state_grad, fwd_states);
}

OptTensor opt(const at::Tensor& t) {
  return t.defined() ? OptTensor(t) : std::nullopt;
}

bool requires_grad(const OptTensor& t) {
  return t.has_value() && t->requires_grad();
}

class LinearAttnFunction : public torch::autograd::Function<LinearAttnFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const OptTensor& cos, const OptTensor& sin,
                               const OptTensor& s0, const OptTensor& z0, std::string phi,
                               bool causal, double eps, double scale, bool return_state) {
    ctx->set_materialize_grads(false);  // absent state gradients stay absent: no zero tensors
    ctx->saved_data["phi"] = phi;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["return_state"] = return_state;
    ctx->saved_data["state_grad"] = requires_grad(s0) || requires_grad(z0);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, s, z, fwd_states] =
        call_fwd_train(q, k, v, cos, sin, s0, z0, phi, causal, eps, scale, return_state);
    ctx->save_for_backward({q, k, v, cos.value_or(at::Tensor()), sin.value_or(at::Tensor()),
                            s0.value_or(at::Tensor()), z0.value_or(at::Tensor()),
                            fwd_states.numel() > 0 ? fwd_states : at::Tensor()});
    // Autograd's output wrapping takes defined tensors only: empty ones stand for the absent states
    // here, and fwd_autograd returns None for them again.
    const auto absent = [&] { return at::empty({0}, q.options().dtype(at::kFloat)); };
    return {out, s ? *s : absent(), z ? *z : absent()};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const OptTensor cos = opt(saved[3]), sin = opt(saved[4]), s0 = opt(saved[5]), z0 = opt(saved[6]);
    const OptTensor fwd_states = opt(saved[7]);
    const std::string phi = ctx->saved_data["phi"].toStringRef();
    const bool causal = ctx->saved_data["causal"].toBool();
    const double eps = ctx->saved_data["eps"].toDouble(), scale = ctx->saved_data["scale"].toDouble();
    at::Tensor grad_out = grads[0];
    if (!grad_out.defined()) {  // only the returned state was used downstream
      grad_out = at::zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
    }
    OptTensor grad_s, grad_z;
    if (ctx->saved_data["return_state"].toBool() && (grads[1].defined() || grads[2].defined())) {
      // The kernel takes both state gradients or neither; a missing one is zero.
      const auto options = (grads[1].defined() ? grads[1] : grads[2]).options();
      grad_s = grads[1].defined() ? grads[1] : at::zeros(state_shape(q, k, v, cos.has_value(), false), options);
      grad_z = grads[2].defined() ? grads[2] : at::zeros(state_shape(q, k, v, cos.has_value(), true), options);
    }
    const bool state_grad = s0.has_value() && ctx->saved_data["state_grad"].toBool();
    auto [dq, dk, dv, ds0, dz0] = call_bwd(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, phi,
                                           causal, eps, scale, state_grad, fwd_states);
    if (!state_grad) {
      ds0 = dz0 = std::nullopt;
    }
    // One gradient per forward argument: none for the weights and the non-tensor options.
    return {dq,           dk,           dv,           at::Tensor(), at::Tensor(), ds0.value_or(at::Tensor()),
            dz0.value_or(at::Tensor()), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }

 private:
  // The state's shape, [B, Hkv, (2,) D, Dv] for S and [B, Hkv, (2,) D] for z (2: Cosformer's cos and
  // sin parts).
  static std::vector<int64_t> state_shape(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, bool cosformer, bool z) {
    std::vector<int64_t> shape = {k.size(0), k.size(1)};
    if (cosformer) {
      shape.push_back(2);
    }
    shape.push_back(q.size(3));
    if (!z) {
      shape.push_back(v.size(3));
    }
    return shape;
  }
};

FwdResult fwd_autograd(c10::DispatchKeySet ks, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& v, const OptTensor& cos, const OptTensor& sin,
                       const OptTensor& s0, const OptTensor& z0, c10::string_view phi, bool causal,
                       double eps, double scale, bool return_state) {
  const bool grad = at::GradMode::is_enabled() &&
      (q.requires_grad() || k.requires_grad() || v.requires_grad() || requires_grad(s0) ||
       requires_grad(z0));
  if (!grad) {
    return redispatch_below_autograd<LinearAttnFwd>(ks, q, k, v, cos, sin, s0, z0, phi, causal, eps,
                                                    scale, return_state);
  }
  auto out = LinearAttnFunction::apply(q, k, v, cos, sin, s0, z0, std::string(phi), causal, eps,
                                       scale, return_state);
  if (!return_state) {
    return {out[0], std::nullopt, std::nullopt};
  }
  return {out[0], out[1], out[2]};
}

}  // namespace
}  // namespace neuralops::ops

TORCH_LIBRARY_IMPL(neuralops, Autograd, m) {
  m.impl("linear_attn_fwd", &neuralops::ops::fwd_autograd);
}
