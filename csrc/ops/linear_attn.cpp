// Linear attention: neuralops::linear_attn_fwd and neuralops::linear_attn_bwd. Kernels and their
// math: triton_src/linear_attn/kernels.py; specializations built: triton_src/linear_attn/spec.py.
//
//   linear_attn_fwd(q [B, H, N, D], k [B, Hkv, N, D], v [B, Hkv, N, Dv], cos?, sin?, S0?, z0?,
//                   phi, causal, eps, scale, return_state) -> (out [B, H, N, Dv], S?, z?)
//   linear_attn_fwd_train(same arguments) -> (out, S?, z?, fwd_states)
//   linear_attn_bwd(grad_out, q, k, v, cos?, sin?, S0?, z0?, grad_S?, grad_z?, phi, causal, eps,
//                   scale, state_grad, fwd_states?) -> (dq, dk, dv, dS0?, dz0?)
//
// The autograd forward calls linear_attn_fwd_train, whose fwd_states (fp32, [B, Hkv, G * R, EP] or
// [0]; linear_attn_states_shape gives the shape) the backward reads instead of recomputing them.
//
// phi is "elu+1", "relu", "identity" or "softmax_free" (identity features, no normalizer). States
// are fp32 (fp64 for fp64 inputs on CPU): S [B, Hkv, D, Dv] and z [B, Hkv, D], with a part
// dimension of 2 after Hkv under Cosformer (cos and sin weights [N] or [B, N]). S and z are None
// unless return_state, dS0 and dz0 unless state_grad (two allocations less per call: host time).
// No gradient flows to the weights.
//
// CUDA takes fp16, bf16 and fp32 with D, Dv <= 256 (D <= 128 under Cosformer in fp32: the 2 D
// features up to 512 have their block in bf16 and fp16, spec.py COSFORMER_BLOCK_DTYPES); inputs may
// have any strides with a unit last stride: a transposed [B, N, H, D] view is read in place. An
// input whose pointer or strides are not 16-divisible, or whose last dimension is not a multiple of
// 16, is first copied into a padded buffer (padding that has zero features). CPU tensors of any
// floating dtype take a chunked ATen path (O(N) memory, like the kernels).
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "linear_attn_kernels.h"
#include "ops/launch_utils.h"
#include "ops/linear_attn_aten.h"

namespace neuralops::ops {
namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using FwdResult = std::tuple<Tensor, OptTensor, OptTensor>;
using BwdResult = std::tuple<Tensor, Tensor, Tensor, OptTensor, OptTensor>;
using TrainResult = std::tuple<Tensor, OptTensor, OptTensor, Tensor>;

// ---- argument checks (both devices) ------------------------------------------------------------

struct Phi {
  int64_t kind;    // kernels.py PHI_KINDS: 0 identity, 1 elu+1, 2 relu
  bool normalize;  // false for softmax_free
};

Phi parse_phi(std::string_view phi) {
  if (phi == "elu+1") return {1, true};
  if (phi == "relu") return {2, true};
  if (phi == "identity") return {0, true};
  if (phi == "softmax_free") return {0, false};
  TORCH_CHECK_VALUE(false, "neuralops.linear_attn: phi must be 'elu+1', 'relu', 'identity' or 'softmax_free', got '",
                    std::string(phi), "'");
}

struct Shape {
  int64_t b, h, hkv, n, d, dv, parts;
  int64_t f() const { return parts * d; }
};

void check_state(const OptTensor& s, const OptTensor& z, const Shape& sh, const Tensor& q, const char* s_name,
                 const char* z_name) {
  TORCH_CHECK_VALUE(s.has_value() == z.has_value(), "neuralops.linear_attn: ", s_name, " and ", z_name,
                    " go together: pass both or neither");
  if (!s.has_value()) {
    return;
  }
  const auto want = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  for (const Tensor* t : {&*s, &*z}) {
    TORCH_CHECK_TYPE(t->scalar_type() == want, "neuralops.linear_attn: ", t == &*s ? s_name : z_name,
                     " must be ", want, " for ", q.scalar_type(), " inputs, got ", t->scalar_type());
    check_same_device(q, *t, "linear_attn", "q", t == &*s ? s_name : z_name);
  }
  std::vector<int64_t> s_shape{sh.b, sh.hkv}, z_shape{sh.b, sh.hkv};
  if (sh.parts == 2) {
    s_shape.push_back(2);
    z_shape.push_back(2);
  }
  s_shape.insert(s_shape.end(), {sh.d, sh.dv});
  z_shape.push_back(sh.d);
  TORCH_CHECK_VALUE(s->sizes() == at::IntArrayRef(s_shape), "neuralops.linear_attn: ", s_name, " must have shape ",
                    at::IntArrayRef(s_shape), sh.parts == 2 ? " ([B, Hkv, 2, D, Dv] under Cosformer)" : " ([B, Hkv, D, Dv])",
                    ", got ", s->sizes());
  TORCH_CHECK_VALUE(z->sizes() == at::IntArrayRef(z_shape), "neuralops.linear_attn: ", z_name, " must have shape ",
                    at::IntArrayRef(z_shape), sh.parts == 2 ? " ([B, Hkv, 2, D] under Cosformer)" : " ([B, Hkv, D])",
                    ", got ", z->sizes());
}

Shape check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos, const OptTensor& sin) {
  TORCH_CHECK_VALUE(q.dim() == 4, "neuralops.linear_attn: q must be 4-D [B, H, N, D], got shape ", q.sizes());
  TORCH_CHECK_VALUE(k.dim() == 4, "neuralops.linear_attn: k must be 4-D [B, Hkv, N, D], got shape ", k.sizes());
  TORCH_CHECK_VALUE(v.dim() == 4, "neuralops.linear_attn: v must be 4-D [B, Hkv, N, Dv], got shape ", v.sizes());
  TORCH_CHECK_TYPE(at::isFloatingType(q.scalar_type()), "neuralops.linear_attn: q must be floating point, got ",
                   q.scalar_type());
  TORCH_CHECK_TYPE(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
                   "neuralops.linear_attn: q, k and v must have one dtype, got ", q.scalar_type(), ", ",
                   k.scalar_type(), " and ", v.scalar_type());
  check_same_device(q, k, "linear_attn", "q", "k");
  check_same_device(q, v, "linear_attn", "q", "v");
  const Shape sh{q.size(0), q.size(1), k.size(1), q.size(2), q.size(3), v.size(3), cos.has_value() ? 2 : 1};
  TORCH_CHECK_VALUE(k.size(0) == sh.b && v.size(0) == sh.b, "neuralops.linear_attn: q, k and v must have one batch size, got ",
                    sh.b, ", ", k.size(0), " and ", v.size(0));
  TORCH_CHECK_VALUE(k.size(2) == sh.n && v.size(2) == sh.n, "neuralops.linear_attn: q, k and v must have one sequence length, got ",
                    sh.n, ", ", k.size(2), " and ", v.size(2));
  TORCH_CHECK_VALUE(k.size(3) == sh.d, "neuralops.linear_attn: k must have q's head dim ", sh.d, ", got ", k.size(3));
  TORCH_CHECK_VALUE(v.size(1) == sh.hkv, "neuralops.linear_attn: k and v must have one number of heads, got ", sh.hkv,
                    " and ", v.size(1));
  TORCH_CHECK_VALUE(sh.d > 0 && sh.dv > 0, "neuralops.linear_attn: head dims must be positive, got D=", sh.d,
                    " and Dv=", sh.dv);
  // H = 0 is refused, not returned empty: the CPU path divides by the group size H / Hkv.
  TORCH_CHECK_VALUE(sh.h > 0 && sh.hkv > 0 && sh.h % sh.hkv == 0, "neuralops.linear_attn: q's heads (", sh.h,
                    ") must be a positive multiple of k's and v's (", sh.hkv, ")");
  TORCH_CHECK_VALUE(cos.has_value() == sin.has_value(),
                    "neuralops.linear_attn: cos_weight and sin_weight go together: pass both or neither");
  if (cos.has_value()) {
    for (const Tensor* w : {&*cos, &*sin}) {
      const char* name = w == &*cos ? "cos_weight" : "sin_weight";
      TORCH_CHECK_TYPE(at::isFloatingType(w->scalar_type()), "neuralops.linear_attn: ", name,
                       " must be floating point, got ", w->scalar_type());
      const bool ok = (w->dim() == 1 && w->size(0) == sh.n) ||
                      (w->dim() == 2 && w->size(1) == sh.n && (w->size(0) == sh.b || w->size(0) == 1));
      TORCH_CHECK_VALUE(ok, "neuralops.linear_attn: ", name, " must have shape [N] or [B, N] = [", sh.n, "] or [", sh.b,
                        ", ", sh.n, "], got ", w->sizes());
      check_same_device(q, *w, "linear_attn", "q", name);
    }
  }
  return sh;
}

// ---- CPU: chunked ATen (also the reference for C++ users without a GPU) ------------------------

constexpr int64_t kCpuChunk = 64;

Tensor phi_of(const Tensor& x, int64_t kind) {
  if (kind == 1) return at::where(x > 0, x + 1, x.clamp_max(0).exp());
  if (kind == 2) return x.clamp_min(0);
  return x;
}

Tensor dphi_of(const Tensor& x, int64_t kind) {
  if (kind == 1) return at::where(x > 0, at::ones_like(x), x.clamp_max(0).exp());
  if (kind == 2) return (x > 0).to(x.scalar_type());
  return at::ones_like(x);
}

// Position weights as [B or 1, 1, 1, N, 1] (the GQA-grouped layout below), or nothing.
std::optional<std::pair<Tensor, Tensor>> cpu_weights(const OptTensor& cos, const OptTensor& sin, at::ScalarType dt) {
  if (!cos.has_value()) return std::nullopt;
  auto shape = [&](const Tensor& w) {
    Tensor x = w.to(dt);
    x = x.dim() == 1 ? x.unsqueeze(0) : x;
    return x.reshape({x.size(0), 1, 1, x.size(1), 1});
  };
  return std::make_pair(shape(*cos), shape(*sin));
}

// Features [B, Hkv, R or 1, N, F] from x [B, Hx, N, D] (R = query heads per kv head).
Tensor features(const Tensor& x, int64_t groups, int64_t kind, double mult,
                const std::optional<std::pair<Tensor, Tensor>>& w) {
  Tensor f = phi_of(x, kind) * mult;
  f = f.reshape({x.size(0), x.size(1) / groups, groups, x.size(2), x.size(3)});
  if (!w) return f;
  return at::cat({f * w->first, f * w->second}, -1);
}

// The gradient of a feature tensor [B, Hkv, R, N, F] back to x [B, Hx, N, D].
Tensor feature_grad(const Tensor& gf, const Tensor& x, int64_t kind, double mult,
                    const std::optional<std::pair<Tensor, Tensor>>& w) {
  Tensor g = gf;
  if (w) {
    const int64_t d = x.size(3);
    g = gf.narrow(-1, 0, d) * w->first + gf.narrow(-1, d, d) * w->second;
  }
  g = g.reshape(x.sizes());
  return g * dphi_of(x, kind) * mult;
}

Tensor user_state_view(const Tensor& flat, const Shape& sh, bool is_z) {
  // [B, Hkv, 1, F(, Dv)] -> [B, Hkv, (2,) D(, Dv)]
  std::vector<int64_t> shape{sh.b, sh.hkv};
  if (sh.parts == 2) shape.push_back(2);
  shape.push_back(sh.d);
  if (!is_z) shape.push_back(sh.dv);
  return flat.reshape(shape).contiguous();
}

FwdResult fwd_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos, const OptTensor& sin,
                  const OptTensor& s0, const OptTensor& z0, const Shape& sh, Phi phi, bool causal, double eps,
                  double scale, bool return_state) {
  const auto dt = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t r = sh.h / sh.hkv, f = sh.f();
  const auto w = cpu_weights(cos, sin, dt);
  const Tensor qf = features(q.to(dt), r, phi.kind, scale, w);           // [B, Hkv, R, N, F]
  const Tensor kf = features(k.to(dt), 1, phi.kind, 1.0, w);             // [B, Hkv, 1, N, F]
  const Tensor vv = v.to(dt).unsqueeze(2);                                // [B, Hkv, 1, N, Dv]
  Tensor s = s0 ? s0->to(dt).reshape({sh.b, sh.hkv, 1, f, sh.dv}) : at::zeros({sh.b, sh.hkv, 1, f, sh.dv}, qf.options());
  Tensor z = z0 ? z0->to(dt).reshape({sh.b, sh.hkv, 1, f}) : at::zeros({sh.b, sh.hkv, 1, f}, qf.options());
  Tensor out = at::empty({sh.b, sh.hkv, r, sh.n, sh.dv}, qf.options());
  if (causal) {
    for (int64_t c0 = 0; c0 < sh.n; c0 += kCpuChunk) {
      const int64_t len = std::min(kCpuChunk, sh.n - c0);
      const Tensor qc = qf.narrow(3, c0, len), kc = kf.narrow(3, c0, len), vc = vv.narrow(3, c0, len);
      const Tensor a = qc.matmul(kc.transpose(-1, -2)).tril();
      Tensor num = a.matmul(vc) + qc.matmul(s);
      if (phi.normalize) {
        num = num / (a.sum(-1) + (qc * z.unsqueeze(3)).sum(-1) + eps).unsqueeze(-1);
      }
      out.narrow(3, c0, len).copy_(num);
      s = s + kc.transpose(-1, -2).matmul(vc);
      z = z + kc.sum(3);
    }
  } else {
    s = s + kf.transpose(-1, -2).matmul(vv);
    z = z + kf.sum(3);
    Tensor num = qf.matmul(s);
    if (phi.normalize) {
      num = num / ((qf * z.unsqueeze(3)).sum(-1) + eps).unsqueeze(-1);
    }
    out.copy_(num);
  }
  Tensor result = out.reshape({sh.b, sh.h, sh.n, sh.dv}).to(q.scalar_type());
  if (!return_state) {
    return {result, std::nullopt, std::nullopt};
  }
  return {result, user_state_view(s, sh, false), user_state_view(z, sh, true)};
}

// Differentiable by autograd (linear_attn_bwd_aten: double backward): every chunk's result is a new
// tensor, joined once at the end; no buffer is written in place after a view of it was read.
BwdResult bwd_cpu(
    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos, const OptTensor& sin,
    const OptTensor& s0, const OptTensor& z0, const OptTensor& ds_fin, const OptTensor& dz_fin, const Shape& sh, Phi phi,
    bool causal, double eps, double scale, bool state_grad) {
  const auto dt = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t r = sh.h / sh.hkv, f = sh.f();
  const auto w = cpu_weights(cos, sin, dt);
  const Tensor q32 = q.to(dt), k32 = k.to(dt);
  const Tensor qf = features(q32, r, phi.kind, scale, w);
  const Tensor kf = features(k32, 1, phi.kind, 1.0, w);
  const Tensor vv = v.to(dt).unsqueeze(2);
  const Tensor go = dout.to(dt).reshape({sh.b, sh.hkv, r, sh.n, sh.dv});
  Tensor s = s0 ? s0->to(dt).reshape({sh.b, sh.hkv, 1, f, sh.dv}) : at::zeros({sh.b, sh.hkv, 1, f, sh.dv}, qf.options());
  Tensor z = z0 ? z0->to(dt).reshape({sh.b, sh.hkv, 1, f}) : at::zeros({sh.b, sh.hkv, 1, f}, qf.options());
  Tensor rs = ds_fin ? ds_fin->to(dt).reshape({sh.b, sh.hkv, f, sh.dv}) : at::zeros({sh.b, sh.hkv, f, sh.dv}, qf.options());
  Tensor rho = dz_fin ? dz_fin->to(dt).reshape({sh.b, sh.hkv, f}) : at::zeros({sh.b, sh.hkv, f}, qf.options());
  Tensor dqf, dkf, dv;
  // Rows' g = dout / den and r = -(dout . out) / den (g = dout, r = 0 unnormalized).
  auto row_grads = [&](const Tensor& num, const Tensor& den, const Tensor& gc) -> std::pair<Tensor, Tensor> {
    if (!phi.normalize) return {gc, at::zeros(gc.sizes().slice(0, 4), gc.options())};
    return {gc / den.unsqueeze(-1), -(gc * (num / den.unsqueeze(-1))).sum(-1) / den};
  };
  if (causal) {
    const int64_t chunks = ceil_div(sh.n, kCpuChunk);
    std::vector<Tensor> g(chunks), rr(chunks), dq_parts(chunks), dk_parts(chunks), dv_parts(chunks);
    for (int64_t c = 0; c < chunks; ++c) {  // forward order: dq
      const int64_t c0 = c * kCpuChunk, len = std::min(kCpuChunk, sh.n - c0);
      const Tensor qc = qf.narrow(3, c0, len), kc = kf.narrow(3, c0, len), vc = vv.narrow(3, c0, len);
      const Tensor a = qc.matmul(kc.transpose(-1, -2)).tril();
      const Tensor num = a.matmul(vc) + qc.matmul(s);
      std::tie(g[c], rr[c]) = row_grads(num, a.sum(-1) + (qc * z.unsqueeze(3)).sum(-1) + eps, go.narrow(3, c0, len));
      const Tensor ds = (g[c].matmul(vc.transpose(-1, -2)) + rr[c].unsqueeze(-1)).tril();
      dq_parts[c] = ds.matmul(kc) + g[c].matmul(s.transpose(-1, -2)) + rr[c].unsqueeze(-1) * z.unsqueeze(3);
      s = s + kc.transpose(-1, -2).matmul(vc);
      z = z + kc.sum(3);
    }
    for (int64_t c = chunks - 1; c >= 0; --c) {  // reverse order: dk, dv
      const int64_t c0 = c * kCpuChunk, len = std::min(kCpuChunk, sh.n - c0);
      const Tensor qc = qf.narrow(3, c0, len), kc = kf.narrow(3, c0, len), vc = vv.narrow(3, c0, len);
      const Tensor at_ = kc.matmul(qc.transpose(-1, -2)).triu();               // [.., j, i]
      const Tensor dst = (vc.matmul(g[c].transpose(-1, -2)) + rr[c].unsqueeze(-2)).triu();
      const Tensor rs5 = rs.unsqueeze(2), rho5 = rho.unsqueeze(2);
      dv_parts[c] = at_.matmul(g[c]).sum(2, true) + kc.matmul(rs5);
      dk_parts[c] = dst.matmul(qc).sum(2, true) + vc.matmul(rs5.transpose(-1, -2)) + rho5.unsqueeze(3);
      rs = rs + qc.transpose(-1, -2).matmul(g[c]).sum(2);
      rho = rho + (qc * rr[c].unsqueeze(-1)).sum({2, 3});
    }
    // N = 0: no chunks; the empty slices keep the shapes.
    dqf = chunks ? at::cat(dq_parts, 3) : qf;
    dkf = chunks ? at::cat(dk_parts, 3) : kf;
    dv = chunks ? at::cat(dv_parts, 3) : vv;
  } else {
    s = s + kf.transpose(-1, -2).matmul(vv);
    z = z + kf.sum(3);
    const auto [g, rr] = row_grads(qf.matmul(s), (qf * z.unsqueeze(3)).sum(-1) + eps, go);
    dqf = g.matmul(s.transpose(-1, -2)) + rr.unsqueeze(-1) * z.unsqueeze(3);
    rs = rs + qf.transpose(-1, -2).matmul(g).sum(2);
    rho = rho + (qf * rr.unsqueeze(-1)).sum({2, 3});
    dv = kf.matmul(rs.unsqueeze(2));
    dkf = vv.matmul(rs.unsqueeze(2).transpose(-1, -2)) + rho.unsqueeze(2).unsqueeze(3);
  }
  Tensor dq = feature_grad(dqf, q32, phi.kind, scale, w).to(q.scalar_type());
  Tensor dk = feature_grad(dkf, k32, phi.kind, 1.0, w).to(k.scalar_type());
  Tensor dvo = dv.reshape({sh.b, sh.hkv, sh.n, sh.dv}).to(v.scalar_type());
  if (!state_grad) {
    return {dq, dk, dvo, std::nullopt, std::nullopt};
  }
  return {dq, dk, dvo, user_state_view(rs, sh, false), user_state_view(rho, sh, true)};
}

// ---- CUDA: the Triton kernels --------------------------------------------------------------------

constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxBlock = 2 * kMaxHeadDim;  // Cosformer's two parts (spec.py COSFORMER_BLOCK)
constexpr int64_t kFoldMaxBlock = 64;  // kernels.py FOLD_MAX_BLOCK

// The segment count G for nc chunks (of `quantum` rows) and `per_segment` programs per segment
// (tests/linear_attn_driver.py mirrors it). Every kernel that walks a segment first reads its fp32
// state (F x Dv), and the state pass writes one per segment for the scan: segments should be few and
// long, as long as the GPU stays busy. So G is the smaller of
//   - about `per_sm` programs per multiprocessor (4; for the bidirectional forward at 128 features
//     and more, 8 where its programs are small, with Dv tiles under 128 columns, and where they
//     hold 128, the one wave of two per multiprocessor that fits, rounded down: at B1 H16 N65536
//     D128, 17 segments (272 programs for 264 slots) took 0.484 ms; the Triton JIT took 0.328 ms
//     with 16 and 0.371 with 64, tenth session; at 256 features, one per multiprocessor: those
//     programs take 8 warps of 255 registers, so a second segment only adds a wave, and the scan);
//   - segments of at least `min_rows` rows (1024 causal; 8 per feature of the block bidirectional,
//     where the walk carries no state);
// but at least one wave of the walking kernels (`resident` programs per multiprocessor: two
// at 64 features, one above). H200 sweep over both knobs (benchmarks/results/linear_attn.md, eighth
// session): against the old rule (8 or 4 programs per SM, no minimum), causal B4 H16 N4096 D128 fwd
// 0.390 -> 0.306 ms, fwd+bwd at N2048 D128 1.19 -> 0.90 ms, N4096 1.93 -> 1.66 ms, B1 H16 N65536
// D128 fwd 1.16 -> 1.10 ms, bidirectional B4 H16 N4096 D128 0.153 -> 0.136 ms.
int64_t segment_count(int64_t nc, int64_t quantum, int64_t per_segment, int64_t block, int64_t dv_tile,
                      bool causal, int64_t sms) {
  const bool wide = !causal && block > 64 && dv_tile >= 128;
  const int64_t per_sm = causal || block <= 64 ? 4 : wide ? (block >= 256 ? 1 : 2) : 8;
  const int64_t min_rows = causal ? 1024 : 8 * block;
  const int64_t resident = block <= 64 ? 2 : 1;
  const int64_t by_programs =
      wide ? std::max<int64_t>(1, per_sm * sms / per_segment) : ceil_div(per_sm * sms, per_segment);
  const int64_t by_rows = ceil_div(nc, ceil_div(min_rows, quantum));
  const int64_t one_wave = std::max<int64_t>(1, resident * sms / per_segment);
  return std::min({nc, by_programs, std::max(by_rows, one_wave)});
}

// The causal state pass's sub-segments per walked segment (R, tests/linear_attn_driver.py mirrors
// it). The state pass runs a program per segment (and head, and Dv tile), each streaming its segment
// chunk after chunk: where segments are few and long, too few programs keep too few loads in flight.
// So it splits each segment in two (R = 2; sub-segments of whole chunks and at least kMinStateRows
// rows) where its `programs` per sub-segment still fit `per_sm` per multiprocessor (4 at 64
// features, 2 above, where a program holds a 128-wide state) and, where the sums are `scanned`, the
// scan still takes all G * R in one step of its loop (`scan_step`, la_scan_kernel's GB: each step
// more cost it 1.7 us at B4 H16 N4096 D64, 5.7 at N2048 D128). The walks keep their segments: they
// read every R-th scanned state, or fold R sums per segment before theirs (_segment_state, has_s =
// 1 + R). H200 (Triton JIT, the state pass alone, bf16, forward / backward mode, us): B4 H16 N4096
// D64 R 1 -> 2: 26.7 -> 23.7 / 35.0 -> 27.1; N2048 D128 (G 2): 42.9 -> 22.7 / 41.5 -> 26.8; N4096
// D128 (G 4), which this rule leaves at 1: 45.6 -> 49.2 / 54.7 -> 59.7. The kernels take any R, but
// R = 4 (B4 H16 N2048 D128, no scan limit) failed one GPU test, not understood (results/
// linear_attn.md, twenty-first session), so R is 1 or 2.
constexpr int64_t kMinStateRows = 256;

int64_t state_split(int64_t g, int64_t chunks, int64_t quantum, int64_t programs, int64_t block, bool causal,
                    int64_t sms, bool scanned, int64_t scan_step) {
  const int64_t slots = (block <= 64 ? 4 : 2) * sms;
  const bool split = causal && g >= 2 && chunks % 2 == 0 && chunks / 2 * quantum >= kMinStateRows &&
                     2 * (g - 1) * programs <= slots && (!scanned || 2 * g <= scan_step);
  return split ? 2 : 1;
}

// Causal calls this short (a decode step: N = 1) take la_decode_kernel, whose program serves all
// the query heads of a kv head and reads the state once (tests/linear_attn_driver.py mirrors it).
constexpr int64_t kDecodeMaxRows = 4;

int64_t pad16(int64_t x) {
  return (x + 15) / 16 * 16;
}

// The kernels' FEAT key (spec.py FEATURES): the feature map compiled in where there is one part,
// else 0, the variant that reads phi and the part count at run time (Cosformer).
int64_t feature_key(const Phi& phi, int64_t parts) {
  return parts == 1 ? phi.kind + 1 : 0;
}

// The smallest feature block built for `dtype` tensors (spec.py BLOCKS) that holds `width` columns.
int64_t block_for(at::ScalarType dtype, int64_t width) {
  for (int64_t b = 16; b <= kMaxBlock; b *= 2) {
    if (b >= width && aot::la_state_built({dtype, b, 0, 0})) return b;
  }
  TORCH_CHECK_VALUE(false, "neuralops.linear_attn: this build has no kernel block that holds ", width,
                    " features of ", dtype, " tensors (spec.py BLOCKS and COSFORMER_BLOCK_DTYPES); use "
                    "linear_attn_pytorch_fallback");
}

bool kernel_ready(const Tensor& t) {
  if (t.size(3) % 16 != 0 || (t.size(3) > 1 && t.stride(3) != 1)) return false;
  if (!runtime::aligned16(t.const_data_ptr())) return false;
  for (int64_t i = 0; i < 3; ++i) {
    if (kernel_stride(t, i) % 16 != 0) return false;
  }
  return true;
}

// Whether every row offset within a head of t, (N - 1) * stride + width, fits in 31 bits: the
// Gluon reverse walks at 128 features copy their rows in 32-bit offsets (bwd_wgmma.py
// _reverse_walk), so the Gluon backward runs only where this holds for q, k, v and grad_out (the
// Triton kernels take the call elsewhere).
bool rows_fit_int32(const Tensor& t) {
  return (t.size(2) - 1) * kernel_stride(t, 2) + t.size(3) < (int64_t{1} << 31);
}

// t as the kernels need it: last dimension `width` (a multiple of 16), 16-divisible pointer and
// strides; a copy (padded with `fill`) only when t is not already so.
Tensor kernel_input(const Tensor& t, int64_t width, double fill) {
  if (t.size(3) == width && kernel_ready(t)) return t;
  Tensor out = at::full({t.size(0), t.size(1), t.size(2), width}, fill, t.options());
  out.narrow(3, 0, t.size(3)).copy_(t);
  return out;
}

Tensor kernel_output(int64_t b, int64_t h, int64_t n, int64_t width, const Tensor& like) {
  return at::empty({b, h, n, width}, like.options());
}

Tensor unpad(const Tensor& t, int64_t width) {
  return t.size(3) == width ? t : t.narrow(3, 0, width).contiguous();
}

struct Weights {
  Tensor cos, sin;  // fp32, [N] or [B, N], contiguous; undefined without Cosformer
  int64_t stride_b = 0;
  const void* c() const { return cos.defined() ? cos.const_data_ptr() : nullptr; }
  const void* s() const { return sin.defined() ? sin.const_data_ptr() : nullptr; }
};

Weights kernel_weights(const OptTensor& cos, const OptTensor& sin, int64_t n) {
  Weights w;
  if (!cos.has_value()) return w;
  w.cos = cos->to(at::kFloat).contiguous();
  w.sin = sin->to(at::kFloat).contiguous();
  w.stride_b = (cos->dim() == 2 && cos->size(0) > 1) ? n : 0;
  TORCH_CHECK_VALUE(w.stride_b == ((sin->dim() == 2 && sin->size(0) > 1) ? n : 0),
                    "neuralops.linear_attn: cos_weight and sin_weight must have one shape, got ", cos->sizes(),
                    " and ", sin->sizes());
  return w;
}

// The choices csrc and tests/linear_attn_driver.py share: padded sizes, blocks, tiles, segments.
struct Plan {
  Shape sh;
  Phi phi;
  bool causal;
  at::ScalarType dtype;
  int64_t dp, dvp, bk;
  int64_t feat;  // the kernels' compiled-in feature map (feature_key)
  // Tiles of the state pass (Dv tiles x feature tiles), Dv tiles of the forward (and stats) and the dv pass
  int64_t nt_state, nt, nt_dv;
  int64_t g, l, f, fd, e, ep;
  // The state passes' splits (state_split): g * r sub-segments of l / r rows for the forward
  // states, g * r_rev for the backward's reverse states.
  int64_t r, r_rev;
  bool fold_fwd, fold_bwd;  // la_fwd, and also la_bwd_dq, built to fold the scan (fold_scan)
  // Bidirectional: the state pass's programs fill the GPU with one segment each (whole_state_pass).
  bool whole_state;
  // la_fwd_kernel and la_bwd_dv_kernel walk one Cosformer part per launch (spec.py walks_by_part;
  // part_walks).
  bool split_fwd, split_dv;
  Tensor q, k, v;  // kernel-ready inputs
  Weights w;
};

bool fold_scan(const Plan& p, bool has_initial_state, bool returns_total, bool backward);

// The plan's sizes, blocks, tiles and segments, from shapes alone (linear_attn_states_shape needs
// them without tensors).
Plan plan_layout(const Shape& sh, Phi phi, bool causal, at::ScalarType dtype, int device) {
  Plan p{};
  p.sh = sh;
  p.phi = phi;
  p.causal = causal;
  TORCH_CHECK_VALUE(sh.d <= kMaxHeadDim && sh.dv <= kMaxHeadDim,
                    "neuralops.linear_attn: the CUDA kernels take D and Dv up to ", kMaxHeadDim, ", got D=", sh.d,
                    ", Dv=", sh.dv, "; use linear_attn_pytorch_fallback");
  p.dtype = dtype;
  p.dp = pad16(sh.d);
  p.dvp = pad16(sh.dv);
  p.bk = block_for(p.dtype, sh.parts * p.dp);
  p.feat = feature_key(phi, sh.parts);
  // Each Dv-tiled kernel has its own tiles (spec.py STATE_TILES, FWD_TILES, TILES), as compiled for
  // this device's architecture (ARCH_TILES).
  const auto c_state = aot::la_state_constexprs({p.dtype, p.bk, 0, p.feat}, device);
  const auto c_fwd = aot::la_fwd_constexprs({p.dtype, p.bk, causal, p.feat}, device);
  const auto c_dv = aot::la_bwd_dv_constexprs({p.dtype, p.bk, causal, p.feat}, device);
  p.nt_state = ceil_div(p.dvp, c_state.BT) * ceil_div(sh.parts * p.dp, c_state.BF);
  p.nt = ceil_div(p.dvp, c_fwd.BT);
  p.split_fwd = c_fwd.SPLIT != 0;
  p.split_dv = c_dv.SPLIT != 0;
  p.nt_dv = ceil_div(p.dvp, c_dv.BT);
  // A segment must hold whole chunks of every kernel that walks it, and the backward's dq and dk
  // kernels chunk by their own tile (C of VALUE_TILES), which can exceed the forward's: a segment
  // of 32 rows walked in chunks of 64 summed the next segment's rows into its reverse state.
  const int64_t bkv = block_for(p.dtype, p.dvp);
  const auto c_dq = aot::la_bwd_dq_constexprs({p.dtype, bkv, causal, p.feat, 0}, device);
  const int64_t c_value = c_dq.C;
  p.fold_fwd = p.bk <= kFoldMaxBlock && c_fwd.BT <= kFoldMaxBlock;
  p.fold_bwd = p.fold_fwd && c_dq.BF <= kFoldMaxBlock && bkv <= kFoldMaxBlock;
  const aot::LaFwdWgmmaKey wgmma_key{p.dtype, p.bk, causal, p.feat, 0};
  // The Gluon walks' chunks count where they run on this device (sm_90).
  const int64_t c_wgmma =
      aot::la_fwd_wgmma_runs_on(wgmma_key, device) ? aot::la_fwd_wgmma_constexprs(wgmma_key, device).C : 1;
  // Every map builds Gluon's dq with the stats (spec.py _wgmma_dq_built), which has its plain variant's C.
  const aot::LaBwdDqWgmmaKey dq_wgmma_key{p.dtype, bkv, causal, p.feat, 1};
  const int64_t c_dq_wgmma = aot::la_bwd_dq_wgmma_runs_on(dq_wgmma_key, device)
                                 ? aot::la_bwd_dq_wgmma_constexprs(dq_wgmma_key, device).C
                                 : 1;
  const int64_t quantum = std::max({c_state.C, c_fwd.C, c_dv.C, c_value, c_wgmma, c_dq_wgmma});
  const int64_t nc = ceil_div(sh.n, quantum);  // N >= 1: the callers return early on empty inputs
  const int64_t per_segment = std::max<int64_t>(1, p.nt * sh.h * sh.b);
  const int64_t sms = runtime::multiprocessor_count(device);
  const int64_t g = segment_count(nc, quantum, per_segment, p.bk, c_fwd.BT, causal, sms);
  const int64_t chunks = ceil_div(nc, g);
  p.g = ceil_div(nc, chunks);
  p.l = chunks * quantum;
  // The forward's walks fold the sums where they can (fold_scan, for calls without an initial
  // state); the backward's dk and dv always read scanned reverse states.
  const int64_t scan_step = aot::la_scan_constexprs({at::kFloat}, device).GB;
  p.r = state_split(p.g, chunks, quantum, p.nt_state * sh.b * sh.hkv, p.bk, causal, sms,
                    !fold_scan(p, false, false, false), scan_step);
  p.r_rev = state_split(p.g, chunks, quantum, p.nt_state * sh.b * sh.h, p.bk, causal, sms, true, scan_step);
  p.whole_state = !causal && p.g > 1 && p.nt_state * sh.b * sh.hkv >= sms;
  p.f = sh.f();
  p.fd = p.f * sh.dv;
  p.e = p.fd + p.f;
  p.ep = pad16(p.e);
  return p;
}

Plan make_plan(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos, const OptTensor& sin,
               const Shape& sh, Phi phi, bool causal) {
  check_kernel_dtype(q, "linear_attn", "q");
  Plan p = plan_layout(sh, phi, causal, q.scalar_type(), q.get_device());
  // Padding columns must have zero features: phi(0) = 0, except elu+1 where exp(-inf) = 0.
  const double fill = phi.kind == 1 ? -std::numeric_limits<double>::infinity() : 0.0;
  p.q = kernel_input(q, p.dp, fill);
  p.k = kernel_input(k, p.dp, fill);
  p.v = kernel_input(v, p.dvp, 0.0);
  p.w = kernel_weights(cos, sin, sh.n);
  return p;
}

// Run-time arguments every feature kernel shares, in kernel order after the pointers.
struct Segments {
  const void* s = nullptr;
  const void* z = nullptr;
  int64_t s_bh = 0, s_g = 0, z_bh = 0, z_g = 0, has = 0;
};

// The kernels of one call run back to back. Each after the first is launched as a programmatic
// dependent of the one before: its launch overlaps that kernel's last programs, and it waits for
// that kernel's results first thing (wait_for_primary, triton_src/common/grid_dependency.py).
class Launches {
 public:
  runtime::LaunchConfig operator()(const Tensor& t, int64_t programs, const char* what) {
    runtime::LaunchConfig c = launch_config(t, programs, 1, 1, what);
    c.programmatic_dependency = started_;
    started_ = true;
    return c;
  }

 private:
  bool started_ = false;
};

int64_t st(const Tensor& t, int64_t dim) {
  return kernel_stride(t, dim);
}

// la_scan_kernel over x [bh * n_grp, g, ep] (g segments of e elements, the first fd of them S's)
// into y, bh * cdiv(e, BE) programs.
void launch_scan(const Tensor& x, const Tensor& y, int64_t bh, int64_t g, int64_t fd, int64_t e, int64_t ep,
                 int64_t sy_bh, int64_t n_grp, int64_t mode, int64_t n_far, const OptTensor& init_s,
                 const OptTensor& init_z, const Tensor* tot_s, const Tensor* tot_z, Launches& config,
                 const char* what) {
  const int64_t scan_block = aot::la_scan_constexprs({at::kFloat}, x.get_device()).BE;
  aot::la_scan({at::kFloat}, config(x, ceil_div(e, scan_block) * bh, what), x.const_data_ptr(), y.mutable_data_ptr(),
               init_s ? init_s->const_data_ptr() : nullptr, init_z ? init_z->const_data_ptr() : nullptr,
               tot_s ? tot_s->mutable_data_ptr() : nullptr, tot_z ? tot_z->mutable_data_ptr() : nullptr, g, fd, e,
               n_grp, mode, init_s.has_value(), tot_s != nullptr, n_far, 1, ep, sy_bh);
}

// Segment scan over x [B, HY * n_grp, G * R, EP] (see la_scan_kernel): a state pass's sub-segments
// (R: the forward's p.r or the reverse p.r_rev), of which it leaves the R at the far end unwritten
// where no total is asked for.
void scan(const Plan& p, const Tensor& x, const Tensor& y, int64_t r, int64_t n_grp, int64_t mode,
          const OptTensor& init_s, const OptTensor& init_z, const Tensor* tot_s, const Tensor* tot_z,
          Launches& config) {
  launch_scan(x, y, p.sh.b * p.sh.hkv, p.g * r, p.fd, p.e, p.ep, y.size(2) * p.ep, n_grp, mode, r, init_s, init_z,
              tot_s, tot_z, config, "linear_attn scan");
}

// dout_i . out_i from the stats pass's shares per Dv tile, dl [B, H, NT, N] -> [B, H, N]: the scan's
// total over NT "segments" of N elements, so the backward's kernels read one value per row (a loop
// over the shares in their chunk loops kept Triton from software-pipelining those).
Tensor sum_tile_shares(const Tensor& dl, Launches& config) {
  const int64_t n = dl.size(3);
  Tensor total = at::empty({dl.size(0), dl.size(1), n}, dl.options());
  launch_scan(dl, total, dl.size(0) * dl.size(1), dl.size(2), n, n, n, n, 1, 2, 0, std::nullopt, std::nullopt,
              nullptr, nullptr, config, "linear_attn_bwd dl");
  return total;
}

// Calls with a few segments and no initial state skip the scan: each kernel that walks a segment
// sums the segment sums before it (all of them, bidirectionally) as it starts (has_s = 1 + R, see
// _segment_state in kernels.py). That saves the scan's launch and its pass over the sums, for at
// most R * (kFoldMaxSegments - 1) - 1 extra states read per program (tests/linear_attn_driver.py
// mirrors it).
// A bidirectional call that returns its state still takes the scan, which writes the total. Only
// variants whose state tile is at most kFoldMaxBlock square are built to fold (kernels.py
// FOLD_MAX_BLOCK): H200, against the scan (ninth session): causal fwd B4 H16 N4096 D64 0.0956 ->
// 0.0918 ms, fwd+bwd 0.462 -> 0.450 ms; built into the 128-feature kernels it cost them 3-5%.
constexpr int64_t kFoldMaxSegments = 4;

bool fold_scan(const Plan& p, bool has_initial_state, bool returns_total, bool backward) {
  return p.g > 1 && p.g <= kFoldMaxSegments && (backward ? p.fold_bwd : p.fold_fwd) && !has_initial_state &&
         (p.causal || !returns_total);
}

// linear_attn_fwd_train's forward states, kept for linear_attn_bwd, are folded (the sums) where
// the backward's kernels fold too; else scanned (the states before each segment, or the total).
// A bidirectional forward that returns its state scans (it writes the total), so bidirectional
// buffers are always scanned: the backward cannot tell whether its forward returned the state.
bool saved_fold(const Plan& p, bool has_initial_state) {
  return p.causal && fold_scan(p, has_initial_state, false, true);
}

// The kernels' view of a state buffer [B, Hkv, G * R, EP]: sums (folded: R per segment) or
// scanned states (segment g starts from sub-segment R * g's).
Segments buffer_segments(const Plan& p, const Tensor& buffer, bool fold) {
  const float* base = buffer.const_data_ptr<float>();
  const int64_t seg_g = fold ? p.ep : p.causal ? p.r * p.ep : 0;
  const int64_t seg_bh = p.g * p.r * p.ep;
  return {base, base + p.fd, seg_bh, seg_g, seg_bh, seg_g, fold ? 1 + p.r : 1};
}

// Whether a bidirectional forward's state pass sums all rows in one segment (Plan::whole_state:
// its programs, Dv x feature tiles x B x Hkv, fill the multiprocessors without segments) while the
// walks keep their G segments. Not with an initial state or a returned total, which the scan adds
// and writes, nor where the walks fold the segment sums themselves. H100, B4 H16 N4096 D256 with
// sm_90's Dv tile of 256 (G = 2; results/linear_attn.md, forty-first session): see spec.py.
bool whole_state_pass(const Plan& p, bool has_initial_state, bool returns_total, bool fold) {
  return p.whole_state && !has_initial_state && !returns_total && !fold;
}

// The state before each segment (causal) or the total (bidirectional); the initial state itself
// when one causal segment needs no scan; the segment sums themselves under `fold` (fold_scan).
// `buffer` keeps the state pass's and the scan's output alive.
Segments forward_states(const Plan& p, const OptTensor& s0, const OptTensor& z0, const Tensor* tot_s,
                        const Tensor* tot_z, bool fold, Tensor& buffer, Launches& config) {
  Segments seg;
  if (p.causal && p.g == 1) {
    if (s0) {
      seg = {s0->const_data_ptr(), z0->const_data_ptr(), p.fd, 0, p.f, 0, 1};
    }
    return seg;
  }
  const Shape& sh = p.sh;
  // Bidirectional walks read the total alone (segment stride 0). Where the state pass's programs
  // fill the GPU with one segment each, its first segment spans all rows and writes the total
  // itself: no scan, and no partial sums, for the walks' G segments (whole_state_pass).
  const bool whole = whole_state_pass(p, s0.has_value(), tot_s != nullptr, fold);
  // No causal walk reads the last segment's sums; only the scan's total does (the folded walks
  // write the final state themselves): a quarter of the pass at four segments.
  const int64_t n_walk = whole ? 1 : p.r * (p.causal && (fold || tot_s == nullptr) ? p.g - 1 : p.g);
  buffer = at::empty({sh.b, sh.hkv, p.g * p.r, p.ep}, p.q.options().dtype(at::kFloat));
  aot::la_state({p.dtype, p.bk, 0, p.feat}, config(p.q, p.nt_state * n_walk * sh.b * sh.hkv, "linear_attn state"),
                p.k.const_data_ptr(), p.v.const_data_ptr(), p.w.c(), p.w.s(), buffer.mutable_data_ptr(), nullptr,
                nullptr, sh.hkv, sh.n, p.dp, p.dvp, sh.d, sh.dv, p.g * p.r, whole ? p.g * p.l : p.l / p.r, 0, n_walk,
                p.phi.kind, sh.parts, 0, 1.0f, st(p.k, 0), st(p.k, 1), st(p.k, 2), st(p.v, 0), st(p.v, 1), st(p.v, 2),
                p.w.stride_b, p.ep);
  // One bidirectional segment's sum is already the total, which the scan would copy onto itself.
  const bool is_total = whole || (!p.causal && p.g * p.r == 1 && tot_s == nullptr);
  if (!fold && !is_total) {
    scan(p, buffer, buffer, p.r, 1, p.causal ? 0 : 2, s0, z0, tot_s, tot_z, config);
  }
  return buffer_segments(p, buffer, fold);
}

// The shape of linear_attn_fwd_train's saved states: [B, Hkv, G * R, EP] where the forward's states
// pass through forward_states' buffer, else [0]: causal calls of one segment read the initial state
// itself, and those the decode kernel takes hold their states in registers.
std::vector<int64_t> saved_states_shape(const Plan& p) {
  if (p.causal && (p.g == 1 || p.sh.n <= kDecodeMaxRows)) return {0};
  return {p.sh.b, p.sh.hkv, p.g * p.r, p.ep};
}

void check_saved_states(const OptTensor& saved, at::IntArrayRef want, const Tensor& q) {
  if (!saved) return;
  TORCH_CHECK_VALUE(saved->sizes() == want && saved->scalar_type() == at::kFloat && saved->device() == q.device() &&
                        saved->is_contiguous(),
                    "neuralops.linear_attn: fwd_states must be the fourth output of linear_attn_fwd_train for these "
                    "inputs and options: a contiguous float32 tensor of shape ",
                    want, " on ", q.device(), ", got ", saved->scalar_type(), " of shape ", saved->sizes(), " on ",
                    saved->device());
}

std::vector<int64_t> state_shape(const Shape& sh, bool is_z) {
  std::vector<int64_t> s{sh.b, sh.hkv};
  if (sh.parts == 2) s.push_back(2);
  s.push_back(sh.d);
  if (!is_z) s.push_back(sh.dv);
  return s;
}

// One launch of a walk that SPLIT variants make by Cosformer part: the part it walks and the fp32
// sums part 0 leaves part 1 (unused by the other variants).
struct PartWalk {
  int64_t part = 0;
  void* acc = nullptr;
  void* accd = nullptr;
};

// A walk of la_fwd_kernel (the forward, or the backward's stats pass; den: with a denominator) or
// la_bwd_dv_kernel, as `walk(PartWalk)`: one launch, or where the variant splits it (`split`, spec.py
// walks_by_part) part 0 then part 1, which adds part 0's sums ([B * heads, N, Dv] and [B * heads, N]
// fp32: the outputs' rows, and their denominators) to its own.
template <typename Walk>
void part_walks(const Plan& p, bool split, int64_t heads, bool den, const Tensor& like, const Walk& walk) {
  if (!split) {
    walk(PartWalk{});
    return;
  }
  const auto f32 = like.options().dtype(at::kFloat);
  Tensor acc = at::empty({p.sh.b * heads, p.sh.n, p.dvp}, f32);
  Tensor accd = den ? at::empty({p.sh.b * heads, p.sh.n}, f32) : Tensor();
  for (int64_t part = 0; part < 2; ++part) {
    walk(PartWalk{part, acc.mutable_data_ptr(), den ? accd.mutable_data_ptr() : nullptr});
  }
}

// `saved`, where given, receives the forward states for linear_attn_bwd (saved_states_shape): the
// state buffer, or [0] where the call has none.
FwdResult fwd_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos, const OptTensor& sin,
                   const OptTensor& s0_in, const OptTensor& z0_in, const Shape& sh, Phi phi, bool causal, double eps,
                   double scale, bool return_state, Tensor* saved) {
  c10::DeviceGuard guard(q.device());
  const auto f32 = q.options().dtype(at::kFloat);
  if (saved) {
    *saved = at::empty({0}, f32);
  }
  OptTensor sf, zf;  // the final state, when asked for
  if (return_state) {
    sf = at::empty(state_shape(sh, false), f32);
    zf = at::empty(state_shape(sh, true), f32);
  }
  if (sh.b * sh.h * sh.n == 0) {
    if (return_state) {
      s0_in ? sf->copy_(*s0_in) : sf->zero_();
      z0_in ? zf->copy_(*z0_in) : zf->zero_();
    }
    return {at::empty({sh.b, sh.h, sh.n, sh.dv}, q.options()), sf, zf};
  }
  const OptTensor s0 = s0_in ? OptTensor(s0_in->contiguous()) : std::nullopt;
  const OptTensor z0 = z0_in ? OptTensor(z0_in->contiguous()) : std::nullopt;
  const Plan p = make_plan(q, k, v, cos, sin, sh, phi, causal);
  Launches config;
  if (causal && sh.n <= kDecodeMaxRows) {
    Tensor out = kernel_output(sh.b, sh.h, sh.n, p.dvp, q);
    const int64_t bt = aot::la_decode_constexprs({p.dtype, p.bk}, q.get_device()).BT;
    aot::la_decode({p.dtype, p.bk}, config(q, ceil_div(p.dvp, bt) * sh.b * sh.hkv, "linear_attn decode"),
                   p.q.const_data_ptr(), p.k.const_data_ptr(), p.v.const_data_ptr(), out.mutable_data_ptr(), p.w.c(),
                   p.w.s(), s0 ? s0->const_data_ptr() : nullptr, z0 ? z0->const_data_ptr() : nullptr,
                   sf ? sf->mutable_data_ptr() : nullptr, zf ? zf->mutable_data_ptr() : nullptr, sh.h,
                   sh.hkv, sh.n, p.dp, p.dvp, sh.d, sh.dv, phi.kind, phi.normalize, sh.parts, s0.has_value(),
                   return_state, static_cast<float>(scale), static_cast<float>(eps), st(p.q, 0), st(p.q, 1), st(p.q, 2),
                   st(p.k, 0), st(p.k, 1), st(p.k, 2), st(p.v, 0), st(p.v, 1), st(p.v, 2), st(out, 0), st(out, 1),
                   st(out, 2), p.w.stride_b, p.fd, p.f);
    return {unpad(out, sh.dv), sf, zf};
  }
  Tensor buffer;
  const bool fold = saved ? saved_fold(p, s0.has_value()) : fold_scan(p, s0.has_value(), return_state, false);
  const Segments seg = forward_states(p, s0, z0, sf ? &*sf : nullptr, zf ? &*zf : nullptr, fold, buffer, config);
  // With no scan to total them (one segment, or the scan folded in), the last causal walk ends with
  // the final state and writes it.
  const bool final_from_walk = causal && (p.g == 1 || seg.has >= 2);
  Tensor out = kernel_output(sh.b, sh.h, sh.n, p.dvp, q);
  // Both forward kernels take the same arguments and grid; la_fwd_wgmma where it is built for this
  // device (spec.py WGMMA_FWD_TILES and WGMMA_BIDIR_FWD_TILES: bf16 with one feature part, sm_90).
  const auto forward = [&](auto launch, const auto& key, const PartWalk& w) {
    launch(key, config(q, p.nt * sh.h * p.g * sh.b, "linear_attn_fwd"), p.q.const_data_ptr(), p.k.const_data_ptr(),
           p.v.const_data_ptr(), out.mutable_data_ptr(), p.w.c(), p.w.s(), seg.s, seg.z,
           sf ? sf->mutable_data_ptr() : nullptr, zf ? zf->mutable_data_ptr() : nullptr, nullptr, nullptr, w.acc,
           w.accd, sh.h, sh.hkv, sh.n, p.dp, p.dvp, sh.d, sh.dv, p.g, p.l, phi.kind, phi.normalize, sh.parts,
           seg.has, return_state && final_from_walk, 0, w.part, static_cast<float>(scale), static_cast<float>(eps),
           st(p.q, 0), st(p.q, 1), st(p.q, 2), st(p.k, 0), st(p.k, 1), st(p.k, 2), st(p.v, 0), st(p.v, 1),
           st(p.v, 2), st(out, 0), st(out, 1), st(out, 2), p.w.stride_b, seg.s_bh, seg.s_g, seg.z_bh, seg.z_g);
  };
  const aot::LaFwdWgmmaKey wgmma_key{p.dtype, p.bk, causal, p.feat, 0};
  if (aot::la_fwd_wgmma_runs_on(wgmma_key, q.get_device())) {
    forward(aot::la_fwd_wgmma, wgmma_key, PartWalk{});
  } else {
    part_walks(p, p.split_fwd, sh.h, true, q, [&](const PartWalk& w) {
      forward(aot::la_fwd, aot::LaFwdKey{p.dtype, p.bk, causal, p.feat}, w);
    });
  }
  if (saved && buffer.defined()) {
    // What no kernel wrote, and none reads, is zeroed so the output is defined everywhere (opcheck
    // compares it across runs): each state's padding and, folded, the last causal segment's sums.
    // After the forward's launch, so the kernels' programmatic chain stays unbroken.
    if (p.ep > p.e) buffer.narrow(3, p.e, p.ep - p.e).zero_();
    if (causal && seg.has >= 2) buffer.narrow(2, p.r * (p.g - 1), p.r).zero_();
    if (whole_state_pass(p, s0.has_value(), sf.has_value(), fold)) buffer.narrow(2, 1, p.g * p.r - 1).zero_();
    *saved = buffer;
  }
  return {unpad(out, sh.dv), sf, zf};
}

BwdResult bwd_cuda(
    const Tensor& dout_in, const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos,
    const OptTensor& sin, const OptTensor& s0_in, const OptTensor& z0_in, const OptTensor& dsf_in,
    const OptTensor& dzf_in, const OptTensor& saved, const Shape& sh, Phi phi, bool causal, double eps, double scale,
    bool state_grad) {
  c10::DeviceGuard guard(q.device());
  const auto f32 = q.options().dtype(at::kFloat);
  OptTensor ds0, dz0;  // the initial state's gradients, when asked for
  if (state_grad) {
    ds0 = at::empty(state_shape(sh, false), f32);
    dz0 = at::empty(state_shape(sh, true), f32);
  }
  if (sh.b * sh.h * sh.n == 0) {
    if (state_grad) {
      dsf_in ? ds0->copy_(*dsf_in) : ds0->zero_();
      dzf_in ? dz0->copy_(*dzf_in) : dz0->zero_();
    }
    return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), ds0, dz0};
  }
  auto contig = [](const OptTensor& t) { return t ? OptTensor(t->contiguous()) : std::nullopt; };
  const OptTensor s0 = contig(s0_in), z0 = contig(z0_in), dsf = contig(dsf_in), dzf = contig(dzf_in);
  const Plan p = make_plan(q, k, v, cos, sin, sh, phi, causal);
  const Tensor dout = kernel_input(dout_in, p.dvp, 0.0);
  Launches config;
  check_saved_states(saved, saved_states_shape(p), q);
  Tensor fwd_buffer;
  const Segments seg = saved && saved->numel() > 0
                           ? buffer_segments(p, *saved, saved_fold(p, s0.has_value()))
                           : forward_states(p, s0, z0, nullptr, nullptr, fold_scan(p, s0.has_value(), false, true),
                                            fwd_buffer, config);
  const int64_t bkv = block_for(p.dtype, p.dvp);
  const int64_t bf = aot::la_bwd_dq_constexprs({p.dtype, bkv, causal, p.feat, 0}, q.get_device()).BF;
  const int64_t nf = ceil_div(p.dp, bf / sh.parts);
  // la_bwd_dq_wgmma (one program for all of F and Dv, spec.py WGMMA_BWD_TILES) where it is built for
  // this device and D and Dv take the same block, else the Triton kernel over feature tiles. Where
  // one dq program holds all of F (and all of Dv) and its variant is built (STATS: spec.py
  // _wgmma_dq_built for Gluon's, dq_stats_built for Triton's), it computes its rows' den and dout . out
  // itself instead of a stats pass that reads q, k, v and dout a second time.
  const aot::LaBwdDqWgmmaKey dq_wgmma_key{
      p.dtype, bkv, causal, p.feat, phi.normalize && aot::la_bwd_dq_wgmma_built({p.dtype, bkv, causal, p.feat, 1})};
  // The Gluon backward runs whole or not at all: its dv and dk need rows_fit_int32.
  const bool gluon_rows = rows_fit_int32(p.q) && rows_fit_int32(p.k) && rows_fit_int32(p.v) && rows_fit_int32(dout);
  const bool wgmma_dq = gluon_rows && p.bk == bkv && aot::la_bwd_dq_wgmma_runs_on(dq_wgmma_key, q.get_device());
  const aot::LaBwdDqKey dq_key{
      p.dtype, bkv, causal, p.feat,
      !wgmma_dq && phi.normalize && nf == 1 && aot::la_bwd_dq_built({p.dtype, bkv, causal, p.feat, 1})};
  const bool stats_in_dq = wgmma_dq ? dq_wgmma_key.STATS != 0 : dq_key.STATS != 0;
  Tensor den, dl;
  if (phi.normalize) {
    den = at::empty({sh.b, sh.h, sh.n}, f32);
    dl = at::empty({sh.b, sh.h, stats_in_dq ? 1 : p.nt, sh.n}, f32);
  }
  if (phi.normalize && !stats_in_dq) {
    // The forward's walk with stats = 1, in either forward kernel (as in fwd_cuda).
    const auto stats = [&](auto launch, const auto& key, const PartWalk& w) {
      launch(key, config(q, p.nt * sh.h * p.g * sh.b, "linear_attn_bwd stats"), p.q.const_data_ptr(),
             p.k.const_data_ptr(), p.v.const_data_ptr(), dout.const_data_ptr(), p.w.c(), p.w.s(), seg.s, seg.z,
             nullptr, nullptr, den.mutable_data_ptr(), dl.mutable_data_ptr(), w.acc, w.accd, sh.h, sh.hkv, sh.n,
             p.dp, p.dvp, sh.d, sh.dv, p.g, p.l, phi.kind, phi.normalize, sh.parts, seg.has, 0, 1, w.part,
             static_cast<float>(scale), static_cast<float>(eps), st(p.q, 0), st(p.q, 1), st(p.q, 2), st(p.k, 0),
             st(p.k, 1), st(p.k, 2), st(p.v, 0), st(p.v, 1), st(p.v, 2), st(dout, 0), st(dout, 1), st(dout, 2),
             p.w.stride_b, seg.s_bh, seg.s_g, seg.z_bh, seg.z_g);
    };
    const aot::LaFwdWgmmaKey stats_key{p.dtype, p.bk, causal, p.feat, 1};
    if (aot::la_fwd_wgmma_runs_on(stats_key, q.get_device())) {
      stats(aot::la_fwd_wgmma, stats_key, PartWalk{});
    } else {
      part_walks(p, p.split_fwd, sh.h, true, q, [&](const PartWalk& w) {
        stats(aot::la_fwd, aot::LaFwdKey{p.dtype, p.bk, causal, p.feat}, w);
      });
    }
    if (p.nt > 1) {
      dl = sum_tile_shares(dl, config);
    }
  }
  // Read by the kernels below; written by dq itself under STATS.
  void* den_ptr = phi.normalize ? den.mutable_data_ptr() : nullptr;
  void* dl_ptr = phi.normalize ? dl.mutable_data_ptr() : nullptr;
  Tensor dq = kernel_output(sh.b, sh.h, sh.n, p.dp, q);
  // Both dq kernels take the same arguments.
  const auto dq_walk = [&](auto launch, const auto& key, int64_t n_tiles) {
    launch(key, config(q, n_tiles * sh.h * p.g * sh.b, "linear_attn_bwd dq"), p.q.const_data_ptr(),
           p.k.const_data_ptr(), p.v.const_data_ptr(), dout.const_data_ptr(), dq.mutable_data_ptr(), p.w.c(), p.w.s(),
           seg.s, seg.z, den_ptr, dl_ptr, sh.h, sh.hkv, sh.n, p.dp, p.dvp, sh.d, sh.dv, p.g, p.l, phi.kind,
           phi.normalize, sh.parts, seg.has, static_cast<float>(scale), static_cast<float>(eps), st(p.q, 0),
           st(p.q, 1), st(p.q, 2), st(p.k, 0), st(p.k, 1), st(p.k, 2), st(p.v, 0), st(p.v, 1), st(p.v, 2),
           st(dout, 0), st(dout, 1), st(dout, 2), st(dq, 0), st(dq, 1), st(dq, 2), p.w.stride_b, seg.s_bh, seg.s_g,
           seg.z_bh, seg.z_g);
  };
  if (wgmma_dq) {
    dq_walk(aot::la_bwd_dq_wgmma, dq_wgmma_key, 1);
  } else {
    dq_walk(aot::la_bwd_dq, dq_key, nf);
  }
  // The reverse states: R (sum of qf^T g over later rows) and rho, per kv head and segment, from
  // each segment's sums per query head (la_state in GRADS mode: q as the keys, grad_out as the
  // values), scanned in reverse and summed over the query heads of each kv head.
  Segments rev;
  Tensor r_buffer;
  if (p.g > 1 || !causal || state_grad) {
    const int64_t gs = p.g * p.r_rev;
    const Tensor rs = at::empty({sh.b, sh.h, gs, p.ep}, f32);
    // Only dS0 and dz0 (the reverse scan's total) read the first segment's sums.
    const int64_t first = causal && !state_grad ? p.r_rev : 0;
    aot::la_state({p.dtype, p.bk, 1, p.feat},
                  config(q, p.nt_state * (gs - first) * sh.b * sh.h, "linear_attn_bwd segment sums"),
                  p.q.const_data_ptr(), dout.const_data_ptr(), p.w.c(), p.w.s(), rs.mutable_data_ptr(), den_ptr,
                  dl_ptr, sh.h, sh.n, p.dp, p.dvp, sh.d, sh.dv, gs, p.l / p.r_rev, first, gs - first, p.phi.kind,
                  sh.parts,
                  phi.normalize, static_cast<float>(scale), st(p.q, 0), st(p.q, 1), st(p.q, 2), st(dout, 0),
                  st(dout, 1), st(dout, 2), p.w.stride_b, p.ep);
    const int64_t n_rep = sh.h / sh.hkv;
    r_buffer = n_rep == 1 ? rs : at::empty({sh.b, sh.hkv, causal ? gs : 1, p.ep}, f32);
    scan(p, rs, r_buffer, p.r_rev, n_rep, causal ? 1 : 2, dsf, dzf, ds0 ? &*ds0 : nullptr, dz0 ? &*dz0 : nullptr,
         config);
    // Segment g starts (walking back) from the state after its last sub-segment, R * g + R - 1.
    const float* base = r_buffer.const_data_ptr<float>() + (p.r_rev - 1) * p.ep;
    const int64_t seg_g = causal ? p.r_rev * p.ep : 0;
    rev = {base, base + p.fd, r_buffer.size(2) * p.ep, seg_g, r_buffer.size(2) * p.ep, seg_g, 1};
  } else if (dsf) {
    rev = {dsf->const_data_ptr(), dzf->const_data_ptr(), p.fd, 0, p.f, 0, 1};
  }
  Tensor dk = kernel_output(sh.b, sh.hkv, sh.n, p.dp, k);
  Tensor dv = kernel_output(sh.b, sh.hkv, sh.n, p.dvp, v);
  // Gluon's dk (one program for all of F and Dv) beside dq's (wgmma_dq) computes dv as well, and so
  // does Triton's where its program holds all of F and its variant is built (WITH_DV: spec.py
  // FUSED_BLOCK): a dv pass would read q, k and grad_out again and repeat the reverse state's update.
  const aot::LaBwdDkWgmmaKey dk_wgmma_key{p.dtype, bkv, causal, p.feat};
  const bool wgmma_dk = wgmma_dq && aot::la_bwd_dk_wgmma_runs_on(dk_wgmma_key, q.get_device());
  const bool dv_in_dk = wgmma_dk || (nf == 1 && aot::la_bwd_dk_built({p.dtype, bkv, causal, p.feat, 1}));
  if (!dv_in_dk) {
    part_walks(p, p.split_dv, sh.hkv, false, q, [&](const PartWalk& w) {
      aot::la_bwd_dv(aot::LaBwdDvKey{p.dtype, p.bk, causal, p.feat},
                     config(q, p.nt_dv * p.g * sh.b * sh.hkv, "linear_attn_bwd dv"), p.q.const_data_ptr(),
                     p.k.const_data_ptr(), dout.const_data_ptr(), dv.mutable_data_ptr(), p.w.c(), p.w.s(), rev.s,
                     den_ptr, w.acc, sh.h, sh.hkv, sh.n, p.dp, p.dvp, sh.d, sh.dv, p.g, p.l, phi.kind, phi.normalize,
                     sh.parts, rev.has, w.part, static_cast<float>(scale), st(p.q, 0), st(p.q, 1), st(p.q, 2),
                     st(p.k, 0), st(p.k, 1), st(p.k, 2), st(dout, 0), st(dout, 1), st(dout, 2), st(dv, 0), st(dv, 1),
                     st(dv, 2), p.w.stride_b, rev.s_bh, rev.s_g);
    });
  }
  const auto dk_walk = [&](auto launch, const auto& key, int64_t n_tiles, const char* name) {
    launch(key, config(q, n_tiles * p.g * sh.b * sh.hkv, name), p.q.const_data_ptr(), p.k.const_data_ptr(),
           p.v.const_data_ptr(), dout.const_data_ptr(), dk.mutable_data_ptr(), dv.mutable_data_ptr(), p.w.c(),
           p.w.s(), rev.s, rev.z, den_ptr, dl_ptr, sh.h, sh.hkv, sh.n, p.dp, p.dvp, sh.d, sh.dv, p.g, p.l, phi.kind,
           phi.normalize, sh.parts, rev.has, static_cast<float>(scale), st(p.q, 0), st(p.q, 1), st(p.q, 2),
           st(p.k, 0), st(p.k, 1), st(p.k, 2), st(p.v, 0), st(p.v, 1), st(p.v, 2), st(dout, 0), st(dout, 1),
           st(dout, 2), st(dk, 0), st(dk, 1), st(dk, 2), st(dv, 0), st(dv, 1), st(dv, 2), p.w.stride_b, rev.s_bh,
           rev.s_g, rev.z_bh, rev.z_g);
  };
  if (wgmma_dk) {
    dk_walk(aot::la_bwd_dk_wgmma, dk_wgmma_key, 1, "linear_attn_bwd dk and dv");
  } else {
    dk_walk(aot::la_bwd_dk, aot::LaBwdDkKey{p.dtype, bkv, causal, p.feat, dv_in_dk}, nf,
            dv_in_dk ? "linear_attn_bwd dk and dv" : "linear_attn_bwd dk");
  }
  return {unpad(dq, sh.d), unpad(dk, sh.d), unpad(dv, sh.dv), ds0, dz0};
}

// ---- the ops ------------------------------------------------------------------------------------

// Both forward ops: `saved` as fwd_cuda's; the CPU path has no forward states ([0]).
FwdResult fwd(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos, const OptTensor& sin,
              const OptTensor& s0, const OptTensor& z0, c10::string_view phi, bool causal, double eps, double scale,
              bool return_state, Tensor* saved) {
  const Phi ph = parse_phi(std::string_view(phi.data(), phi.size()));
  const Shape sh = check_inputs(q, k, v, cos, sin);
  check_state(s0, z0, sh, q, "initial_S", "initial_z");
  if (q.is_cuda()) {
    return fwd_cuda(q, k, v, cos, sin, s0, z0, sh, ph, causal, eps, scale, return_state, saved);
  }
  if (saved) {
    *saved = at::empty({0}, q.options().dtype(at::kFloat));
  }
  return fwd_cpu(q, k, v, cos, sin, s0, z0, sh, ph, causal, eps, scale, return_state);
}

FwdResult linear_attn_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos,
                          const OptTensor& sin, const OptTensor& s0, const OptTensor& z0, c10::string_view phi,
                          bool causal, double eps, double scale, bool return_state) {
  return fwd(q, k, v, cos, sin, s0, z0, phi, causal, eps, scale, return_state, nullptr);
}

// linear_attn_fwd, and the forward states linear_attn_bwd can take instead of recomputing them
// (its fwd_states): the state pass over k and v, 7% of the backward at B4 H16 N4096 D64 (bf16,
// H200). They are [0] where there are none (CPU, one causal segment, decode steps).
TrainResult linear_attn_fwd_train(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos,
                                  const OptTensor& sin, const OptTensor& s0, const OptTensor& z0,
                                  c10::string_view phi, bool causal, double eps, double scale, bool return_state) {
  Tensor saved;
  auto [out, s, z] = fwd(q, k, v, cos, sin, s0, z0, phi, causal, eps, scale, return_state, &saved);
  return {out, s, z, saved};
}

// The shape of linear_attn_fwd_train's fourth output for CUDA inputs of these shapes on `device`
// (for its fake implementation).
std::vector<int64_t> linear_attn_states_shape(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_len,
                                              int64_t head_dim, int64_t value_dim, at::ScalarType dtype,
                                              c10::string_view phi, bool causal, bool cosformer, int64_t device) {
  if (batch * heads * seq_len == 0) return {0};
  TORCH_CHECK_TYPE(kernel_dtype(dtype),
                   "neuralops.linear_attn: the CUDA kernels take float16, bfloat16 and float32, got ", dtype);
  const Phi ph = parse_phi(std::string_view(phi.data(), phi.size()));
  const Shape sh{batch, heads, kv_heads, seq_len, head_dim, value_dim, cosformer ? 2 : 1};
  return saved_states_shape(plan_layout(sh, ph, causal, dtype, static_cast<int>(device)));
}

// The checks linear_attn_bwd and linear_attn_bwd_aten share.
std::pair<Phi, Shape> check_bwd(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                const OptTensor& cos, const OptTensor& sin, const OptTensor& s0, const OptTensor& z0,
                                const OptTensor& grad_s, const OptTensor& grad_z, c10::string_view phi) {
  const Phi ph = parse_phi(std::string_view(phi.data(), phi.size()));
  const Shape sh = check_inputs(q, k, v, cos, sin);
  check_state(s0, z0, sh, q, "initial_S", "initial_z");
  check_state(grad_s, grad_z, sh, q, "grad_S", "grad_z");
  TORCH_CHECK_VALUE(grad_out.sizes() == at::IntArrayRef({sh.b, sh.h, sh.n, sh.dv}),
                    "neuralops.linear_attn: grad_out must have the output's shape [B, H, N, Dv] = [", sh.b, ", ", sh.h,
                    ", ", sh.n, ", ", sh.dv, "], got ", grad_out.sizes());
  TORCH_CHECK_TYPE(grad_out.scalar_type() == q.scalar_type(), "neuralops.linear_attn: grad_out must be ",
                   q.scalar_type(), " like q, got ", grad_out.scalar_type());
  check_same_device(q, grad_out, "linear_attn", "q", "grad_out");
  return {ph, sh};
}

BwdResult linear_attn_bwd(
    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos,
    const OptTensor& sin, const OptTensor& s0, const OptTensor& z0, const OptTensor& grad_s, const OptTensor& grad_z,
    c10::string_view phi, bool causal, double eps, double scale, bool state_grad, const OptTensor& fwd_states) {
  const auto [ph, sh] = check_bwd(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, phi);
  if (q.is_cuda()) {
    return bwd_cuda(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, fwd_states, sh, ph, causal, eps, scale,
                    state_grad);
  }
  check_saved_states(fwd_states, {0}, q);
  return bwd_cpu(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, sh, ph, causal, eps, scale, state_grad);
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor, OptTensor, OptTensor> linear_attn_bwd_aten(
    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cos,
    const OptTensor& sin, const OptTensor& s0, const OptTensor& z0, const OptTensor& grad_s, const OptTensor& grad_z,
    c10::string_view phi, bool causal, double eps, double scale, bool state_grad) {
  const auto [ph, sh] = check_bwd(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, phi);
  return bwd_cpu(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, sh, ph, causal, eps, scale, state_grad);
}

}  // namespace neuralops::ops

TORCH_LIBRARY_FRAGMENT(neuralops, m) {
  m.def("linear_attn_fwd(Tensor q, Tensor k, Tensor v, Tensor? cos_weight, Tensor? sin_weight, "
        "Tensor? initial_S, Tensor? initial_z, str phi, bool causal, float eps, float scale, bool return_state) "
        "-> (Tensor, Tensor?, Tensor?)");
  m.def("linear_attn_fwd_train(Tensor q, Tensor k, Tensor v, Tensor? cos_weight, Tensor? sin_weight, "
        "Tensor? initial_S, Tensor? initial_z, str phi, bool causal, float eps, float scale, bool return_state) "
        "-> (Tensor, Tensor?, Tensor?, Tensor)");
  m.def("linear_attn_bwd(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor? cos_weight, Tensor? sin_weight, "
        "Tensor? initial_S, Tensor? initial_z, Tensor? grad_S, Tensor? grad_z, str phi, bool causal, float eps, "
        "float scale, bool state_grad, Tensor? fwd_states=None) -> (Tensor, Tensor, Tensor, Tensor?, Tensor?)");
  m.def("linear_attn_states_shape(int batch, int heads, int kv_heads, int seq_len, int head_dim, int value_dim, "
        "ScalarType dtype, str phi, bool causal, bool cosformer, int device) -> int[]",
        &neuralops::ops::linear_attn_states_shape);
}

TORCH_LIBRARY_IMPL(neuralops, CUDA, m) {
  m.impl("linear_attn_fwd", &neuralops::ops::linear_attn_fwd);
  m.impl("linear_attn_fwd_train", &neuralops::ops::linear_attn_fwd_train);
  m.impl("linear_attn_bwd", &neuralops::ops::linear_attn_bwd);
}

TORCH_LIBRARY_IMPL(neuralops, CPU, m) {
  m.impl("linear_attn_fwd", &neuralops::ops::linear_attn_fwd);
  m.impl("linear_attn_fwd_train", &neuralops::ops::linear_attn_fwd_train);
  m.impl("linear_attn_bwd", &neuralops::ops::linear_attn_bwd);
}
