// Low-rank projection y = (x @ V.T) @ U.T + bias: neuralops::low_rank_fwd, low_rank_fwd_hidden (y and
// h = x @ V.T, which autograd saves), low_rank_bwd, and low_rank_route (which implementation a call
// takes). Kernels: triton_src/low_rank/kernels.py; specializations built: triton_src/low_rank/spec.py.
//
//   x [..., in]   V [rank, in]   U [out, rank]   bias [out]   ->   y [..., out] (contiguous)
//
// x may have any strides with a contiguous last dim: leading dims that collapse into at most two
// strided levels (any slice, batch-first or transposed [T, B, in] views) are read in place, others
// are copied once. Weights need a contiguous last dim (else they are copied). All tensors share one
// dtype and device. CPU tensors, and float64 on CUDA, run on ATen (at::linear / at::mm).
//
// On CUDA, route() below picks the implementation (see its comment): the Triton kernels or cuBLAS
// through ATen. backend="triton" and backend="cublas" force one side, "auto" follows measurements.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "low_rank_kernels.h"
#include "ops/launch_utils.h"

namespace neuralops::ops {
namespace {

using OptTensor = std::optional<at::Tensor>;

// ---- arguments ------------------------------------------------------------------------------

enum class Backend { kAuto, kTriton, kCublas };

Backend parse_backend(c10::string_view s) {
  if (s == "auto") {
    return Backend::kAuto;
  }
  if (s == "triton") {
    return Backend::kTriton;
  }
  TORCH_CHECK_VALUE(s == "cublas", "neuralops.low_rank: backend must be \"auto\", \"triton\" or ",
                    "\"cublas\", got \"", s, "\"");
  return Backend::kCublas;
}

std::vector<int64_t> leading_shape(const at::Tensor& x, int64_t last) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(last);
  return shape;
}

// The checks every entry point shares; names the argument and the expected shape.
void check_inputs(const at::Tensor& x, const at::Tensor& U, const at::Tensor& V, const OptTensor& bias) {
  TORCH_CHECK_VALUE(x.dim() >= 1, "neuralops.low_rank: x must have shape [..., in_features], got a 0-d tensor");
  TORCH_CHECK_VALUE(V.dim() == 2, "neuralops.low_rank: V must be 2-D [rank, in_features], got shape ", V.sizes());
  TORCH_CHECK_VALUE(U.dim() == 2, "neuralops.low_rank: U must be 2-D [out_features, rank], got shape ", U.sizes());
  TORCH_CHECK_VALUE(V.size(1) == x.size(-1), "neuralops.low_rank: V must have shape [rank, in_features] with ",
                    "in_features = x.shape[-1] = ", x.size(-1), ", got shape ", V.sizes());
  TORCH_CHECK_VALUE(U.size(1) == V.size(0), "neuralops.low_rank: U must have shape [out_features, rank] with ",
                    "rank = V.shape[0] = ", V.size(0), ", got shape ", U.sizes());
  TORCH_CHECK_TYPE(x.is_floating_point(), "neuralops.low_rank: x must be a floating-point tensor, got ",
                   x.scalar_type());
  const std::pair<const at::Tensor*, const char*> others[] = {{&U, "U"}, {&V, "V"}};
  for (const auto& [t, name] : others) {
    TORCH_CHECK_TYPE(t->scalar_type() == x.scalar_type(), "neuralops.low_rank: ", name, " has dtype ",
                     t->scalar_type(), " but x has dtype ", x.scalar_type(),
                     "; x, U, V and bias must share one dtype");
    check_same_device(x, *t, "low_rank", "x", name);
  }
  if (bias.has_value()) {
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == U.size(0), "neuralops.low_rank: bias must have ",
                      "shape [out_features] = [", U.size(0), "], got shape ", bias->sizes());
    TORCH_CHECK_TYPE(bias->scalar_type() == x.scalar_type(), "neuralops.low_rank: bias has dtype ",
                     bias->scalar_type(), " but x has dtype ", x.scalar_type(),
                     "; x, U, V and bias must share one dtype");
    check_same_device(x, *bias, "low_rank", "x", "bias");
  }
}

void check_like_rows(const at::Tensor& x, const at::Tensor& t, int64_t last, const char* name,
                     const char* last_name) {
  const auto expected = leading_shape(x, last);
  TORCH_CHECK_VALUE(t.sizes().vec() == expected, "neuralops.low_rank: ", name, " must have shape [..., ",
                    last_name, "] = ", c10::IntArrayRef(expected), " (x's leading dims), got shape ", t.sizes());
  TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type(), "neuralops.low_rank: ", name, " has dtype ",
                   t.scalar_type(), " but x has dtype ", x.scalar_type());
  check_same_device(x, t, "low_rank", "x", name);
}

// ---- layouts ----------------------------------------------------------------------------------

// An activation [..., C] as the kernels address it: row m starts at
// (m / inner) * s_outer + (m % inner) * s_inner elements from the data pointer.
struct Rows {
  at::Tensor t;  // the tensor read: the input itself, or a contiguous copy when its layout does not fit
  int64_t inner = 1;
  int64_t s_outer = 0;
  int64_t s_inner = 0;
};

Rows rows_of(const at::Tensor& t) {
  const int64_t d = t.dim();
  if (t.size(d - 1) <= 1 || t.stride(d - 1) == 1) {
    // Collapse the leading dims, innermost first, wherever one steps exactly over the next.
    std::vector<std::pair<int64_t, int64_t>> levels;  // (size, stride), innermost first
    for (int64_t i = d - 2; i >= 0; --i) {
      if (t.size(i) == 1) {
        continue;
      }
      if (!levels.empty() && t.stride(i) == levels.back().first * levels.back().second) {
        levels.back().first *= t.size(i);
      } else {
        levels.emplace_back(t.size(i), t.stride(i));
      }
    }
    if (levels.empty()) {
      return {t, 1, 0, 0};
    }
    if (levels.size() == 1) {
      return {t, levels[0].first, 0, levels[0].second};
    }
    if (levels.size() == 2) {
      return {t, levels[0].first, levels[1].second, levels[0].second};
    }
  }
  const at::Tensor c = t.contiguous();
  const int64_t m = c.numel() / std::max<int64_t>(c.size(d - 1), 1);
  return {c, std::max<int64_t>(m, 1), 0, c.size(d - 1)};
}

Rows rows_of_matrix(const at::Tensor& t) {  // a contiguous [M, C] we allocated
  return {t, std::max<int64_t>(t.size(0), 1), 0, kernel_stride(t, 0)};
}

at::Tensor unit_last(const at::Tensor& w) {
  return (w.size(-1) <= 1 || w.stride(-1) == 1) ? w : w.contiguous();
}

bool rows_aligned(const Rows& r) {
  return runtime::aligned16(r.t.const_data_ptr()) && r.s_outer % 16 == 0 && r.s_inner % 16 == 0;
}

bool matrix_aligned(const at::Tensor& w) {
  return runtime::aligned16(w.const_data_ptr()) && (w.dim() < 2 || kernel_stride(w, 0) % 16 == 0);
}

// ---- routing ----------------------------------------------------------------------------------

enum class Impl { kAten, kDecode, kFused, kTwoGemm };

const char* impl_name(Impl impl) {
  switch (impl) {
    case Impl::kDecode: return "triton_decode";
    case Impl::kFused: return "triton_fused";
    case Impl::kTwoGemm: return "triton_two_gemm";
    default: return "cublas";
  }
}

// The smallest block of the fast kernels built for `dtype` (triton_src/low_rank/spec.py) that
// covers `size`, or 0 when none does: the decode kernels' rows (BLOCK_M; the two are built for the
// same dtypes and BLOCK_M), the fused kernel's rank (BLOCK_R). Their limits follow the declaration.
int64_t decode_block(c10::ScalarType dtype, int64_t rows) {
  for (int64_t b = 16; b <= 1024; b *= 2) {
    if (b >= rows && aot::low_rank_decode_partial_built({dtype, b})) return b;
  }
  return 0;
}

// The decode output kernel's BLOCK_N for N columns: the smallest built (spec.py, _decode_out_blocks)
// whose grid fits in one wave of `sms` programs, else the largest built.
int64_t decode_out_block(c10::ScalarType dtype, int64_t block_m, int64_t N, int64_t sms) {
  int64_t largest = 0;
  for (int64_t b = 16; b <= 1024; b *= 2) {
    if (!aot::low_rank_decode_out_built({dtype, block_m, b})) continue;
    if (ceil_div(N, b) <= sms) return b;
    largest = b;
  }
  return largest;
}

int64_t fused_block(c10::ScalarType dtype, int64_t rank) {
  for (int64_t b = 16; b <= 1024; b *= 2) {
    if (b >= rank && aot::low_rank_fused_built({dtype, b})) return b;
  }
  return 0;
}

// The shape of one chained product out = (a @ w1.T) @ w2.T: the forward (a = x, K = in, N = out),
// or dx in the backward (a = grad_out, K = out, N = in).
struct Chain {
  int64_t M, K, R, N;
  c10::ScalarType dtype;
  bool hints;  // every pointer 16-byte aligned, K, R, N and the strides multiples of 16
  bool backward;  // the backward's dx chain rather than the forward
  int device;  // the CUDA device of the call (route asks its stream whether a graph is being captured)
};

// The Triton kernel for a chain when backend="triton": the fast kernels where their conditions
// hold, else the general two-GEMM kernels (any size, any alignment).
Impl triton_impl(const Chain& c) {
  if (!c.hints) {
    return Impl::kTwoGemm;
  }
  if (decode_block(c.dtype, c.M) != 0) {
    return Impl::kDecode;
  }
  return fused_block(c.dtype, c.R) != 0 ? Impl::kFused : Impl::kTwoGemm;
}

bool capturing(int device) {
  return runtime::stream_capturing(device, c10::cuda::getCurrentCUDAStream(device).stream());
}

// The weights' bytes (w1 and w2 together) up to which the decode kernels beat cuBLAS, at every M
// they run. From benchmarks/low_rank_decode_sweep.py (results/low_rank.md, fourteenth session).
constexpr int64_t kDecodeMaxWeightBytes = int64_t{9} << 20;

// Whether a chain whose decode kernels can run (M <= 64, the hints) should take them under
// backend="auto". H200, bf16, per call on the GPU alone (a CUDA graph of layers, each reading its
// weights from DRAM), decode against cuBLAS:
//   - forward, M <= 16: faster up to 8.4 MB of weights (in 4096, r512, out 4096: 9.1 against 12.5 us;
//     r256, out 11008: 7.4 against 12.4 us). At 15.5 MB (r512, out 11008) faster in a graph (13.4
//     against 14.6 us) but slower eager (17.9 against 16.9 us), and slower from 16.8 MB (r1024).
//   - forward, M = 17-64 (the reduce kernel between the two): faster up to 8.4 MB too (r512, out 4096:
//     10.8 and 11.6 against 12.6 and 12.9 us at M = 32 and 64; r256, out 11008: 10.4 and 10.5
//     against 12.6 and 13.0 us), slower at 15.5 MB (16.4 and 16.3 against 14.8 and 15.1 us).
//   - forward+backward: the decode backward (dx chain, then the Triton weight gradients) is slower
//     on the GPU but at the smallest sizes (in = out = 4096, r256, M16: 39.4 against 36.8 us), so a
//     backward being captured into a CUDA graph takes cuBLAS. Eager, the host's time decides: a
//     training step's autograd work (about 150 us) outlasts these kernels up to 8.4 MB of weights
//     (65-80 us at r512, out 4096, against 112-136 us at r1024), and the decode backward is two
//     launches where cuBLAS takes several.
bool decode_pays(const Chain& c) {
  const int64_t weight_bytes = c.R * (c.K + c.N) * static_cast<int64_t>(c10::elementSize(c.dtype));
  return weight_bytes <= kDecodeMaxWeightBytes && !(c.backward && capturing(c.device));
}

// The one place that decides which implementation runs a shape on CUDA (the backward takes the
// same decision for its dx chain; its weight gradients follow: Triton's wgrad kernel on a Triton
// route, cuBLAS otherwise). backend="auto", from the H200 measurements in
// benchmarks/results/low_rank.md:
//   - decode (fast-kernel conditions hold, M <= 64): the decode kernels where decode_pays says so.
//   - everything else: cuBLAS. The fused Triton kernel (h kept on chip) lost to two cuBLAS GEMMs at
//     every large-M shape measured (2.0x to 4.1x slower at M >= 4096, R <= 256), and above R = 256
//     the Triton path is two plain GEMMs. backend="triton" still runs them.
Impl route(const Chain& c, Backend backend) {
  if (backend == Backend::kCublas || !kernel_dtype(c.dtype) || c.M == 0 || c.K == 0 || c.R == 0 ||
      c.N == 0) {
    return Impl::kAten;
  }
  const Impl impl = triton_impl(c);
  if (backend == Backend::kTriton || (impl == Impl::kDecode && decode_pays(c))) {
    return impl;
  }
  return Impl::kAten;
}

int64_t rows_count(const at::Tensor& x) {
  return c10::multiply_integers(x.sizes().begin(), x.sizes().end() - 1);
}

Chain forward_chain(const Rows& xr, const at::Tensor& x, const at::Tensor& U, const at::Tensor& V,
                    const OptTensor& bias) {
  const int64_t M = rows_count(x), K = x.size(-1), R = V.size(0), N = U.size(0);
  const bool hints = K % 16 == 0 && R % 16 == 0 && N % 16 == 0 && rows_aligned(xr) && matrix_aligned(V) &&
                     matrix_aligned(U) && (!bias.has_value() || runtime::aligned16(bias->const_data_ptr()));
  return {M, K, R, N, x.scalar_type(), hints, false, x.get_device()};
}

Chain backward_chain(const Rows& gr, const at::Tensor& x, const at::Tensor& U, const at::Tensor& V) {
  // dx = (g @ U) @ V: a chain over the transposed weights, which the op makes contiguous.
  const int64_t M = rows_count(x), K = U.size(0), R = V.size(0), N = x.size(-1);
  const bool hints = K % 16 == 0 && R % 16 == 0 && N % 16 == 0 && rows_aligned(gr);
  return {M, K, R, N, x.scalar_type(), hints, true, x.get_device()};
}

void check_triton_dtype(const at::Tensor& x, Backend backend) {
  if (backend == Backend::kTriton && x.is_cuda()) {
    check_kernel_dtype(x, "low_rank", "x (backend=\"triton\")");
  }
}

// ---- launches ---------------------------------------------------------------------------------

const void* ptr_or(const OptTensor& t, const at::Tensor& fallback) {
  return t.has_value() ? t->const_data_ptr() : fallback.const_data_ptr();
}

// out = a @ b.T (+ bias): the general kernel, any size and alignment.
void launch_gemm_nt(const Rows& a, const at::Tensor& b, const OptTensor& bias, const at::Tensor& c,
                    int64_t M, int64_t N, int64_t K) {
  const aot::LowRankGemmNtKey key{c.scalar_type()};
  const auto cx = aot::low_rank_gemm_nt_constexprs(key, c.get_device());
  auto config = launch_config(c, ceil_div(M, cx.BLOCK_M) * ceil_div(N, cx.BLOCK_N), 1, 1, "low_rank");
  aot::low_rank_gemm_nt(key, config, a.t.const_data_ptr(), b.const_data_ptr(), ptr_or(bias, c),
                        c.mutable_data_ptr(), M, N, K, bias.has_value() ? 1 : 0, a.inner, a.s_outer,
                        a.s_inner, kernel_stride(b, 0), kernel_stride(c, 0));
}

// Splits of N for the fused kernel: more programs (each recomputing its h tile) when M alone gives
// fewer than one wave. Minimizes waves * per-program work, with work ~ K + N / splits.
int64_t fused_n_split(int64_t m_blocks, int64_t K, int64_t N, int64_t sms) {
  int64_t best = 1;
  double best_cost = 0;
  for (int64_t s = 1; s <= 8; ++s) {
    const double waves = static_cast<double>(ceil_div(m_blocks * s, sms));
    const double cost = waves * (static_cast<double>(K) + static_cast<double>(N) / s);
    if (s == 1 || cost < best_cost * 0.97) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

// How the decode kernels split K: `parts` programs per R block of the first kernel, each over `len`
// elements of K (a multiple of its BLOCK_K).
struct KSplit {
  int64_t parts;
  int64_t len;
};

// Without the reduce kernel (M <= 16), each program of the second kernel reads all parts * M * R * 4
// bytes of fp32 partials, so the split is as coarse as keeps the first kernel's programs short: at
// least 4 parts, each at most 4 BLOCK_K tiles of K. H200, bf16, M16, per call in a CUDA graph of 32
// layers (benchmarks/results/low_rank.md, fourteenth session's two sweeps): in = out = 4096, r128 /
// r256 / r512 5.0 / 5.6 / 9.1 us against 5.4 / 5.6 / 10.4 under the previous rule (a share of the SMs
// in proportion to w1's bytes); in 4096, out 11008, r256 7.4 against 8.8 us, r512 13.5 against 18.0;
// in 11008, out 4096, r256 9.9 against 9.5 us, the one shape that lost.
//
// With the reduce kernel between the two (decode_reduced), the second kernel reads one summed slice
// whatever the split, so the first kernel takes one program per SM: M64, parts 2 / 4 / 8 / 16 took
// 10.5 / 10.2 / 8.8 / 8.5 us at in = out = 4096, r256 (the rule: 8), 16.4 / 12.6 / 13.2 / 15.3 us at
// r512 (4), 14.4 / 12.4 / 12.2 / 12.7 us at out 11008, r256 (8).
KSplit decode_k_split(int64_t K, int64_t R, int64_t block_r, int64_t block_k, int64_t sms, bool reduced) {
  const int64_t k_tiles = ceil_div(K, block_k);
  const int64_t r_blocks = ceil_div(R, block_r);
  const int64_t wanted = reduced ? (sms + r_blocks / 2) / r_blocks : std::max<int64_t>(4, ceil_div(k_tiles, 4));
  const int64_t parts = std::clamp<int64_t>(wanted, 1, k_tiles);
  const int64_t len = ceil_div(ceil_div(K, parts), block_k) * block_k;
  return {ceil_div(K, len), len};
}

// out = (a @ w1.T) @ w2.T + bias, with hidden (if given) receiving a @ w1.T. a [M, K] (rows),
// w1 [R, K], w2 [N, R], out [M, N] and hidden [M, R] contiguous.
void run_chain(Impl impl, const Rows& a, const at::Tensor& w1, const at::Tensor& w2, const OptTensor& bias,
               const at::Tensor& out, const OptTensor& hidden, int64_t M) {
  const int64_t K = w1.size(1), R = w1.size(0), N = w2.size(0);
  const c10::ScalarType dtype = out.scalar_type();
  const int device = out.get_device();
  if (impl == Impl::kTwoGemm) {
    const at::Tensor h = hidden.has_value() ? *hidden : at::empty({M, R}, out.options());
    launch_gemm_nt(a, w1, std::nullopt, h, M, R, K);
    launch_gemm_nt(rows_of_matrix(h), w2, bias, out, M, N, R);
    return;
  }
  if (impl == Impl::kFused) {
    const aot::LowRankFusedKey key{dtype, fused_block(dtype, R)};
    const auto cx = aot::low_rank_fused_constexprs(key, device);
    const int64_t m_blocks = ceil_div(M, cx.BLOCK_M);
    int64_t split = fused_n_split(m_blocks, K, N, runtime::multiprocessor_count(device));
    const int64_t per_prog = ceil_div(ceil_div(N, split), cx.BLOCK_N) * cx.BLOCK_N;
    split = per_prog == 0 ? 1 : ceil_div(N, per_prog);
    auto config = launch_config(out, m_blocks, split, 1, "low_rank");
    aot::low_rank_fused(key, config, a.t.const_data_ptr(), w1.const_data_ptr(), w2.const_data_ptr(),
                        ptr_or(bias, out), out.mutable_data_ptr(), ptr_or(hidden, out), M, K, R, N,
                        per_prog, bias.has_value() ? 1 : 0, hidden.has_value() ? 1 : 0, a.inner,
                        a.s_outer, a.s_inner, kernel_stride(w1, 0), kernel_stride(w2, 0),
                        kernel_stride(out, 0), hidden.has_value() ? kernel_stride(*hidden, 0) : 0);
    return;
  }
  TORCH_CHECK(impl == Impl::kDecode, "neuralops.low_rank: internal error: no kernel for this route");
  const int64_t block_m = decode_block(dtype, M);
  const aot::LowRankDecodePartialKey partial_key{dtype, block_m};
  const int64_t sms = runtime::multiprocessor_count(device);
  const aot::LowRankDecodeOutKey out_key{dtype, block_m, decode_out_block(dtype, block_m, N, sms)};
  const auto pcx = aot::low_rank_decode_partial_constexprs(partial_key, device);
  const auto ocx = aot::low_rank_decode_out_constexprs(out_key, device);
  const aot::LowRankDecodeReduceKey reduce_key{block_m};
  const bool reduced = aot::low_rank_decode_reduce_built(reduce_key);
  const KSplit split = decode_k_split(K, R, pcx.BLOCK_R, pcx.BLOCK_K, sms, reduced);
  // Written in full by the first kernel before the second reads it: no zeroing. With the reduce
  // kernel, one more [M, R] slice at the end receives the sum (one allocation and no views: this is
  // on the host's path of an eager call).
  const at::Tensor part = at::empty({split.parts + (reduced ? 1 : 0), M, R}, out.options().dtype(at::kFloat));
  float* const part_ptr = part.mutable_data_ptr<float>();
  // A programmatic dependent of whatever kernel precedes it: its programs prefetch w1 and w2 into
  // L2 while that kernel finishes, and wait for it before they read anything.
  auto partial_config = launch_config(out, ceil_div(R, pcx.BLOCK_R), split.parts, 1, "low_rank");
  partial_config.programmatic_dependency = true;
  aot::low_rank_decode_partial(partial_key, partial_config, a.t.const_data_ptr(), w1.const_data_ptr(),
                               w2.const_data_ptr(), part_ptr, M, K, R, N, split.len, a.inner,
                               a.s_outer, a.s_inner, kernel_stride(w1, 0), kernel_stride(w2, 0));
  // Where spec.py builds the reduce kernel for these rows: the partials summed once, between the two.
  const float* summed = part_ptr;
  int64_t n_parts = split.parts;
  if (reduced) {
    float* const sum_ptr = part_ptr + split.parts * M * R;
    const auto rcx = aot::low_rank_decode_reduce_constexprs(reduce_key, device);
    auto reduce_config = launch_config(out, ceil_div(M * R, rcx.BLOCK), 1, 1, "low_rank");
    reduce_config.programmatic_dependency = true;
    aot::low_rank_decode_reduce(reduce_key, reduce_config, part_ptr, sum_ptr, M * R, split.parts);
    summed = sum_ptr;
    n_parts = 1;
  }
  // A programmatic dependent: its programs load their w2 tiles while the first kernel reads w1.
  auto config = launch_config(out, std::max<int64_t>(1, ceil_div(N, ocx.BLOCK_N)), 1, 1, "low_rank");
  config.programmatic_dependency = true;
  aot::low_rank_decode_out(out_key, config, summed, w2.const_data_ptr(), ptr_or(bias, out),
                           out.mutable_data_ptr(), ptr_or(hidden, out), M, R, N, n_parts,
                           bias.has_value() ? 1 : 0, hidden.has_value() ? 1 : 0, kernel_stride(w2, 0),
                           N == 0 ? 0 : kernel_stride(out, 0), hidden.has_value() ? kernel_stride(*hidden, 0) : 0);
}

// h = x @ V.T alone (the backward when autograd did not keep it).
void run_hidden(Impl impl, const Rows& xr, const at::Tensor& V, const at::Tensor& h, int64_t M) {
  if (impl == Impl::kDecode) {
    // The decode kernels with no output columns: V read once across the GPU into the partials,
    // then one program sums them into h.
    const at::Tensor none = at::empty({0, V.size(0)}, h.options());
    run_chain(impl, xr, V, none, std::nullopt, at::empty({M, 0}, h.options()), h, M);
    return;
  }
  launch_gemm_nt(xr, V, std::nullopt, h, M, V.size(0), V.size(1));
}

void launch_wgrad(const Rows& g, const Rows& h, const at::Tensor& dh, const Rows& x, const at::Tensor& dU,
                  const at::Tensor& dV, const OptTensor& dbias, int64_t M) {
  const int64_t N = dU.size(0), R = dU.size(1), K = dV.size(1);
  const aot::LowRankWgradKey key{dU.scalar_type()};
  const auto cx = aot::low_rank_wgrad_constexprs(key, dU.get_device());
  const int64_t tiles = ceil_div(N, cx.BLOCK_P) * ceil_div(R, cx.BLOCK_Q) +
                        ceil_div(R, cx.BLOCK_P) * ceil_div(K, cx.BLOCK_Q);
  auto config = launch_config(dU, tiles, 1, 1, "low_rank");
  aot::low_rank_wgrad(key, config, g.t.const_data_ptr(), h.t.const_data_ptr(), dh.const_data_ptr(),
                      x.t.const_data_ptr(), dU.mutable_data_ptr(), dV.mutable_data_ptr(),
                      dbias.has_value() ? dbias->mutable_data_ptr() : dU.mutable_data_ptr(), M, N, R, K,
                      dbias.has_value() ? 1 : 0, g.inner, g.s_outer, g.s_inner, h.inner, h.s_outer,
                      h.s_inner, kernel_stride(dh, 0), x.inner, x.s_outer, x.s_inner, kernel_stride(dU, 0),
                      kernel_stride(dV, 0));
}

// ---- ATen (CPU, float64, and the cuBLAS route) ---------------------------------------------------

std::tuple<at::Tensor, at::Tensor> aten_forward(const at::Tensor& x, const at::Tensor& U, const at::Tensor& V,
                                                const OptTensor& bias) {
  at::Tensor h = at::linear(x, V);
  at::Tensor y = at::linear(h, U, bias);
  return {y.contiguous(), h.contiguous()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, OptTensor> aten_backward(
    const at::Tensor& x, const at::Tensor& U, const at::Tensor& V, const at::Tensor& g,
    const OptTensor& hidden, bool bias_grad) {
  const int64_t M = rows_count(x);
  const at::Tensor x2 = x.reshape({M, x.size(-1)});
  const at::Tensor g2 = g.reshape({M, U.size(0)});
  const at::Tensor h2 = hidden.has_value() ? hidden->reshape({M, V.size(0)}) : at::mm(x2, V.t());
  const at::Tensor dh = at::mm(g2, U);
  at::Tensor dx = at::mm(dh, V).view(x.sizes());
  OptTensor dbias;
  if (bias_grad) {
    dbias = g2.sum(0);
  }
  return {dx, at::mm(g2.t(), h2), at::mm(dh.t(), x2), dbias};
}

// ---- ops --------------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& U_in, const at::Tensor& V_in,
                                           const OptTensor& bias_in, Backend backend, bool want_hidden) {
  check_inputs(x, U_in, V_in, bias_in);
  check_triton_dtype(x, backend);
  if (!x.is_cuda()) {
    return aten_forward(x, U_in, V_in, bias_in);
  }
  const at::Tensor U = unit_last(U_in), V = unit_last(V_in);
  const OptTensor bias = bias_in.has_value() ? OptTensor(bias_in->contiguous()) : std::nullopt;
  const Rows xr = rows_of(x);
  const Chain chain = forward_chain(xr, x, U, V, bias);
  const Impl impl = route(chain, backend);
  if (impl == Impl::kAten) {
    return aten_forward(x, U_in, V_in, bias_in);
  }
  c10::DeviceGuard guard(x.device());
  at::Tensor y = at::empty({chain.M, chain.N}, x.options());
  OptTensor h;
  if (want_hidden) {
    h = at::empty({chain.M, chain.R}, x.options());
  }
  run_chain(impl, xr, V, U, bias, y, h, chain.M);
  at::Tensor hidden = want_hidden ? h->view(leading_shape(x, chain.R)) : at::empty({0}, x.options());
  return {y.view(leading_shape(x, chain.N)), hidden};
}

at::Tensor low_rank_fwd(const at::Tensor& x, const at::Tensor& U, const at::Tensor& V, const OptTensor& bias,
                        c10::string_view backend) {
  return std::get<0>(forward(x, U, V, bias, parse_backend(backend), false));
}

std::tuple<at::Tensor, at::Tensor> low_rank_fwd_hidden(const at::Tensor& x, const at::Tensor& U,
                                                       const at::Tensor& V, const OptTensor& bias,
                                                       c10::string_view backend) {
  return forward(x, U, V, bias, parse_backend(backend), true);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, OptTensor> low_rank_bwd(
    const at::Tensor& x, const at::Tensor& U_in, const at::Tensor& V_in, const at::Tensor& grad_out,
    const OptTensor& hidden, bool bias_grad, c10::string_view backend_name) {
  const Backend backend = parse_backend(backend_name);
  check_inputs(x, U_in, V_in, std::nullopt);
  check_like_rows(x, grad_out, U_in.size(0), "grad_out", "out_features");
  if (hidden.has_value()) {
    check_like_rows(x, *hidden, V_in.size(0), "hidden", "rank");
  }
  check_triton_dtype(x, backend);
  if (!x.is_cuda()) {
    return aten_backward(x, U_in, V_in, grad_out, hidden, bias_grad);
  }
  const Rows gr = rows_of(grad_out);
  const Chain chain = backward_chain(gr, x, U_in, V_in);
  const Impl impl = route(chain, backend);
  if (impl == Impl::kAten) {
    return aten_backward(x, U_in, V_in, grad_out, hidden, bias_grad);
  }
  c10::DeviceGuard guard(x.device());
  const at::Tensor U = unit_last(U_in), V = unit_last(V_in);
  const int64_t M = chain.M, N = U.size(0), R = V.size(0), K = V.size(1);
  const Rows xr = rows_of(x);
  Rows hr;
  if (hidden.has_value()) {
    hr = rows_of(*hidden);
  } else {
    const at::Tensor h = at::empty({M, R}, x.options());
    // h alone: the decode kernels (with no output columns) where their conditions hold, else the
    // general GEMM.
    const Chain fwd = forward_chain(xr, x, U, V, std::nullopt);
    const bool decode = fwd.hints && decode_block(x.scalar_type(), M) != 0;
    run_hidden(decode ? Impl::kDecode : Impl::kTwoGemm, xr, V, h, M);
    hr = rows_of_matrix(h);
  }
  // dx = (g @ U) @ V is the forward chain on the transposed weights; dh lands in its hidden slot.
  const at::Tensor Ut = U.t().contiguous(), Vt = V.t().contiguous();
  at::Tensor dx = at::empty({M, K}, x.options());
  const at::Tensor dh = at::empty({M, R}, x.options());
  run_chain(impl, gr, Ut, Vt, std::nullopt, dx, dh, M);
  at::Tensor dU = at::empty({N, R}, x.options());
  at::Tensor dV = at::empty({R, K}, x.options());
  OptTensor dbias;
  if (bias_grad) {
    dbias = at::empty({N}, x.options());
  }
  launch_wgrad(gr, hr, dh, xr, dU, dV, dbias, M);
  return {dx.view(x.sizes()), dU, dV, dbias};
}

std::string low_rank_route(const at::Tensor& x, const at::Tensor& U, const at::Tensor& V, const OptTensor& bias,
                           c10::string_view backend_name, bool backward) {
  const Backend backend = parse_backend(backend_name);
  check_inputs(x, U, V, bias);
  if (!x.is_cuda()) {
    return "aten_cpu";
  }
  const Rows xr = rows_of(x);
  const Chain chain = backward ? backward_chain(xr, x, U, V) : forward_chain(xr, x, U, V, bias);
  return impl_name(route(chain, backend));
}

}  // namespace

// build_info()["routing"]["low_rank"]: the limits decode_pays applies under backend="auto".
std::string low_rank_routing_json() {
  int64_t max_rows = 0;  // the decode kernels' largest BLOCK_M built (for bf16)
  for (int64_t b = 16; b <= 1024; b *= 2) {
    max_rows = aot::low_rank_decode_partial_built({at::kBFloat16, b}) ? b : max_rows;
  }
  const auto field = [](const char* name, int64_t value) {
    return "\"" + std::string(name) + "\": " + std::to_string(value);
  };
  // The decode and fused kernels are built for 16-divisible sizes and strides (forward_chain's hints);
  // a call without them takes cuBLAS under "auto" and the two-GEMM kernels under "triton".
  return "{" + field("decode_max_rows", max_rows) + ", " + field("decode_max_weight_bytes", kDecodeMaxWeightBytes) +
         ", " + field("decode_multiple_of", 16) +
         ", \"decode_backward_captured\": false, \"otherwise\": \"cublas\"}";
}

}  // namespace neuralops::ops

TORCH_LIBRARY_FRAGMENT(neuralops, m) {
  m.def("low_rank_fwd(Tensor x, Tensor U, Tensor V, Tensor? bias=None, *, str backend=\"auto\") -> Tensor");
  m.def("low_rank_fwd_hidden(Tensor x, Tensor U, Tensor V, Tensor? bias=None, *, str backend=\"auto\") "
        "-> (Tensor, Tensor)");
  m.def("low_rank_bwd(Tensor x, Tensor U, Tensor V, Tensor grad_out, Tensor? hidden=None, bool bias_grad=False, "
        "*, str backend=\"auto\") -> (Tensor, Tensor, Tensor, Tensor?)");
  m.def("low_rank_route(Tensor x, Tensor U, Tensor V, Tensor? bias=None, *, str backend=\"auto\", "
        "bool backward=False) -> str",
        &neuralops::ops::low_rank_route);
}

TORCH_LIBRARY_IMPL(neuralops, CUDA, m) {
  m.impl("low_rank_fwd", &neuralops::ops::low_rank_fwd);
  m.impl("low_rank_fwd_hidden", &neuralops::ops::low_rank_fwd_hidden);
  m.impl("low_rank_bwd", &neuralops::ops::low_rank_bwd);
}

TORCH_LIBRARY_IMPL(neuralops, CPU, m) {
  m.impl("low_rank_fwd", &neuralops::ops::low_rank_fwd);
  m.impl("low_rank_fwd_hidden", &neuralops::ops::low_rank_fwd_hidden);
  m.impl("low_rank_bwd", &neuralops::ops::low_rank_bwd);
}
