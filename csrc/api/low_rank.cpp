#include "neuralops/low_rank.h"

#include "ops/dispatch.h"

namespace neuralops::low_rank {
namespace {

using OptTensor = std::optional<at::Tensor>;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, OptTensor>;

}  // namespace

at::Tensor fwd(const at::Tensor& x, const at::Tensor& U, const at::Tensor& V, const OptTensor& bias,
               const std::string& backend) {
  static auto handle = ops::op<ops::LowRankFwd>();
  return handle.call(x, U, V, bias, backend);
}

Grads bwd(const at::Tensor& x, const at::Tensor& U, const at::Tensor& V, const at::Tensor& grad_out,
          const OptTensor& bias, const std::string& backend) {
  static auto handle = ops::op<ops::LowRankBwd>();
  return handle.call(x, U, V, grad_out, std::nullopt, bias.has_value(), backend);
}

}  // namespace neuralops::low_rank
