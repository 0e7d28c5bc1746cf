// Autograd for the low-rank ops (csrc/ops/low_rank.cpp), in C++ so Python and C++ callers share it
// and a call costs no Python: a decode step's whole budget is a few microseconds.
//
//   low_rank_fwd         saves x, U, V and h = x @ V.T (computed by low_rank_fwd_hidden) so the
//                        backward does not recompute h; backward = low_rank_bwd
//   low_rank_fwd_hidden  the same, and h's own gradient flows into x and V
//   low_rank_bwd         its outputs are bilinear in (x, U, V, grad_out, h): the adjoint below, in
//                        ATen (double backward is rare and not worth kernels)
#include <ATen/core/Tensor.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "ops/dispatch.h"

namespace neuralops::ops {
namespace {

using OptTensor = std::optional<at::Tensor>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, OptTensor>;

std::tuple<at::Tensor, at::Tensor> call_fwd_hidden(const at::Tensor& x, const at::Tensor& U,
                                                   const at::Tensor& V, const OptTensor& bias,
                                                   c10::string_view backend) {
  static auto handle = op<LowRankFwdHidden>();
  return handle.call(x, U, V, bias, backend);
}

Grads call_bwd(const at::Tensor& x, const at::Tensor& U, const at::Tensor& V, const at::Tensor& g,
               const OptTensor& hidden, bool bias_grad, c10::string_view backend) {
  static auto handle = op<LowRankBwd>();
  return handle.call(x, U, V, g, hidden, bias_grad, backend);
}

bool needs_grad(std::initializer_list<const at::Tensor*> tensors, const OptTensor& optional) {
  if (!at::GradMode::is_enabled()) {
    return false;
  }
  for (const at::Tensor* t : tensors) {
    if (t->requires_grad()) {
      return true;
    }
  }
  return optional.has_value() && optional->requires_grad();
}

// Saves what the backward of low_rank_fwd / low_rank_fwd_hidden needs.
void save_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& U,
                  const at::Tensor& V, const at::Tensor& h, bool has_bias,
                  const std::string& backend) {
  ctx->save_for_backward({x, U, V, h});
  ctx->saved_data["has_bias"] = has_bias;
  ctx->saved_data["backend"] = backend;
}

// Gradients of y (and of h, when h was an output used downstream) for x, U, V, bias, backend.
variable_list backward_forward(AutogradContext* ctx, const at::Tensor& grad_y,
                               const at::Tensor& grad_h) {
  auto saved = ctx->get_saved_variables();
  const at::Tensor &x = saved[0], &U = saved[1], &V = saved[2], &h = saved[3];
  const bool has_bias = ctx->saved_data["has_bias"].toBool();
  const std::string backend = ctx->saved_data["backend"].toStringRef();
  at::Tensor gy = grad_y;
  if (!gy.defined()) {  // only h was used downstream
    auto shape = x.sizes().vec();
    shape.back() = U.size(0);
    gy = at::zeros(shape, x.options());
  }
  // The saved h has no autograd history of its own; when this backward is itself differentiated
  // (create_graph), h is recomputed from x and V inside low_rank_bwd so its gradient is tracked.
  const OptTensor hidden = at::GradMode::is_enabled() ? std::nullopt : OptTensor(h);
  auto [dx, dU, dV, dbias] = call_bwd(x, U, V, gy, hidden, has_bias, backend);
  if (grad_h.defined()) {
    const int64_t rank = V.size(0), in = V.size(1);
    dx = dx + at::matmul(grad_h, V);
    dV = dV + grad_h.reshape({-1, rank}).t().mm(x.reshape({-1, in}));
  }
  return {dx, dU, dV, dbias.value_or(at::Tensor()), at::Tensor()};
}

class LowRankFwdFunction : public torch::autograd::Function<LowRankFwdFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& U,
                               const at::Tensor& V, const OptTensor& bias, std::string backend) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, h] = call_fwd_hidden(x, U, V, bias, backend);
    save_forward(ctx, x, U, V, h, bias.has_value(), backend);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return backward_forward(ctx, grads[0], at::Tensor());
  }
};

class LowRankFwdHiddenFunction : public torch::autograd::Function<LowRankFwdHiddenFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& U,
                               const at::Tensor& V, const OptTensor& bias, std::string backend) {
    ctx->set_materialize_grads(false);  // h's gradient is usually absent: skip its products then
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, h] = call_fwd_hidden(x, U, V, bias, backend);
    save_forward(ctx, x, U, V, h, bias.has_value(), backend);
    return {y, h};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return backward_forward(ctx, grads[0], grads[1]);
  }
};

class LowRankBwdFunction : public torch::autograd::Function<LowRankBwdFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& U,
                               const at::Tensor& V, const at::Tensor& g, const OptTensor& hidden,
                               bool bias_grad, std::string backend) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, U, V, g, hidden.value_or(at::Tensor())});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [dx, dU, dV, dbias] = call_bwd(x, U, V, g, hidden, bias_grad, backend);
    // An autograd output must be a tensor: dbias is returned only when asked for.
    return dbias.has_value() ? variable_list{dx, dU, dV, *dbias} : variable_list{dx, dU, dV};
  }

  // The adjoint of (dx, dU, dV, dbias) = (dh V, g^T h, dh^T x, sum g) with dh = g U, h = x V^T.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &U = saved[1], &V = saved[2], &g = saved[3];
    const at::Tensor& hidden = saved[4];
    const int64_t rank = V.size(0), in = V.size(1), out = U.size(0);
    const at::Tensor x2 = x.reshape({-1, in}), g2 = g.reshape({-1, out});
    const at::Tensor h2 = hidden.defined() ? hidden.reshape({-1, rank}) : x2.mm(V.t());
    const at::Tensor dh = g2.mm(U);
    const at::Tensor a2 = grads[0].defined() ? grads[0].reshape({-1, in}) : at::zeros_like(x2);
    const at::Tensor bU = grads[1].defined() ? grads[1] : at::zeros_like(U);
    const at::Tensor bV = grads[2].defined() ? grads[2] : at::zeros_like(V);
    const at::Tensor d_dh = a2.mm(V.t()) + x2.mm(bV.t());  // through dx = dh V and dV = dh^T x
    at::Tensor d_x2 = dh.mm(bV);                              // through dV
    at::Tensor d_V = dh.t().mm(a2);                           // through dx
    const at::Tensor d_h2 = g2.mm(bU);                        // through dU = g^T h
    at::Tensor d_g2 = h2.mm(bU.t()) + d_dh.mm(U.t());         // through dU and dh = g U
    if (grads.size() > 3 && grads[3].defined()) {
      d_g2 = d_g2 + grads[3];                                 // through dbias = sum g
    }
    const at::Tensor d_U = g2.t().mm(d_dh);                   // through dh
    at::Tensor d_hidden;
    if (hidden.defined()) {
      d_hidden = d_h2.reshape(hidden.sizes());
    } else {                                                  // h was recomputed from x and V
      d_x2 = d_x2 + d_h2.mm(V);
      d_V = d_V + d_h2.t().mm(x2);
    }
    return {d_x2.reshape(x.sizes()), d_U, d_V, d_g2.reshape(g.sizes()), d_hidden, at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor fwd_autograd(c10::DispatchKeySet ks, const at::Tensor& x, const at::Tensor& U,
                        const at::Tensor& V, const OptTensor& bias, c10::string_view backend) {
  refuse_forward_ad("low_rank", x, U, V, bias);
  if (!needs_grad({&x, &U, &V}, bias)) {
    return redispatch_below_autograd<LowRankFwd>(ks, x, U, V, bias, backend);
  }
  return LowRankFwdFunction::apply(x, U, V, bias, std::string(backend))[0];
}

std::tuple<at::Tensor, at::Tensor> fwd_hidden_autograd(const at::Tensor& x, const at::Tensor& U,
                                                       const at::Tensor& V, const OptTensor& bias,
                                                       c10::string_view backend) {
  refuse_forward_ad("low_rank", x, U, V, bias);
  auto out = LowRankFwdHiddenFunction::apply(x, U, V, bias, std::string(backend));
  return {out[0], out[1]};
}

Grads bwd_autograd(c10::DispatchKeySet ks, const at::Tensor& x, const at::Tensor& U,
                   const at::Tensor& V, const at::Tensor& g, const OptTensor& hidden, bool bias_grad,
                   c10::string_view backend) {
  refuse_forward_ad("low_rank", x, U, V, g, hidden);
  if (!needs_grad({&x, &U, &V, &g}, hidden)) {
    return redispatch_below_autograd<LowRankBwd>(ks, x, U, V, g, hidden, bias_grad, backend);
  }
  auto out = LowRankBwdFunction::apply(x, U, V, g, hidden, bias_grad, std::string(backend));
  return {out[0], out[1], out[2], bias_grad ? OptTensor(out[3]) : std::nullopt};
}

}  // namespace
}  // namespace neuralops::ops

TORCH_LIBRARY_IMPL(neuralops, Autograd, m) {
  m.impl("low_rank_fwd", &neuralops::ops::fwd_autograd);
  m.impl("low_rank_fwd_hidden", &neuralops::ops::fwd_hidden_autograd);
  m.impl("low_rank_bwd", &neuralops::ops::bwd_autograd);
}
