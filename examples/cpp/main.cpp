// Runs every neuralops op forward and backward through the C++ API (no Python) and checks it
// against a libtorch reference. Usage: neuralops_example [cpu|cuda]; exits 77 when asked for cuda on
// a machine without a GPU, non-zero on any mismatch.
#include <iostream>
#include <string>
#include <vector>

#include <neuralops/neuralops.h>
#include <torch/torch.h>

namespace {

int failures = 0;

void report(const std::string& what, bool ok, double err = 0.0) {
  std::cout << (ok ? "  ok    " : "  FAIL  ") << what;
  if (err > 0.0) {
    std::cout << "  (relative error " << err << ")";
  }
  std::cout << "\n";
  failures += ok ? 0 : 1;
}

double rel_error(const torch::Tensor& out, const torch::Tensor& ref) {
  auto o = out.to(torch::kDouble), r = ref.to(torch::kDouble);
  return ((o - r).norm() / r.norm().clamp_min(1e-30)).item<double>();
}

double tolerance(torch::ScalarType t) {
  return t == torch::kBFloat16 ? 1e-2 : t == torch::kHalf ? 5e-3 : 1e-5;
}

void check_gqa(torch::Device device, torch::ScalarType dtype) {
  auto opts = torch::TensorOptions().device(device).dtype(dtype);
  const int64_t hkv = 2, h = 8, n_rep = h / hkv;
  // A [B, N, H, D] tensor viewed as [B, H, N, D]: the kernels read the strides, no copy.
  auto k = torch::randn({2, 33, hkv, 64}, opts).transpose(1, 2).requires_grad_();
  auto v = torch::randn({2, hkv, 33, 40}, opts).requires_grad_();
  const std::string tag = std::string("gqa ") + c10::toString(dtype) + " on " + device.str();

  auto [ek, ev] = neuralops::gqa::fwd(k.detach(), v.detach(), hkv, h);
  report(tag + ": fwd is repeat_interleave",
         torch::equal(ek, k.detach().repeat_interleave(n_rep, 1)) &&
             torch::equal(ev, v.detach().repeat_interleave(n_rep, 1)));

  auto [ak, av] = neuralops::gqa::fwd(k, v, hkv, h);  // recorded by autograd: k, v require grad
  auto wk = torch::randn_like(ak), wv = torch::randn_like(av);
  ((ak * wk).sum() + (av * wv).sum()).backward();
  auto k_ref = k.detach().clone().requires_grad_(), v_ref = v.detach().clone().requires_grad_();
  ((k_ref.repeat_interleave(n_rep, 1) * wk).sum() + (v_ref.repeat_interleave(n_rep, 1) * wv).sum())
      .backward();
  double err = std::max(rel_error(k.grad(), k_ref.grad()), rel_error(v.grad(), v_ref.grad()));
  report(tag + ": autograd gradients", err <= tolerance(dtype), err);

  auto [gk, gv] = neuralops::gqa::bwd(wk, wv, hkv, h);
  err = rel_error(gk, wk.to(torch::kDouble).view({2, hkv, n_rep, 33, 64}).sum(2));
  report(tag + ": bwd is the group sum", err <= tolerance(dtype), err);

  try {
    neuralops::gqa::fwd(k.detach(), v.detach(), 3, h);
    report(tag + ": indivisible head counts rejected", false);
  } catch (const c10::ValueError& e) {
    report(tag + ": indivisible head counts rejected", true);
  }
}

void check_low_rank(torch::Device device, torch::ScalarType dtype) {
  auto opts = torch::TensorOptions().device(device).dtype(dtype);
  const std::string tag = std::string("low_rank ") + c10::toString(dtype) + " on " + device.str();
  for (int64_t rows : {16, 300}) {  // decode-sized and a larger batch take different kernels
    auto x = torch::randn({rows, 96}, opts).requires_grad_();
    auto V = (torch::randn({32, 96}, opts) / 10).requires_grad_();
    auto U = (torch::randn({80, 32}, opts) / 6).requires_grad_();
    auto b = torch::randn({80}, opts).requires_grad_();
    auto y = neuralops::low_rank::fwd(x, U, V, b);
    auto xd = x.detach().to(torch::kDouble), Ud = U.detach().to(torch::kDouble);
    auto Vd = V.detach().to(torch::kDouble), bd = b.detach().to(torch::kDouble);
    xd.requires_grad_(); Ud.requires_grad_(); Vd.requires_grad_(); bd.requires_grad_();
    auto ref = torch::nn::functional::linear(torch::nn::functional::linear(xd, Vd), Ud, bd);
    const std::string shape = tag + " M=" + std::to_string(rows);
    report(shape + ": fwd", rel_error(y, ref) <= tolerance(dtype), rel_error(y, ref));
    auto g = torch::randn_like(y);
    y.backward(g);
    ref.backward(g.to(torch::kDouble));
    double err = std::max({rel_error(x.grad(), xd.grad()), rel_error(U.grad(), Ud.grad()),
                           rel_error(V.grad(), Vd.grad()), rel_error(b.grad(), bd.grad())});
    report(shape + ": autograd gradients", err <= tolerance(dtype), err);
    auto [dx, dU, dV, dbias] = neuralops::low_rank::bwd(x.detach(), U.detach(), V.detach(), g, b.detach());
    err = std::max(rel_error(dx, xd.grad()), rel_error(*dbias, bd.grad()));
    report(shape + ": bwd", err <= tolerance(dtype), err);
  }
  try {
    neuralops::low_rank::fwd(torch::randn({4, 8}, opts), torch::randn({5, 3}, opts),
                             torch::randn({2, 8}, opts));
    report(tag + ": mismatched rank rejected", false);
  } catch (const c10::ValueError&) {
    report(tag + ": mismatched rank rejected", true);
  }
}

// A causal, GQA (4 query heads per kv head) call against the quadratic form in float64.
void check_linear_attn(torch::Device device, torch::ScalarType dtype) {
  auto opts = torch::TensorOptions().device(device).dtype(dtype);
  const std::string tag = std::string("linear_attn ") + c10::toString(dtype) + " on " + device.str();
  const int64_t b = 2, h = 8, hkv = 2, n = 77, d = 32, dv = 48;
  auto q = torch::randn({b, h, n, d}, opts).requires_grad_();
  auto k = torch::randn({b, hkv, n, d}, opts).requires_grad_();
  auto v = torch::randn({b, hkv, n, dv}, opts).requires_grad_();
  neuralops::linear_attn::Options options;
  options.causal = true;
  auto out = neuralops::linear_attn::fwd(q, k, v, options).out;

  auto qd = q.detach().to(torch::kDouble).requires_grad_();
  auto kd = k.detach().to(torch::kDouble).requires_grad_();
  auto vd = v.detach().to(torch::kDouble).requires_grad_();
  auto phi = [](const torch::Tensor& x) { return torch::elu(x) + 1; };
  auto kr = kd.repeat_interleave(h / hkv, 1), vr = vd.repeat_interleave(h / hkv, 1);
  auto s = torch::matmul(phi(qd), phi(kr).transpose(-1, -2)).tril();
  auto ref = torch::matmul(s, vr) / (s.sum(-1, true) + 1e-6);
  report(tag + ": causal GQA fwd", rel_error(out, ref) <= tolerance(dtype), rel_error(out, ref));

  auto g = torch::randn_like(out);
  out.backward(g);
  ref.backward(g.to(torch::kDouble));
  double err = std::max({rel_error(q.grad(), qd.grad()), rel_error(k.grad(), kd.grad()),
                         rel_error(v.grad(), vd.grad())});
  report(tag + ": autograd gradients", err <= tolerance(dtype), err);
  auto [dq, dk, dvv] = neuralops::linear_attn::bwd(q.detach(), k.detach(), v.detach(), g, options);
  err = std::max(rel_error(dq, qd.grad()), rel_error(dvv, vd.grad()));
  report(tag + ": bwd", err <= tolerance(dtype), err);

  try {
    options.phi = "softmax";
    neuralops::linear_attn::fwd(q.detach(), k.detach(), v.detach(), options);
    report(tag + ": unknown phi rejected", false);
  } catch (const c10::ValueError&) {
    report(tag + ": unknown phi rejected", true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu";
  if (where == "cuda" && !torch::cuda::is_available()) {
    std::cout << "no CUDA device: skipped\n";
    return 77;
  }
  torch::manual_seed(0);
  const torch::Device device(where);
  std::cout << "neuralops " << neuralops::build_info() << "\n";
  std::vector<torch::ScalarType> dtypes = {torch::kFloat};
  if (device.is_cuda()) {
    dtypes = {torch::kFloat, torch::kHalf, torch::kBFloat16};
  }
  for (auto dtype : dtypes) {
    check_gqa(device, dtype);
    check_low_rank(device, dtype);
    check_linear_attn(device, dtype);
  }
  std::cout << (failures ? "FAILED: " : "all passed: ") << failures << " failures\n";
  return failures ? 1 : 0;
}
