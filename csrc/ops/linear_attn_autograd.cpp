// Autograd for linear_attn_fwd (csrc/ops/linear_attn.cpp), in C++ so Python and C++ callers share it
// and a call runs no Python beyond the API's checks. Gradients reach q, k, v and the initial state;
// the Cosformer weights get none (documented). The forward is linear_attn_fwd_train, whose forward
// states the backward, linear_attn_bwd, reads instead of a second state pass over k and v. Autograd
// for linear_attn_bwd (double backward) is here too.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ops/dispatch.h"
#include "ops/linear_attn_aten.h"

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

// Autograd's output wrapping takes defined tensors only: an empty one stands for an absent state (or
// state gradient), and the autograd kernels return None for it again.
at::Tensor or_absent(const OptTensor& t, const at::Tensor& q) {
  return t ? *t : at::empty({0}, q.options().dtype(at::kFloat));
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
    return {out, or_absent(s, q), or_absent(z, q)};
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
  refuse_forward_ad("linear_attn", q, k, v, cos, sin, s0, z0);
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

// The backward's own autograd (double backward, or a differentiable call of linear_attn_bwd): its
// values come from the kernels, and where they are differentiated, the ATen form of the same
// backward is run again with autograd recording it (the kernels' results have no autograd history),
// then differentiated. Saved: the backward's tensor arguments, not its results.
class LinearAttnBwdFunction : public torch::autograd::Function<LinearAttnBwdFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad_out, const at::Tensor& q,
                               const at::Tensor& k, const at::Tensor& v, const OptTensor& cos, const OptTensor& sin,
                               const OptTensor& s0, const OptTensor& z0, const OptTensor& grad_s,
                               const OptTensor& grad_z, std::string phi, bool causal, double eps, double scale,
                               bool state_grad, const OptTensor& fwd_states) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["phi"] = phi;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["state_grad"] = state_grad;
    ctx->save_for_backward({grad_out, q, k, v, cos.value_or(at::Tensor()), sin.value_or(at::Tensor()),
                            s0.value_or(at::Tensor()), z0.value_or(at::Tensor()), grad_s.value_or(at::Tensor()),
                            grad_z.value_or(at::Tensor())});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [dq, dk, dv, ds0, dz0] =
        call_bwd(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, phi, causal, eps, scale, state_grad, fwd_states);
    return {dq, dk, dv, or_absent(ds0, q), or_absent(dz0, q)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool create_graph = at::GradMode::is_enabled();
    at::AutoGradMode recording(true);
    // The arguments gradients reach (all but the Cosformer weights, documented) enter the recorded
    // backward as fresh aliases: differentiating it then stops at them, where the original tensors'
    // own history (the outer graph, partly consumed by now) would otherwise be walked as well. The
    // aliases keep that history for a further derivative (create_graph).
    std::vector<at::Tensor> args(saved.size());
    variable_list inputs;
    std::vector<size_t> input_index;
    for (size_t i = 0; i < saved.size(); ++i) {
      const bool weight = i == 4 || i == 5;
      if (saved[i].defined() && saved[i].requires_grad() && !weight) {
        args[i] = saved[i].view_as(saved[i]);
        inputs.push_back(args[i]);
        input_index.push_back(i);
      } else {
        args[i] = saved[i].defined() ? saved[i].detach() : saved[i];
      }
    }
    const auto [dq, dk, dv, ds0, dz0] = linear_attn_bwd_aten(
        args[0], args[1], args[2], args[3], opt(args[4]), opt(args[5]), opt(args[6]), opt(args[7]), opt(args[8]),
        opt(args[9]), ctx->saved_data["phi"].toStringRef(), ctx->saved_data["causal"].toBool(),
        ctx->saved_data["eps"].toDouble(), ctx->saved_data["scale"].toDouble(),
        ctx->saved_data["state_grad"].toBool());
    const at::Tensor results[] = {dq, dk, dv, ds0.value_or(at::Tensor()), dz0.value_or(at::Tensor())};
    variable_list outputs, output_grads;
    for (size_t i = 0; i < 5; ++i) {
      if (grads[i].defined() && results[i].defined() && results[i].requires_grad()) {
        outputs.push_back(results[i]);
        output_grads.push_back(grads[i]);
      }
    }
    variable_list input_grads(16);  // one per forward argument
    if (outputs.empty() || inputs.empty()) return input_grads;
    const variable_list found = torch::autograd::grad(outputs, inputs, output_grads, create_graph, create_graph,
                                                      /*allow_unused=*/true);
    for (size_t j = 0; j < input_index.size(); ++j) input_grads[input_index[j]] = found[j];
    return input_grads;
  }
};

BwdResult bwd_autograd(c10::DispatchKeySet ks, const at::Tensor& grad_out, const at::Tensor& q,
                       const at::Tensor& k, const at::Tensor& v, const OptTensor& cos, const OptTensor& sin,
                       const OptTensor& s0, const OptTensor& z0, const OptTensor& grad_s, const OptTensor& grad_z,
                       c10::string_view phi, bool causal, double eps, double scale, bool state_grad,
                       const OptTensor& fwd_states) {
  refuse_forward_ad("linear_attn", grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z);
  const bool grad = at::GradMode::is_enabled() &&
      (grad_out.requires_grad() || q.requires_grad() || k.requires_grad() || v.requires_grad() ||
       requires_grad(s0) || requires_grad(z0) || requires_grad(grad_s) || requires_grad(grad_z));
  if (!grad) {
    return redispatch_below_autograd<LinearAttnBwd>(ks, grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, phi,
                                                    causal, eps, scale, state_grad, fwd_states);
  }
  auto out = LinearAttnBwdFunction::apply(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, std::string(phi),
                                          causal, eps, scale, state_grad, fwd_states);
  if (!state_grad) {
    return {out[0], out[1], out[2], std::nullopt, std::nullopt};
  }
  return {out[0], out[1], out[2], out[3], out[4]};
}

}  // namespace
}  // namespace neuralops::ops

TORCH_LIBRARY_IMPL(neuralops, Autograd, m) {
  m.impl("linear_attn_fwd", &neuralops::ops::fwd_autograd);
  m.impl("linear_attn_bwd", &neuralops::ops::bwd_autograd);
}
