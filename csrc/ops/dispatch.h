// Calls a registered neuralops op through the PyTorch dispatcher, as Python's torch.ops does, so the
// C++ API, the autograd kernels and the Python fast path (csrc/python/fastcall.cpp) take the same
// CPU / CUDA / autograd paths. Each op's C++ signature is declared once, here, beside its schema's
// name; typed<>() checks it against the schema registered in csrc/ops/*.cpp on first use.
#pragma once

#include <optional>
#include <tuple>
#include <utility>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace neuralops::ops {

namespace sig {
using Tensor = const at::Tensor&;
using OptTensor = const std::optional<at::Tensor>&;
}  // namespace sig

struct LinearAttnFwd {
  static constexpr const char* name = "neuralops::linear_attn_fwd";
  using Signature = std::tuple<at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>>(
      sig::Tensor q, sig::Tensor k, sig::Tensor v, sig::OptTensor cos, sig::OptTensor sin, sig::OptTensor s0,
      sig::OptTensor z0, c10::string_view phi, bool causal, double eps, double scale, bool return_state);
};

// linear_attn_fwd, and the forward states its backward can reuse (the autograd forward's call).
struct LinearAttnFwdTrain {
  static constexpr const char* name = "neuralops::linear_attn_fwd_train";
  using Signature = std::tuple<at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>, at::Tensor>(
      sig::Tensor q, sig::Tensor k, sig::Tensor v, sig::OptTensor cos, sig::OptTensor sin, sig::OptTensor s0,
      sig::OptTensor z0, c10::string_view phi, bool causal, double eps, double scale, bool return_state);
};

struct LinearAttnBwd {
  static constexpr const char* name = "neuralops::linear_attn_bwd";
  using Signature = std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>,
                               std::optional<at::Tensor>>(
      sig::Tensor grad_out, sig::Tensor q, sig::Tensor k, sig::Tensor v, sig::OptTensor cos, sig::OptTensor sin,
      sig::OptTensor s0, sig::OptTensor z0, sig::OptTensor grad_s, sig::OptTensor grad_z, c10::string_view phi,
      bool causal, double eps, double scale, bool state_grad, sig::OptTensor fwd_states);
};

struct LowRankFwd {
  static constexpr const char* name = "neuralops::low_rank_fwd";
  using Signature = at::Tensor(sig::Tensor x, sig::Tensor U, sig::Tensor V, sig::OptTensor bias,
                               c10::string_view backend);
};

struct LowRankFwdHidden {
  static constexpr const char* name = "neuralops::low_rank_fwd_hidden";
  using Signature = std::tuple<at::Tensor, at::Tensor>(sig::Tensor x, sig::Tensor U, sig::Tensor V,
                                                       sig::OptTensor bias, c10::string_view backend);
};

struct LowRankBwd {
  static constexpr const char* name = "neuralops::low_rank_bwd";
  using Signature = std::tuple<at::Tensor, at::Tensor, at::Tensor, std::optional<at::Tensor>>(
      sig::Tensor x, sig::Tensor U, sig::Tensor V, sig::Tensor grad_out, sig::OptTensor hidden, bool bias_grad,
      c10::string_view backend);
};

struct GqaFwd {
  static constexpr const char* name = "neuralops::gqa_fwd";
  using Signature = std::tuple<at::Tensor, at::Tensor>(sig::Tensor k, sig::Tensor v, int64_t num_kv_heads,
                                                       int64_t num_heads);
};

struct GqaBwd {
  static constexpr const char* name = "neuralops::gqa_bwd";
  using Signature = GqaFwd::Signature;
};

// The ops the Python layer calls: the fast path binds each of them (linear_attn_fwd_train is the
// autograd kernel's call only).
using AllOps = std::tuple<LinearAttnFwd, LinearAttnBwd, LowRankFwd, LowRankFwdHidden, LowRankBwd, GqaFwd, GqaBwd>;

// The op's handle, looked up by name (callers keep it in a function-local static).
template <typename Op>
c10::TypedOperatorHandle<typename Op::Signature> op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, "").template typed<typename Op::Signature>();
}

// For an autograd kernel's calls that record nothing: the op's backend kernel, reached with the key set
// the dispatcher gave the autograd kernel. Against a second call through the dispatcher (under
// AutoDispatchBelowADInplaceOrView) this skips the thread-local guard and the key computation:
// 0.55 us of 2.4 per call of a 12-argument op on the CPU machine.
template <typename Op, typename... Args>
auto redispatch_below_autograd(c10::DispatchKeySet ks, Args&&... args) {
  static const auto handle = op<Op>();
  return handle.redispatch(ks & c10::after_autograd_keyset, std::forward<Args>(args)...);
}

// Forward-mode AD (torch.autograd.forward_ad, torch.func.jvp) has no formulas here: the results
// would carry no tangent, a silent zero. The autograd kernels refuse it first thing, naming the op.
inline bool has_forward_grad(const at::Tensor& t) {
  return t.defined() && t._fw_grad(/*level=*/0).defined();
}

inline bool has_forward_grad(const std::optional<at::Tensor>& t) {
  return t.has_value() && has_forward_grad(*t);
}

template <typename... Tensors>
void refuse_forward_ad(const char* op, const Tensors&... tensors) {
  TORCH_CHECK_NOT_IMPLEMENTED(!(has_forward_grad(tensors) || ...), "neuralops.", op,
                              ": forward-mode AD (torch.autograd.forward_ad, torch.func.jvp) is not supported; "
                              "reverse mode (backward, torch.autograd.grad) is");
}

}  // namespace neuralops::ops
