#include "neuralops/gqa.h"

#include <torch/csrc/autograd/custom_function.h>

#include "api/dispatch.h"

namespace neuralops {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Signature = Pair(const at::Tensor&, const at::Tensor&, int64_t, int64_t);

class GqaFunction : public torch::autograd::Function<GqaFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& k, const at::Tensor& v,
                                                int64_t num_kv_heads, int64_t num_heads) {
    ctx->saved_data["num_kv_heads"] = num_kv_heads;
    ctx->saved_data["num_heads"] = num_heads;
    auto [ek, ev] = gqa::fwd(k, v, num_kv_heads, num_heads);
    return {ek, ev};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto [gk, gv] = gqa::bwd(grads[0], grads[1], ctx->saved_data["num_kv_heads"].toInt(),
                             ctx->saved_data["num_heads"].toInt());
    return {gk, gv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

namespace gqa {

Pair fwd(const at::Tensor& k, const at::Tensor& v, int64_t num_kv_heads, int64_t num_heads) {
  static auto handle = api::op<Signature>("neuralops::gqa_fwd");
  return handle.call(k, v, num_kv_heads, num_heads);
}

Pair bwd(const at::Tensor& grad_k, const at::Tensor& grad_v, int64_t num_kv_heads,
         int64_t num_heads) {
  static auto handle = api::op<Signature>("neuralops::gqa_bwd");
  return handle.call(grad_k, grad_v, num_kv_heads, num_heads);
}

}  // namespace gqa

namespace autograd {

Pair gqa(const at::Tensor& k, const at::Tensor& v, int64_t num_kv_heads, int64_t num_heads) {
  auto out = GqaFunction::apply(k, v, num_kv_heads, num_heads);
  return {out[0], out[1]};
}

}  // namespace autograd
}  // namespace neuralops
