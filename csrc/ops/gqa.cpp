// GQA head expansion: neuralops::gqa_fwd (num_kv_heads -> num_heads) and neuralops::gqa_bwd (the
// sum over each group of heads). Kernels: triton_src/gqa/kernels.py; specializations built:
// triton_src/gqa/spec.py.
//
//   gqa_fwd(k [B, Hkv, N, Dk], v [B, Hkv, N', Dv]) -> k, v expanded to H heads (contiguous)
//   gqa_bwd(grad_k [B, H, N, Dk], grad_v [B, H, N', Dv]) -> gradients summed to Hkv heads
//
// Inputs may have any strides (a transposed [B, N, H, D] view costs no copy) as long as the last
// dimension is contiguous; otherwise it is made contiguous first. CPU tensors take an ATen path.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <type_traits>

#include "gqa_kernels.h"
#include "ops/dispatch.h"
#include "ops/launch_utils.h"

namespace neuralops::ops {
namespace {

void check_heads(int64_t num_kv_heads, int64_t num_heads) {
  TORCH_CHECK_VALUE(num_kv_heads > 0 && num_heads > 0,
                    "neuralops.gqa: num_kv_heads and num_heads must be positive, got num_kv_heads=",
                    num_kv_heads, " and num_heads=", num_heads);
  TORCH_CHECK_VALUE(num_heads % num_kv_heads == 0, "neuralops.gqa: num_heads (", num_heads,
                    ") must be a multiple of num_kv_heads (", num_kv_heads, ")");
}

void check_input(const at::Tensor& t, int64_t heads, const char* name, const char* heads_name) {
  TORCH_CHECK_VALUE(t.dim() == 4, "neuralops.gqa: ", name, " must be 4-D [B, ", heads_name,
                    ", N, D], got shape ", t.sizes());
  TORCH_CHECK_VALUE(t.size(1) == heads, "neuralops.gqa: ", name, " has ", t.size(1),
                    " heads in dim 1 but ", heads_name, " is ", heads);
}

int64_t block_d(int64_t d) {
  return d <= 32 ? 32 : d <= 64 ? 64 : 128;
}

at::Tensor last_dim_contiguous(const at::Tensor& t) {
  return (t.size(3) <= 1 || t.stride(3) == 1) ? t : t.contiguous();
}

// expand (kernel gqa_expand) or reduce (gqa_reduce) of one tensor on CUDA.
template <bool kExpand>
at::Tensor run_cuda(const at::Tensor& input, int64_t num_kv_heads, int64_t num_heads,
                    const char* name) {
  check_kernel_dtype(input, "gqa", name);
  const at::Tensor x = last_dim_contiguous(input);
  const int64_t n_rep = num_heads / num_kv_heads;
  const int64_t b = x.size(0), n = x.size(2), d = x.size(3);
  at::Tensor out = at::empty({b, kExpand ? num_heads : num_kv_heads, n, d}, x.options());
  if (out.numel() == 0) {
    return out;
  }
  c10::DeviceGuard guard(x.device());
  if constexpr (kExpand) {
    const aot::GqaExpandKey key{x.scalar_type(), block_d(d)};
    const auto cx = aot::gqa_expand_constexprs(key, x.get_device());
    auto config = launch_config(x, b * num_kv_heads * ceil_div(n, cx.BLOCK_N), 1, 1, "gqa_fwd");
    aot::gqa_expand(key, config, x.const_data_ptr(), out.mutable_data_ptr(), num_kv_heads, n, d,
                    n_rep, kernel_stride(x, 0), kernel_stride(x, 1), kernel_stride(x, 2),
                    kernel_stride(out, 0), kernel_stride(out, 1), kernel_stride(out, 2));
  } else {
    const aot::GqaReduceKey key{x.scalar_type(), block_d(d)};
    const auto cx = aot::gqa_reduce_constexprs(key, x.get_device());
    auto config = launch_config(x, b * num_kv_heads * ceil_div(n, cx.BLOCK_N), 1, 1, "gqa_bwd");
    aot::gqa_reduce(key, config, x.const_data_ptr(), out.mutable_data_ptr(), num_kv_heads, n, d,
                    n_rep, kernel_stride(x, 0), kernel_stride(x, 1), kernel_stride(x, 2),
                    kernel_stride(out, 0), kernel_stride(out, 1), kernel_stride(out, 2));
  }
  return out;
}

at::Tensor expand_cpu(const at::Tensor& x, int64_t num_kv_heads, int64_t num_heads) {
  const int64_t n_rep = num_heads / num_kv_heads;
  return x.unsqueeze(2)
      .expand({x.size(0), num_kv_heads, n_rep, x.size(2), x.size(3)})
      .reshape({x.size(0), num_heads, x.size(2), x.size(3)})
      .contiguous();
}

at::Tensor reduce_cpu(const at::Tensor& g, int64_t num_kv_heads, int64_t num_heads) {
  const int64_t n_rep = num_heads / num_kv_heads;
  const bool low_precision = g.scalar_type() == at::kHalf || g.scalar_type() == at::kBFloat16;
  at::Tensor grouped = g.reshape({g.size(0), num_kv_heads, n_rep, g.size(2), g.size(3)});
  at::Tensor sum = low_precision ? grouped.sum(2, false, at::kFloat) : grouped.sum(2);
  return sum.to(g.scalar_type()).contiguous();
}

// Expands (kExpand) or group-sums a pair of tensors; `heads` is what dim 1 of each must hold.
template <bool kExpand>
std::tuple<at::Tensor, at::Tensor> run_pair(const at::Tensor& a, const at::Tensor& b,
                                            int64_t num_kv_heads, int64_t num_heads,
                                            const char* a_name, const char* b_name) {
  check_heads(num_kv_heads, num_heads);
  const int64_t heads = kExpand ? num_kv_heads : num_heads;
  const char* heads_name = kExpand ? "num_kv_heads" : "num_heads";
  check_input(a, heads, a_name, heads_name);
  check_input(b, heads, b_name, heads_name);
  check_same_device(a, b, "gqa", a_name, b_name);
  if (a.is_cuda()) {
    return {run_cuda<kExpand>(a, num_kv_heads, num_heads, a_name),
            run_cuda<kExpand>(b, num_kv_heads, num_heads, b_name)};
  }
  auto cpu = kExpand ? expand_cpu : reduce_cpu;
  return {cpu(a, num_kv_heads, num_heads), cpu(b, num_kv_heads, num_heads)};
}

std::tuple<at::Tensor, at::Tensor> gqa_fwd(const at::Tensor& k, const at::Tensor& v,
                                           int64_t num_kv_heads, int64_t num_heads) {
  return run_pair<true>(k, v, num_kv_heads, num_heads, "k", "v");
}

std::tuple<at::Tensor, at::Tensor> gqa_bwd(const at::Tensor& grad_k, const at::Tensor& grad_v,
                                           int64_t num_kv_heads, int64_t num_heads) {
  return run_pair<false>(grad_k, grad_v, num_kv_heads, num_heads, "grad_k", "grad_v");
}

using Pair = std::tuple<at::Tensor, at::Tensor>;

template <bool kExpand>
Pair call_op(const at::Tensor& a, const at::Tensor& b, int64_t num_kv_heads, int64_t num_heads) {
  static auto handle = op<std::conditional_t<kExpand, GqaFwd, GqaBwd>>();
  return handle.call(a, b, num_kv_heads, num_heads);
}

// Autograd, in C++ so Python and C++ callers share it and a call costs no Python. The group sum is
// the expansion's adjoint and the expansion the group sum's, so each op's backward is the other op,
// called through the dispatcher: double backward works too.
template <bool kExpand>
class GqaAutograd : public torch::autograd::Function<GqaAutograd<kExpand>> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& a, const at::Tensor& b,
                                                int64_t num_kv_heads, int64_t num_heads) {
    ctx->saved_data["num_kv_heads"] = num_kv_heads;
    ctx->saved_data["num_heads"] = num_heads;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [x, y] = call_op<kExpand>(a, b, num_kv_heads, num_heads);
    return {x, y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto [ga, gb] = call_op<!kExpand>(grads[0], grads[1], ctx->saved_data["num_kv_heads"].toInt(),
                                      ctx->saved_data["num_heads"].toInt());
    return {ga, gb, at::Tensor(), at::Tensor()};
  }
};

template <bool kExpand>
Pair autograd_pair(c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b, int64_t num_kv_heads,
                   int64_t num_heads) {
  refuse_forward_ad("gqa", a, b);
  if (!at::GradMode::is_enabled() || !(a.requires_grad() || b.requires_grad())) {
    return redispatch_below_autograd<std::conditional_t<kExpand, GqaFwd, GqaBwd>>(ks, a, b, num_kv_heads,
                                                                                  num_heads);
  }
  auto out = GqaAutograd<kExpand>::apply(a, b, num_kv_heads, num_heads);
  return {out[0], out[1]};
}

}  // namespace
}  // namespace neuralops::ops

TORCH_LIBRARY_FRAGMENT(neuralops, m) {
  m.def("gqa_fwd(Tensor k, Tensor v, int num_kv_heads, int num_heads) -> (Tensor, Tensor)");
  m.def("gqa_bwd(Tensor grad_k, Tensor grad_v, int num_kv_heads, int num_heads) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(neuralops, CUDA, m) {
  m.impl("gqa_fwd", &neuralops::ops::gqa_fwd);
  m.impl("gqa_bwd", &neuralops::ops::gqa_bwd);
}

TORCH_LIBRARY_IMPL(neuralops, CPU, m) {
  m.impl("gqa_fwd", &neuralops::ops::gqa_fwd);
  m.impl("gqa_bwd", &neuralops::ops::gqa_bwd);
}

TORCH_LIBRARY_IMPL(neuralops, Autograd, m) {
  m.impl("gqa_fwd", &neuralops::ops::autograd_pair<true>);
  m.impl("gqa_bwd", &neuralops::ops::autograd_pair<false>);
}
