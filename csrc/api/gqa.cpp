#include "neuralops/gqa.h"

#include "ops/dispatch.h"

namespace neuralops::gqa {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;

}  // namespace

Pair fwd(const at::Tensor& k, const at::Tensor& v, int64_t num_kv_heads, int64_t num_heads) {
  static auto handle = ops::op<ops::GqaFwd>();
  return handle.call(k, v, num_kv_heads, num_heads);
}

Pair bwd(const at::Tensor& grad_k, const at::Tensor& grad_v, int64_t num_kv_heads,
         int64_t num_heads) {
  static auto handle = ops::op<ops::GqaBwd>();
  return handle.call(grad_k, grad_v, num_kv_heads, num_heads);
}

}  // namespace neuralops::gqa
