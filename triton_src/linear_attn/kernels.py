"""Linear attention as Triton kernels: causal (chunked) and bidirectional, forward and backward.

Notation, per batch b and query head h (kv head hk = h // (H // Hkv)), rows i (queries), j (keys):
    phi          the feature map: identity (phi_kind 0), elu+1 (1) or relu (2), applied in registers
    w_p(i)       position weights: one part (w_0 = 1) or, under Cosformer, two (w_0 = cos_i, w_1 = sin_i)
    qf_i         scale * [w_p(i) phi(q_i)]_p   the F = parts * D query features
    kf_j         [w_p(j) phi(k_j)]_p
    s_ij         qf_i . kf_j = scale * phi(q_i).phi(k_j) * sum_p w_p(i) w_p(j)
    S_i, z_i     S0 + sum_j kf_j^T v_j  [F, Dv]   and   z0 + sum_j kf_j  [F], over j <= i (causal)
                 or over all j (bidirectional)
    out_i        num_i / den_i with num_i = qf_i S_i, den_i = qf_i . z_i + eps   (normalized), or num_i

Shapes and layouts
    q [B, H, N, D], k [B, Hkv, N, D], v [B, Hkv, N, Dv], out and grad_out [B, H, N, Dv]: any batch,
        head and row strides, unit stride along the last dimension. Pointers, strides, D and Dv carry
        16-divisibility hints (spec.py), which give 16-byte loads and stores: the C++ op guarantees
        them, copying an input that breaks them into a padded buffer (padding that has zero features).
    weights (cos, sin): fp32, row b at ``w + b * sw_b`` (sw_b = 0 for one vector for all batches).
    states: fp32, per (b, hk): S [F, DVS] row-major, then z [F]; feature row f = p * DS + d, where
        DS, DVS are the true D, Dv (the kernels' D, Dv may be padded). The user-facing state has
        this layout: S [B, Hkv, (2,) D, Dv], z [B, Hkv, (2,) D].
    segment buffers: [B, Hx, G, EP] fp32, one state per segment (S then z, EP >= F * DVS + F).

Register layout of a tile of W features starting at feature d0: with one part, column c is feature
d0 + c; under Cosformer, column c < W/2 is (0, d0 + c) and column c >= W/2 is (1, d0 + c - W/2).
Both halves come from one row of the input (two contiguous masked loads, the second an L1 hit), so
the doubled features exist only in registers.

Causal or bidirectional is compiled in (CAUSAL): as a run-time branch it cost registers enough to
spill. So is the feature map where there is one part (FEAT > 0 overrides phi_kind and n_parts;
spec.FEATURES): the run-time selects and Cosformer's column arithmetic were a fifth of the
forward's loop. The other switches (normalization, states, stats, and phi under Cosformer, FEAT 0)
run-time: uniform arithmetic, load masks or branches around dots, never branches around loads,
which stay at the top of the loop where Triton software-pipelines them; a switched-off input is a
fully masked load that moves no bytes. Loads clamp rows past the end to the last row instead of
masking them (see _row_ptrs).

Algorithm. The sequence is cut into G segments of L tokens (a multiple of the chunk C). Programs own
one segment and walk its chunks in order with the running state in registers (no N x N matrix, no
per-chunk state in memory). For a chunk with the state S, z before it:
    out  = (A v + qf S) / (rowsum(A) + qf . z + eps)      A = tril(qf kf^T)        (intra + inter)
    S   += kf^T v,  z += colsum(kf)
Segments run in parallel: ``la_state_kernel`` sums each segment's kf^T v, ``la_scan_kernel`` turns
those sums into the state before each segment (or the total, for bidirectional mode), and
``la_fwd_kernel`` computes the outputs. When B * H alone fills the GPU, G = 1 and the causal
forward is a single launch. On sm_90 the causal bf16 forward with one feature part walks in
fwd_wgmma.la_fwd_wgmma_kernel instead (same arguments and results, written in Gluon). A causal call of a few rows (a decode step: N = 1 after a state) takes
``la_decode_kernel``, one launch whose programs each serve all query heads of a kv head. The kernels
of one call run back to back, each after the first launched as a programmatic dependent of the one
before (triton_src/common/grid_dependency.py): they wait for it first thing and let the next start
as they drain.

Backward, with g_i = dout_i / den_i and r_i = -(dout_i . out_i) / den_i (g = dout, r = 0 unnormalized):
    ds_ij = g_i . v_j + r_i
    dqf_i = sum_{j<=i} ds_ij kf_j = tril(ds) kf + g_i S^T + r_i z        (forward order, S as above)
    dkf_j = sum_{i>=j} ds_ij qf_i = triu(ds)^T qf + v_j R^T + rho        (reverse order)
    dv_j  = sum_{i>=j} s_ij g_i   = triu(A)^T g + kf_j R                  (reverse order)
    R = dS_final + sum_{i later} qf_i^T g_i,  rho = dz_final + sum_{i later} qf_i r_i
and dS0 = R, dz0 = rho over the whole sequence. ``la_fwd_kernel`` in stats mode gives den_i and
dout_i . out_i, ``la_state_kernel`` in GRADS mode each segment's sums of qf^T g and qf r (the
reverse scan's input), ``la_bwd_dq_kernel`` dq, ``la_bwd_dv_kernel`` and ``la_bwd_dk_kernel`` dv
and dk, summing over the query heads of each kv head (GQA: K and V are never expanded). Each pass
tiles its output: Dv-tiled passes hold all F features (the contraction of s_ij), dq and dk tiles of
features hold all of Dv. Where one dq or dk program holds all of F, the backward runs up to two
passes fewer over q, k, v and grad_out: dq computes its rows' den_i and dout_i . out_i itself
(STATS, for dk, dv and the reverse state pass after it; spec.dq_stats_built), and dk computes dv
(WITH_DV; spec.dk_dv_built).

Precision (spec.PRECISION). bf16 tensors use bf16 dot operands, the tensor cores' full rate: the
features, A, v, g and dout round to bf16, and a running state enters its dots as a hi + lo pair of
bf16 halves (_mm_state), since one rounding of it cost the normalized map's dq about 1e-2 (the
bf16 bound). A float64 emulation of this scheme on random inputs gave 2e-3 (out) and 6e-3 (dq)
norm-wise error at N = 512 to 4096, D = 64 and 128, flat in N. At 128 features the states that
change every chunk enter one tf32 dot instead (_mm_state): faster there, and within bounds. The
outputs' qf S (la_fwd_kernel: the forward and the stats pass, causal and bidirectional) round the
state to bf16 once: the split bought out nothing it needs. On the H200 (bf16, N 2048-8192, D 64
and 128) out stayed at 1.7-1.9e-3 and the dq the stats pass feeds at 1.7-4.8e-3, while the causal
forward went 0.0908 -> 0.0863 ms at B4 H16 N4096 D64 and 1.085 -> 0.952 ms at B1 H16 N65536 D128
(where the state had entered one tf32 dot), and the bidirectional forward at 128 features could
hold all of Dv in one program (spec.BIDIR_FWD_TILES).
fp16 tensors use tf32 dots on fp32 operands: fp16 operands would overflow (S and z grow with N),
and bf16 ones would cost fp16's tighter bound (dq 6.5e-3 against 5e-3). fp32 tensors use tf32x3
(fp32 accuracy). Accumulation is always fp32. With bf16 operands the forward's sums (den's qf . z
and rowsum(A), z's colsum(kf)) and the backward's qf^T r run as narrow dots against [., SUM_W]
operands (ones, or hi + lo halves of z and r): sums of the same bf16 operands the other dots use,
in fp32.

The naive references the kernels are tested against are the ``*_reference`` functions below.
"""

import torch
import triton
import triton.language as tl

from triton_src.common.grid_dependency import launch_dependents, wait_for_primary

PHI_KINDS = {"identity": 0, "elu+1": 1, "relu": 2}


# ---- naive references (float64; the plain O(N^2) form for attention) -----------------------------


def features_reference(x: torch.Tensor, phi_kind: int, weights: "tuple | None", mult: float = 1.0) -> torch.Tensor:
    """[B, H, N, D] -> [B, H, N, F] features, parts concatenated (p * D + d), float64."""
    x = x.double()
    f = {0: x, 1: torch.where(x > 0, x + 1, torch.exp(x)), 2: x.clamp_min(0)}[phi_kind] * mult
    if weights is None:
        return f
    c, s = (w.double()[:, None, :, None] if w.dim() == 2 else w.double()[:, None] for w in weights)
    return torch.cat([f * c, f * s], dim=-1)


def _expand_kv(x: torch.Tensor, h: int) -> torch.Tensor:
    return x.repeat_interleave(h // x.shape[1], dim=1)


def state_reference(k, v, phi_kind, weights, seg_len):
    """Per segment of seg_len rows: (sum kf^T v [B, Hkv, G, F, Dv], sum kf [B, Hkv, G, F])."""
    kf, v = features_reference(k, phi_kind, weights), v.double()
    n = k.shape[2]
    s = [torch.einsum("bhnf,bhne->bhfe", kf[:, :, a:a + seg_len], v[:, :, a:a + seg_len]) for a in range(0, n, seg_len)]
    z = [kf[:, :, a:a + seg_len].sum(2) for a in range(0, n, seg_len)]
    return torch.stack(s, 2), torch.stack(z, 2)


def scan_reference(x: torch.Tensor, init: "torch.Tensor | None", mode: int, n_grp: int) -> torch.Tensor:
    """x [B, HX, G, E] -> y [B, HX // n_grp, G, E]: init plus the sum over earlier (mode 0) or later
    (mode 1) segments of the group's heads, or [B, HY, 1, E] with the total (mode 2)."""
    b, hx, g, e = x.shape
    xs = x.double().reshape(b, hx // n_grp, n_grp, g, e).sum(2)
    base = 0 if init is None else init.double().reshape(b, hx // n_grp, 1, e)
    if mode == 2:
        return base + xs.sum(2, keepdim=True)
    incl = xs.cumsum(2) if mode == 0 else xs.flip(2).cumsum(2).flip(2)
    return base + incl - xs


def attention_reference(q, k, v, phi_kind, normalize, causal, weights, scale, eps, s0=None, z0=None):
    """The plain O(N^2) form, float64: (out, S_final, z_final); s0 [B, Hkv, F, Dv], z0 [B, Hkv, F]."""
    h = q.shape[1]
    qf = features_reference(q, phi_kind, weights, scale)
    kf_kv = features_reference(k, phi_kind, weights)
    kf, vv = _expand_kv(kf_kv, h), _expand_kv(v.double(), h)
    s = qf @ kf.transpose(-1, -2)
    if causal:
        s = s.tril()
    num, den = s @ vv, s.sum(-1)
    s_fin = torch.einsum("bhnf,bhne->bhfe", kf_kv, v.double())
    z_fin = kf_kv.sum(2)
    if s0 is not None:
        num = num + qf @ _expand_kv(s0.double(), h)
        den = den + (qf * _expand_kv(z0.double(), h)[:, :, None]).sum(-1)
        s_fin, z_fin = s_fin + s0.double(), z_fin + z0.double()
    out = num / (den + eps)[..., None] if normalize else num
    return out, s_fin, z_fin


# ---- shared pieces -------------------------------------------------------------------------------


@triton.jit
def _mma(a, b, acc, PREC: tl.constexpr):
    """acc + a @ b with fp32 accumulation in place (no second fp32 tile in registers): PREC 1 bf16
    operands, 2 tf32, 3 tf32x3 (fp32 accuracy)."""
    if PREC == 1:
        out = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
    elif PREC == 2:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="tf32")
    else:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="tf32x3")
    return out


@triton.jit
def _mm(a, b, PREC: tl.constexpr):
    """a @ b (see _mma)."""
    return _mma(a, b, tl.zeros((a.shape[0], b.shape[1]), dtype=tl.float32), PREC)


@triton.jit
def _mm_state(a, st, PREC: tl.constexpr, W: tl.constexpr):
    """a @ st for a running fp32 state st (S in dq, R in dv and dk), contracting W. With bf16
    operands st goes in as hi + lo halves (two dots), so it keeps 16 bits of mantissa; one bf16
    rounding of the state cost the dq of the normalized map about 1e-2 (the bf16 bound) on the
    interpreter tests. At W = 128 one tf32 dot on the fp32 state (11 bits) is faster, and within the
    tests' bounds on the H200: at B1 H16 N65536 D128 dq 1.47 -> 1.42, dv 1.29 -> 1.22, dk 1.45 ->
    1.27 ms (ncu, built cubins). At 64 the split is cheaper than tf32 (0.096 against 0.102 ms in
    the causal forward at B4 H16 N4096 D64, which has since dropped both for one rounding)."""
    if PREC == 1 and W == 128:
        out = tl.dot(a.to(tl.float32), st, input_precision="tf32")
    elif PREC == 1:
        hi = st.to(tl.bfloat16)
        out = _mm(a, hi, PREC)  # before lo exists: the other order spilled 120 more bytes in dk
        out = _mma(a, (st - hi.to(tl.float32)).to(tl.bfloat16), out, PREC)
    else:
        out = _mm(a, st, PREC)
    return out


# Row and column sums of the forward (den's qf . z and rowsum(A), z's colsum(kf)) as dots with a
# [., 16] operand: the tensor cores add them for a few instructions, where elementwise sums with
# shuffles cost about 250 SASS instructions per chunk and put den in another layout than the
# output tile it scales. bf16 operands (PREC 1) only: qf, kf and A are bf16 operands of the other
# dots already (the sums are of the same values), and z goes in as hi + lo halves, as states do.
SUM_W = tl.constexpr(16)
# The largest state tile (rows and columns) whose variants can sum segment sums as they start
# (_segment_state; csrc/ops/linear_attn.cpp kFoldMaxBlock must match).
FOLD_MAX_BLOCK = tl.constexpr(64)


@triton.jit
def _z_columns(z, BK: tl.constexpr):
    """The running z [BK] as the [BK, SUM_W] fp32 tile that carries it (z in every column)."""
    return tl.zeros((BK, SUM_W), dtype=tl.float32) + z[:, None]


@triton.jit
def _hi_lo_columns(x):
    """x, one value per row ([R, 1], or [R, SUM_W] with it in every column), as [R, SUM_W] fp32 with
    its hi and lo bf16 halves in columns 0 and 1 and zeros elsewhere: a dot operand whose two
    products sum to the product with x at 16 bits of mantissa (as _mm_state keeps a state's)."""
    col = tl.arange(0, SUM_W)[None, :]
    hi = x.to(tl.bfloat16).to(tl.float32)
    return tl.where(col == 0, hi, tl.where(col == 1, x - hi, 0.0))


@triton.jit
def _z_operand(zc):
    """[BK, SUM_W] bf16 operand from z's tile: the row sums of qf @ it are qf . z."""
    return _hi_lo_columns(zc).to(tl.bfloat16)


@triton.jit
def _ones_column(C: tl.constexpr, first_only: tl.constexpr):
    """[C, SUM_W] bf16 ones (in column 0 only with first_only): x @ it sums the rows of x."""
    col = tl.arange(0, SUM_W)[None, :] + tl.zeros((C, 1), dtype=tl.int32)
    return tl.where((col == 0) | (not first_only), 1.0, 0.0).to(tl.bfloat16)


@triton.jit
def _z_of(zc):
    """z [BK] back from its [BK, SUM_W] tile (column 0)."""
    return tl.sum(tl.where(tl.arange(0, SUM_W)[None, :] == 0, zc, 0.0), 1)


@triton.jit
def _op(x, PREC: tl.constexpr):
    """x as a dot operand: bf16 for PREC 1 (half the registers of the fp32 tile), else fp32."""
    if PREC == 1:
        y = x.to(tl.bfloat16)
    else:
        y = x.to(tl.float32)
    return y


@triton.jit
def _load_in(ptrs, mask):
    """An input tile in its own dtype (zero where masked)."""
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def _store_out(ptrs, x, mask):
    """Stores an fp32 tile in the tensor's dtype (rounded to nearest)."""
    tl.store(ptrs, x.to(ptrs.dtype.element_ty), mask=mask)


@triton.jit
def _exp_low(x):
    """exp(x) where x <= 0 matters (elu+1's lower branch; larger x give inf, never selected). exp2
    lowers to ex2.approx.ftz (one MUFU and a multiply); tl.exp's denormal handling cost three more
    instructions per feature, the largest share of the forward's loop."""
    return tl.math.exp2(x * 1.4426950408889634)


@triton.jit
def _phi(x, phi_kind):
    """identity (0), elu+1 (1), relu (2), without branches: x > 0 -> x (+1 for elu+1), else x, exp(x), 0."""
    low = tl.where(phi_kind == 0, x, tl.where(phi_kind == 1, _exp_low(x), 0.0))
    return tl.where(x > 0, x + (phi_kind == 1) * 1.0, low)


@triton.jit
def _dphi(x, phi_kind):
    low = tl.where(phi_kind == 0, 1.0, tl.where(phi_kind == 1, _exp_low(x), 0.0))
    return tl.where(x > 0, 1.0, low)


@triton.jit
def _half_width(W: tl.constexpr, n_parts):
    """Columns per part of a W-wide feature tile, written so Triton sees it divisible by W / 2."""
    return (W // 2) * (3 - n_parts)


@triton.jit
def _position_weights(wc_ptr, ws_ptr, rows, N, n_parts):
    """(cos, sin) weights of the rows; (1, 1) without Cosformer (a masked load: no bytes); (0, 0)
    for rows past the end, which zeroes their features."""
    m = (rows < N) & (n_parts == 2)
    wc = tl.load(wc_ptr + rows, mask=m, other=1.0)
    ws = tl.load(ws_ptr + rows, mask=m, other=1.0)
    return tl.where(rows < N, wc, 0.0), tl.where(rows < N, ws, 0.0)


@triton.jit
def _row_ptrs(ptr, rows, N, sn):
    """Row pointers with rows past the end clamped to the last row: loads need no row mask (whose
    per-element predicates the software pipeline would carry in registers); what those rows read
    is multiplied by zero weights or never stored."""
    return ptr + tl.minimum(rows, N - 1)[:, None].to(tl.int64) * sn


@triton.jit
def _features(ptr, rows, N, sn, d0, D, wc, ws, n_parts, phi_kind, mult, on, W: tl.constexpr):
    """The [C, W] fp32 feature tile of `rows` starting at feature d0 (layout in the module doc),
    zero outside the tensor (rows past N through their zero weights); `on` = 0 gives zeros
    without reading."""
    hw = _half_width(W, n_parts)
    c = tl.arange(0, W)
    # Runs of 8 columns are contiguous in either layout (W / 2 >= 8): 16-byte loads of 16-bit data.
    d = tl.max_contiguous(tl.multiple_of(d0 + c - (c >= hw).to(tl.int32) * hw, 8), 8)
    m = ((d < D) & (on != 0))[None, :]
    x = _load_in(_row_ptrs(ptr, rows, N, sn) + d[None, :], m).to(tl.float32)
    f = tl.where(m, _phi(x, phi_kind), 0.0)
    return f * tl.where(c < hw, (wc * mult)[:, None], (ws * mult)[:, None])  # mult per row, not per feature


@triton.jit
def _store_feature_grad(gf, ptr, out_ptr, rows, N, sn, so_n, d0, D, wc, ws, n_parts, phi_kind, mult,
                        W: tl.constexpr):
    """Chain rule from the gradient of a feature tile (layout of _features) to its input rows: one
    part stores the W columns, Cosformer sums the two halves into W / 2 columns."""
    C: tl.constexpr = rows.shape[0]
    hw = _half_width(W, n_parts)
    c = tl.arange(0, W)
    r_ok = rows < N
    weighted = gf * tl.where(c < hw, (wc * mult)[:, None], (ws * mult)[:, None])
    in_rows = ptr + rows[:, None].to(tl.int64) * sn
    out_rows = out_ptr + rows[:, None].to(tl.int64) * so_n
    # A branch, not masks: the inputs were just read (cache hits, nothing for the pipeline to hide),
    # and the branch not taken costs no arithmetic (the half tile's sum and dphi, 6% of dq's loop).
    if n_parts == 1:
        d1 = d0 + c
        m1 = r_ok[:, None] & (d1 < D)[None, :]
        x1 = _load_in(in_rows + d1[None, :], m1).to(tl.float32)
        _store_out(out_rows + d1[None, :], weighted * _dphi(x1, phi_kind), m1)
    else:
        halves = tl.sum(tl.reshape(weighted, (C, 2, W // 2)), 1)
        d2 = d0 + tl.arange(0, W // 2)
        m2 = r_ok[:, None] & (d2 < D)[None, :]
        x2 = _load_in(in_rows + d2[None, :], m2).to(tl.float32)
        _store_out(out_rows + d2[None, :], halves * _dphi(x2, phi_kind), m2)


@triton.jit
def _state_rows(W: tl.constexpr, d0, DS, n_parts):
    """For each column of a feature tile: its row in the state layout and whether it exists."""
    hw = _half_width(W, n_parts)
    c = tl.arange(0, W)
    p = (c >= hw).to(tl.int32)
    d = d0 + c - p * hw
    return p * DS + d, d < DS


@triton.jit
def _segment_state(s_ptr, z_ptr, bk, g, G, has_s, ss_bh, ss_g, sz_bh, sz_g, frow, f_ok, vc, DVS,
                   CAUSAL: tl.constexpr):
    """The state segment g starts from, as its (feature rows frow) x (value columns vc) tile of S
    and frow of z. has_s = 0: none (zeros). 1: the state at (s, z) + g * (ss_g, sz_g) (the scan's
    output, or an initial state with ss_g = sz_g = 0). 1 + R (2 or more), in variants that fold: the
    sum of the state pass's sums at (s, z) + j * (ss_g, sz_g) for the R * g before segment g
    (causal) or all R * G (bidirectional), where the state pass split each segment into R (csrc's
    state_split): the scan folded into the walk where segments are few (csrc's fold_scan). Only
    state tiles of at most FOLD_MAX_BLOCK rows and columns fold: summing larger ones in a loop made
    the H200's 128-feature kernels 3-5% slower even where they never fold (a second tile live
    beside the state)."""
    st_mask = f_ok[:, None] & (vc < DVS)[None, :]
    s_base = s_ptr + bk.to(tl.int64) * ss_bh
    z_base = z_ptr + bk.to(tl.int64) * sz_bh
    if (frow.shape[0] <= FOLD_MAX_BLOCK) and (vc.shape[0] <= FOLD_MAX_BLOCK):
        j0 = tl.where(has_s >= 2, 0, g)
        j1 = tl.where(has_s >= 2, (g * CAUSAL + G * (1 - CAUSAL)) * (has_s - 1), g + 1)
        on = (has_s != 0) & (j0 < j1)
        s = tl.load(s_base + j0 * ss_g + frow[:, None] * DVS + vc[None, :], mask=st_mask & on, other=0.0)
        z = tl.load(z_base + j0 * sz_g + frow, mask=f_ok & on, other=0.0)
        for j in range(j0 + 1, j1):
            s += tl.load(s_base + j * ss_g + frow[:, None] * DVS + vc[None, :], mask=st_mask, other=0.0)
            z += tl.load(z_base + j * sz_g + frow, mask=f_ok, other=0.0)
    else:
        s = tl.load(s_base + g * ss_g + frow[:, None] * DVS + vc[None, :], mask=st_mask & (has_s != 0), other=0.0)
        z = tl.load(z_base + g * sz_g + frow, mask=f_ok & (has_s != 0), other=0.0)
    return s, z


@triton.jit
def _part_sums(ptr, x, mask, part, writes):
    """The sums of a walk split by Cosformer part (SPLIT): part 0 leaves its x at ptr (fp32; where
    `writes`, one program of those that hold the same x) and gets x back; part 1 gets x plus them."""
    total = x + tl.load(ptr, mask=mask & (part != 0), other=0.0)
    tl.store(ptr, x, mask=mask & (part == 0) & writes)
    return total


@triton.jit
def _program(n_tiles, n_heads, G, HKV):
    """(tile, head within its kv head's group, segment, b * Hkv + hk, b, hk) of this program, for
    grids of n_tiles x n_heads x G x B*Hkv (fastest first); kv-head kernels pass n_heads = 1."""
    pid = tl.program_id(0)
    t = pid % n_tiles
    r = (pid // n_tiles) % n_heads
    g = (pid // n_tiles // n_heads) % G
    bk = pid // n_tiles // n_heads // G
    return t, r, g, bk, (bk // HKV).to(tl.int64), bk % HKV


@triton.jit
def _row_grad_scales(den_ptr, dl_ptr, bh, rows, N, normalize):
    """(1 / den_i, -(dout_i . out_i)) from the stats pass (dl [B, H, N]: its Dv tiles' shares
    summed); (1, 0) unnormalized. The backward keeps 1 / den_i out of its tiles: g_i = dout_i / den_i
    and r_i = -(dout_i . out_i) / den_i share it, so sums over i take it in the row multiplier of
    qf_i (_features' `mult`, free), and dq's rows in their store; what remains is dout itself (exact
    as an operand) and -(dout_i . out_i)."""
    m = (rows < N) & (normalize != 0)
    inv = 1.0 / tl.load(den_ptr + bh * N + rows, mask=m, other=1.0)
    return inv, -tl.load(dl_ptr + bh * N + rows, mask=m, other=0.0)


# ---- forward: segment sums, scan, outputs --------------------------------------------------------


@triton.jit
def la_state_kernel(
    k_ptr, v_ptr, wc_ptr, ws_ptr, x_ptr, den_ptr, dl_ptr,
    HKV, N, D, DV, DS, DVS, G, L, g_first, n_walk, phi_kind, n_parts, normalize,
    scale,
    sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, sw_b, EP,
    C: tl.constexpr, GRADS: tl.constexpr, BK: tl.constexpr, BF: tl.constexpr, BT: tl.constexpr,
    PREC: tl.constexpr, FEAT: tl.constexpr,
):
    """x[b, hk, g] = (sum kf^T v, sum kf) over segment g (GRADS = 0: the forward; scale unused),
    for the n_walk segments from g_first on, of the G in x. A causal call leaves out the one whose
    sum nothing reads when no total is asked for: the last (forward), the first (backward), as
    la_scan_kernel then does.

    GRADS = 1 (backward): the same sums of the query side, (sum qf^T g, sum qf r) per query head
    (k_ptr is q, v_ptr grad_out, HKV the number of query heads, den and dl from the stats pass):
    the reverse scan's input.

    A program sums one [BF, BT] tile of S (and BF of z): feature tiles of BF columns (the module
    doc's layout: under Cosformer a tile holds BF / 2 of D in each part) times Dv tiles of BT. The
    sums contract over rows, not features, so a tile narrower than the block BK needs nothing from
    the others, and its program holds a smaller accumulator (spec.STATE_TILES).
    Grid: (Dv tiles x feature tiles) x n_walk x B*Hkv (fastest first)."""
    tl.static_assert(BK % BF == 0)
    wait_for_primary()  # first: in the backward it reads the stats pass's den and dl
    if FEAT > 0:  # the feature map compiled in (spec.FEATURES)
        phi_kind = FEAT - 1
        n_parts = 1
    n_dv = tl.cdiv(DV, BT)
    n_f = tl.cdiv(D, _half_width(BF, n_parts))
    t, _, g, bk, b, hk = _program(n_dv * n_f, 1, n_walk, HKV)
    d0 = (t // n_dv) * _half_width(BF, n_parts)
    t = t % n_dv
    g += g_first
    # Without it, the 3.8 build of the 128-feature pass grew by 430 SASS instructions outside its
    # loop and ran 15% slower on the H200 (152 -> 175 us at B1 H16 N65536).
    tl.assume(g >= 0)
    kb = k_ptr + b * sk_b + hk * sk_h
    vb = v_ptr + b * sv_b + hk * sv_h
    vc = t * BT + tl.arange(0, BT)
    v_ok = vc < DV
    s = tl.zeros((BF, BT), dtype=tl.float32)
    z = tl.zeros((BF,), dtype=tl.float32)
    if PREC == 1:
        zc = tl.zeros((BF, SUM_W), dtype=tl.float32)
        ones_all = _ones_column(C, False)
    for c0 in range(g * L, tl.minimum(g * L + L, N), C):
        rows = c0 + tl.arange(0, C)
        wc, ws = _position_weights(wc_ptr + b * sw_b, ws_ptr + b * sw_b, rows, N, n_parts)
        if GRADS:  # qf_i / den_i as the features: v is grad_out, and z's row weights -(dout . out)
            inv, ndl = _row_grad_scales(den_ptr, dl_ptr, bk.to(tl.int64), rows, N, normalize)
            kf = _op(_features(kb, rows, N, sk_n, d0, D, wc, ws, n_parts, phi_kind, scale * inv, 1, BF), PREC)
        else:
            kf = _op(_features(kb, rows, N, sk_n, d0, D, wc, ws, n_parts, phi_kind, 1.0, 1, BF), PREC)
        vt = _load_in(_row_ptrs(vb, rows, N, sv_n) + vc[None, :], v_ok[None, :])
        s = _mma(tl.trans(kf), vt, s, PREC)
        if PREC == 1:
            if GRADS:
                zc = _mma(tl.trans(kf), _hi_lo_columns(ndl[:, None]), zc, PREC)
            else:
                zc = _mma(tl.trans(kf), ones_all, zc, PREC)
        elif GRADS:
            z += tl.sum(kf.to(tl.float32) * ndl[:, None], 0)
        else:
            z += tl.sum(kf.to(tl.float32), 0)
    if PREC == 1:
        z = _z_of(zc)
    frow, f_ok = _state_rows(BF, d0, DS, n_parts)
    base = x_ptr + (bk.to(tl.int64) * G + g) * EP
    tl.store(base + frow[:, None] * DVS + vc[None, :], s, mask=f_ok[:, None] & (vc < DVS)[None, :])
    tl.store(base + n_parts * DS * DVS + frow, z, mask=f_ok & (t == 0))
    launch_dependents()  # last: the next kernel may be scheduled as this grid drains


@triton.jit
def la_scan_kernel(
    x_ptr, y_ptr, init_s_ptr, init_z_ptr, tot_s_ptr, tot_z_ptr,
    G, FD, E, n_grp, mode, has_init, has_total, n_far, write_y,
    EP, sy_bh,
    BE: tl.constexpr, GB: tl.constexpr,
):
    """Scan over the segments of x [B, HY * n_grp, G, EP], summing each group of n_grp heads:
    y[b, hy, g] = init + sum over g' < g (mode 0), g' > g (mode 1), or, in slot 0, all g' (mode 2).
    init is a state (S [B, HY, FD], z [B, HY, E - FD]); the total, init included, can be written to
    another. Without a total, modes 0 and 1 read no x from the n_far segments at the far end (the
    last, the first), which no y needs: la_state_kernel may leave them unwritten (the R of a split
    state pass, csrc's state_split). The backward also sums the stats pass's shares of dout . out
    per Dv tile with it (mode 2, G = the tiles, FD = E = N).
    Grid: cdiv(E, BE) x B*HY (fastest first); E = FD + F elements per state."""
    wait_for_primary()  # first: everything below may read the previous kernel's output
    pid = tl.program_id(0)
    ne = tl.cdiv(E, BE)
    bh = (pid // ne).to(tl.int64)
    e = (pid % ne) * BE + tl.arange(0, BE)
    e_ok = e < E
    s_ok = e_ok & (e < FD)
    z_ok = e_ok & (e >= FD)
    nz = E - FD
    init_ok = has_init != 0
    carry = (tl.load(init_s_ptr + bh * FD + e, mask=s_ok & init_ok, other=0.0)
             + tl.load(init_z_ptr + bh * nz + (e - FD), mask=z_ok & init_ok, other=0.0))
    gi = tl.arange(0, GB)
    n_blk = tl.cdiv(G, GB)
    skip_far = (has_total == 0) & (mode != 2)
    for i in range(n_blk):
        blk = tl.where(mode == 1, n_blk - 1 - i, i)
        gs = blk * GB + gi
        m = (gs < G)[:, None] & e_ok[None, :]
        far = tl.where(mode == 0, gs >= G - n_far, gs < n_far)
        read = m & (~(far & skip_far))[:, None]
        xs = tl.zeros((GB, BE), dtype=tl.float32)
        for r in range(n_grp):
            xs += tl.load(x_ptr + ((bh * n_grp + r) * G + gs[:, None]) * EP + e[None, :], mask=read, other=0.0)
        tot = tl.sum(xs, 0)
        if mode != 2:  # the total alone needs no prefix sums (the store's mask is off then anyway)
            incl = tl.cumsum(xs, 0)
            ys = carry[None, :] + tl.where(mode == 0, incl - xs, tot[None, :] - incl)
            tl.store(y_ptr + bh * sy_bh + gs[:, None] * EP + e[None, :], ys, mask=m)
        carry += tot
    tl.store(y_ptr + bh * sy_bh + e, carry, mask=e_ok & (mode == 2) & (write_y != 0))
    tl.store(tot_s_ptr + bh * FD + e, carry, mask=s_ok & (has_total != 0))
    tl.store(tot_z_ptr + bh * nz + (e - FD), carry, mask=z_ok & (has_total != 0))
    launch_dependents()  # last: the next kernel may be scheduled as this grid drains


@triton.jit
def la_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, wc_ptr, ws_ptr,
    s_ptr, z_ptr, sf_ptr, zf_ptr, den_ptr, dl_ptr, acc_ptr, accd_ptr,
    H, HKV, N, D, DV, DS, DVS, G, L,
    phi_kind, normalize, n_parts, has_s, write_final, stats, part,
    scale, eps,
    sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, so_b, so_h, so_n,
    sw_b, ss_bh, ss_g, sz_bh, sz_g,
    C: tl.constexpr, CAUSAL: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr,
    FEAT: tl.constexpr, SPLIT: tl.constexpr,
):
    """Outputs of segment g for query head h and Dv tile t, starting from the state (s, z)[b, hk, g]
    or the sum of the segment sums before it (has_s, see _segment_state; ss_g = sz_g = 0: one state
    for every segment, as in bidirectional mode, where CAUSAL = 0 leaves only out = qf S / (qf . z + eps)).

    stats != 0 (backward): o_ptr is grad_out (read), and instead of the output the kernel writes
    den_i (den[b, h, i], by tile 0) and the tile's share of grad_out_i . out_i (dl[b, h, t, i]).
    write_final (causal): segment G - 1 of the first query head of hk writes the state after it to
    (sf, zf); the bidirectional total comes from the scan.
    SPLIT = 1 (Cosformer's block of two parts, spec.walks_by_part): the call is two launches, each
    walking the BK / 2 features of one part (`part`): all of F spilled (the [F, BT] fp32 state
    beside [C, F] feature tiles). Numerators and denominators add over the parts, so part 0 writes
    its unnormalized numerator to acc [B*H, N, DV] and its denominator, without eps, to accd
    [B*H, N] (fp32), and part 1 adds them to its own before it normalizes and writes what the call
    writes. Each part's state rows are its own (p * DS + d).
    Grid: Dv tiles x (H / Hkv) x G x B*Hkv (fastest first)."""
    wait_for_primary()  # first: everything below may read the previous kernel's output
    if FEAT > 0:  # the feature map compiled in (spec.FEATURES)
        phi_kind = FEAT - 1
        n_parts = 1
    FW: tl.constexpr = BK // (1 + SPLIT)  # the features one program holds
    if SPLIT:
        tile_parts = 1  # one part, its weight on every column
        eps = eps * part  # once, in the part that normalizes
    else:
        tile_parts = n_parts
    nt = tl.cdiv(DV, BT)
    n_rep = H // HKV
    t, r, g, bk, b, hk = _program(nt, n_rep, G, HKV)
    h = hk * n_rep + r
    bh = b * H + h
    qb = q_ptr + b * sq_b + h * sq_h
    kb = k_ptr + b * sk_b + hk * sk_h
    vb = v_ptr + b * sv_b + hk * sv_h
    ob = o_ptr + b * so_b + h * so_h
    vc = t * BT + tl.arange(0, BT)
    v_ok = vc < DV
    frow, f_ok = _state_rows(FW, 0, DS, tile_parts)
    if SPLIT:
        frow += part * DS
    st_mask = f_ok[:, None] & (vc < DVS)[None, :]
    s, z = _segment_state(s_ptr, z_ptr, bk, g, G, has_s, ss_bh, ss_g, sz_bh, sz_g, frow, f_ok, vc, DVS, CAUSAL)
    ci = tl.arange(0, C)
    if PREC == 1:
        zc = _z_columns(z, FW)
        if CAUSAL:
            ones_row = _ones_column(C, True)
            ones_all = _ones_column(C, False)
    if not CAUSAL:
        # The state is fixed: its dot operand once, and the fp32 state need not stay in registers.
        s_op = _op(s, PREC)
        if PREC == 1:
            zop = _z_operand(zc)
    for c0 in range(g * L, tl.minimum(g * L + L, N), C):
        rows = c0 + ci
        r_ok = rows < N
        wc, ws = _position_weights(wc_ptr + b * sw_b, ws_ptr + b * sw_b, rows, N, n_parts)
        if SPLIT:
            wc = tl.where(part == 0, wc, ws)
        qf = _op(_features(qb, rows, N, sq_n, 0, D, wc, ws, tile_parts, phi_kind, scale, 1, FW), PREC)
        kf = _op(_features(kb, rows, N, sk_n, 0, D, wc, ws, tile_parts, phi_kind, 1.0, CAUSAL, FW), PREC)
        vt = _load_in(_row_ptrs(vb, rows, N, sv_n) + vc[None, :], (v_ok & (CAUSAL != 0))[None, :])
        if PREC == 1:
            if CAUSAL:
                zop = _z_operand(zc)
            dacc = tl.dot(qf, zop)
        else:
            den = tl.sum(qf.to(tl.float32) * z[None, :], 1) + eps
        # The outputs take the state rounded once (bf16 operands): the hi + lo split that _mm_state
        # keeps for the backward's dq bought out nothing it needs (module doc, Precision).
        if CAUSAL:
            out = _mm(qf, s, PREC)
        else:
            out = _mm(qf, s_op, PREC)
        if CAUSAL:  # dots only: the loads above stay unconditional, so they pipeline
            a = _mm(qf, tl.trans(kf), PREC)
            a = tl.where(ci[:, None] >= ci[None, :], a, 0.0)
            if PREC == 1:
                dacc = _mma(a, ones_row, dacc, PREC)
                zc = _mma(tl.trans(kf), ones_all, zc, PREC)
            else:
                den += tl.sum(a, 1)
                z += tl.sum(kf.to(tl.float32), 0)
            out = _mma(a, vt, out, PREC)
            s = _mma(tl.trans(kf), vt, s, PREC)
        if PREC == 1:
            den = tl.sum(dacc, 1) + eps
        o_mask = r_ok[:, None] & v_ok[None, :]
        r_out = r_ok
        if SPLIT:
            out = _part_sums(acc_ptr + (bh * N + rows)[:, None].to(tl.int64) * DV + vc[None, :], out, o_mask, part,
                             True)
            den = _part_sums(accd_ptr + bh * N + rows, den, r_ok, part, t == 0)
            o_mask = o_mask & (part != 0)
            r_out = r_ok & (part != 0)
        out = out * (1.0 / tl.where(normalize != 0, den, 1.0))[:, None]  # one division per row
        o_rows = ob + rows[:, None].to(tl.int64) * so_n + vc[None, :]
        dout = _load_in(o_rows, o_mask & (stats != 0))
        if stats != 0:  # arithmetic only (the load stays above): the plain forward skips it
            tl.store(dl_ptr + (bh * nt + t) * N + rows, tl.sum(dout * out, 1), mask=r_out)
            tl.store(den_ptr + bh * N + rows, den, mask=r_out & (t == 0))
        _store_out(o_rows, out, o_mask & (stats == 0))
    if CAUSAL:  # the bidirectional total comes from the scan
        fin = (write_final != 0) & (r == 0) & (g == G - 1)
        fd = n_parts * DS
        if PREC == 1:
            z = _z_of(zc)
        tl.store(sf_ptr + bk.to(tl.int64) * fd * DVS + frow[:, None] * DVS + vc[None, :], s, mask=st_mask & fin)
        tl.store(zf_ptr + bk.to(tl.int64) * fd + frow, z, mask=f_ok & fin & (t == 0))
    launch_dependents()  # last: the next kernel may be scheduled as this grid drains


# ---- decode: a few rows after a state -------------------------------------------------------------


@triton.jit
def _feature_row(ptr, row, sn, D, wc, ws, n_parts, phi_kind, mult, W: tl.constexpr):
    """The [W] fp32 features of one input row (layout of _features; wc, ws its two weights)."""
    hw = _half_width(W, n_parts)
    c = tl.arange(0, W)
    d = tl.max_contiguous(tl.multiple_of(c - (c >= hw).to(tl.int32) * hw, 8), 8)
    x = tl.load(ptr + row * sn + d, mask=d < D, other=0.0).to(tl.float32)  # sn is i64: no overflow
    f = tl.where(d < D, _phi(x, phi_kind), 0.0)
    return f * tl.where(c < hw, wc, ws) * mult


@triton.jit
def la_decode_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, wc_ptr, ws_ptr, s_ptr, z_ptr, sf_ptr, zf_ptr,
    H, HKV, N, D, DV, DS, DVS, phi_kind, normalize, n_parts, has_s, write_final,
    scale, eps,
    sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, so_b, so_h, so_n,
    sw_b, ss_bh, sz_bh,
    BK: tl.constexpr, BT: tl.constexpr,
):
    """Causal outputs of a few rows (a decode step: N = 1) after the state (s, z)[b, hk], row by row
    with the state in registers: out_i = qf_i S_i / (qf_i . z_i + eps) after S += kf_i^T v_i. One
    program serves every query head of its kv head, so the state is read once (la_fwd_kernel reads
    it once per query head and computes a whole chunk for one row). fp32 arithmetic, no dots: a row
    is a vector-matrix product. Grid: Dv tiles x B*Hkv (fastest first)."""
    t, _, _, bk, b, hk = _program(tl.cdiv(DV, BT), 1, 1, HKV)
    n_rep = H // HKV
    kb = k_ptr + b * sk_b + hk * sk_h
    vb = v_ptr + b * sv_b + hk * sv_h
    vc = t * BT + tl.arange(0, BT)
    v_ok = vc < DV
    frow, f_ok = _state_rows(BK, 0, DS, n_parts)
    st_mask = f_ok[:, None] & (vc < DVS)[None, :]
    s = tl.load(s_ptr + bk.to(tl.int64) * ss_bh + frow[:, None] * DVS + vc[None, :],
                mask=st_mask & (has_s != 0), other=0.0)
    z = tl.load(z_ptr + bk.to(tl.int64) * sz_bh + frow, mask=f_ok & (has_s != 0), other=0.0)
    cos_on = n_parts == 2
    for i in range(N):
        wc = tl.load(wc_ptr + b * sw_b + i, mask=cos_on, other=1.0)
        ws = tl.load(ws_ptr + b * sw_b + i, mask=cos_on, other=1.0)
        kf = _feature_row(kb, i, sk_n, D, wc, ws, n_parts, phi_kind, 1.0, BK)
        vr = tl.load(vb + i * sv_n + vc, mask=v_ok, other=0.0).to(tl.float32)
        s += kf[:, None] * vr[None, :]
        z += kf
        for r in range(n_rep):
            h = hk * n_rep + r
            qf = _feature_row(q_ptr + b * sq_b + h * sq_h, i, sq_n, D, wc, ws, n_parts, phi_kind, scale, BK)
            num = tl.sum(qf[:, None] * s, 0)
            den = tl.sum(qf * z, 0) + eps
            out = num / tl.where(normalize != 0, den, 1.0)
            _store_out(o_ptr + b * so_b + h * so_h + i * so_n + vc, out, v_ok)
    fd = n_parts * DS
    fin = write_final != 0
    tl.store(sf_ptr + bk.to(tl.int64) * fd * DVS + frow[:, None] * DVS + vc[None, :], s, mask=st_mask & fin)
    tl.store(zf_ptr + bk.to(tl.int64) * fd + frow, z, mask=f_ok & fin & (t == 0))


# ---- backward -------------------------------------------------------------------------------------


@triton.jit
def la_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, dq_ptr, wc_ptr, ws_ptr,
    s_ptr, z_ptr, den_ptr, dl_ptr,
    H, HKV, N, D, DV, DS, DVS, G, L,
    phi_kind, normalize, n_parts, has_s,
    scale, eps,
    sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, sd_b, sd_h, sd_n, sdq_b, sdq_h, sdq_n,
    sw_b, ss_bh, ss_g, sz_bh, sz_g,
    C: tl.constexpr, CAUSAL: tl.constexpr, BF: tl.constexpr, BKV: tl.constexpr, PREC: tl.constexpr,
    FEAT: tl.constexpr, STATS: tl.constexpr,
):
    """dq of segment g, query head h, feature tile ft (BF columns of F, all of Dv), in forward order
    from the forward state (s, z)[b, hk, g] (has_s as in la_fwd_kernel). The reverse scan's segment sums come from
    la_state_kernel (grads mode): here they cost a second [BF, Dv] fp32 accumulator, which spilled.

    STATS = 1 (normalized maps, one feature tile holding all of F): the program computes its rows'
    den_i and dout_i . out_i itself, as the stats pass (la_fwd_kernel, stats) would, and writes them
    (den [B, H, N], dl [B, H, N]) for dk, dv and the reverse state pass; eps is used only then.
    Grid: feature tiles x (H / Hkv) x G x B*Hkv (fastest first)."""
    wait_for_primary()  # first: everything below may read the previous kernel's output
    if FEAT > 0:  # the feature map compiled in (spec.FEATURES)
        phi_kind = FEAT - 1
        n_parts = 1
    hw = _half_width(BF, n_parts)
    n_rep = H // HKV
    ft, r, g, bk, b, hk = _program(tl.cdiv(D, hw), n_rep, G, HKV)
    h = hk * n_rep + r
    bh = b * H + h
    d0 = ft * hw
    qb = q_ptr + b * sq_b + h * sq_h
    kb = k_ptr + b * sk_b + hk * sk_h
    vb = v_ptr + b * sv_b + hk * sv_h
    db = do_ptr + b * sd_b + h * sd_h
    dqb = dq_ptr + b * sdq_b + h * sdq_h
    vc = tl.arange(0, BKV)
    v_ok = vc < DV
    frow, f_ok = _state_rows(BF, d0, DS, n_parts)
    s, z = _segment_state(s_ptr, z_ptr, bk, g, G, has_s, ss_bh, ss_g, sz_bh, sz_g, frow, f_ok, vc, DVS, CAUSAL)
    ci = tl.arange(0, C)
    if STATS and PREC == 1:
        ones_row = _ones_column(C, True)
    for c0 in range(g * L, tl.minimum(g * L + L, N), C):
        rows = c0 + ci
        wc, ws = _position_weights(wc_ptr + b * sw_b, ws_ptr + b * sw_b, rows, N, n_parts)
        dout = _load_in(_row_ptrs(db, rows, N, sd_n) + vc[None, :], v_ok[None, :])
        kf = _features(kb, rows, N, sk_n, d0, D, wc, ws, n_parts, phi_kind, 1.0, CAUSAL, BF)
        vt = _load_in(_row_ptrs(vb, rows, N, sv_n) + vc[None, :], (v_ok & (CAUSAL != 0))[None, :])
        gq = _mm_state(dout, tl.trans(s), PREC, BKV)  # dout S^T
        if CAUSAL:
            ds = _mm(dout, tl.trans(vt), PREC)  # dout v^T
        if STATS:
            # den_i as the forward has it, and dout_i . out_i from the products above before they
            # take r: out_i's numerator is qf_i S + (tril(A) v)_i with A = qf kf^T, so dout_i . out_i
            # den_i = qf_i . gq_i + rowsum(tril(A) * ds)_i. One product (A) where the forward's
            # outputs would take three, and this program reads q, k, v and dout once where a
            # separate stats pass would read all four again.
            qf = _op(_features(qb, rows, N, sq_n, d0, D, wc, ws, n_parts, phi_kind, scale, 1, BF), PREC)
            if PREC == 1:
                dacc = tl.dot(qf, _z_operand(_z_columns(z, BF)))
            else:
                den = tl.sum(qf.to(tl.float32) * z[None, :], 1)
            dot_o = tl.sum(qf.to(tl.float32) * gq, 1)
            if CAUSAL:
                # A as den's dot takes it (bf16 for PREC 1): where the two sums round A differently,
                # the first row's dq, (dout_0 . v_0 - dout_0 . out_0) / den_0, no longer cancels.
                a = _op(tl.where(ci[:, None] >= ci[None, :], _mm(qf, tl.trans(kf), PREC), 0.0), PREC)
                if PREC == 1:
                    dacc = _mma(a, ones_row, dacc, PREC)
                else:
                    den += tl.sum(a, 1)
                dot_o += tl.sum(a.to(tl.float32) * ds, 1)
            if PREC == 1:
                den = tl.sum(dacc, 1)
            den += eps
            inv = 1.0 / den
            dl = dot_o * inv
            r_ok = rows < N
            tl.store(den_ptr + bh * N + rows, den, mask=r_ok)
            tl.store(dl_ptr + bh * N + rows, dl, mask=r_ok)
            ndl = -dl
        else:
            inv, ndl = _row_grad_scales(den_ptr, dl_ptr, bh, rows, N, normalize)
        # dqf_i / (1 / den_i): 1 / den_i goes into the store's row multiplier.
        gq += ndl[:, None] * z[None, :]
        if CAUSAL:
            ds = tl.where(ci[:, None] >= ci[None, :], ds + ndl[:, None], 0.0)
            gq += _mm(ds, kf, PREC)
            s += _mm(tl.trans(kf), vt, PREC)
            z += tl.sum(kf, 0)
        _store_feature_grad(gq, qb, dqb, rows, N, sq_n, sdq_n, d0, D, wc, ws, n_parts, phi_kind, scale * inv, BF)
    launch_dependents()  # last: the next kernel may be scheduled as this grid drains


@triton.jit
def _dv_chunk(dv, kf, qg, dout, rt, rep, ci, CAUSAL: tl.constexpr, PREC: tl.constexpr, W: tl.constexpr):
    """A reverse walk's dv rows after query head `rep` of the group: kf R (the later chunks) at the
    group's first head, then triu(kf qg^T) dout (this chunk), qg = qf / den. Shared by
    la_bwd_dv_kernel and la_bwd_dk_kernel's WITH_DV; the caller updates R after it."""
    if rep == 0:
        dv = _mm_state(kf, rt, PREC, W)
    if CAUSAL:
        at = _mm(kf, tl.trans(qg), PREC)
        at = tl.where(ci[None, :] >= ci[:, None], at, 0.0)
        dv += _mm(at, dout, PREC)
    return dv


@triton.jit
def la_bwd_dv_kernel(
    q_ptr, k_ptr, do_ptr, dv_ptr, wc_ptr, ws_ptr, r_ptr, den_ptr, acc_ptr,
    H, HKV, N, D, DV, DS, DVS, G, L,
    phi_kind, normalize, n_parts, has_r, part,
    scale,
    sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sd_b, sd_h, sd_n, sdv_b, sdv_h, sdv_n,
    sw_b, sr_bh, sr_g,
    C: tl.constexpr, CAUSAL: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr,
    FEAT: tl.constexpr, SPLIT: tl.constexpr,
):
    """dv of segment g, kv head hk, Dv tile t, in reverse order from R[b, hk, g] (the sum of qf^T g
    over later rows, dS_final included), summed over the query heads of hk; bidirectional mode
    (CAUSAL = 0) leaves dv = kf R with R the total.
    SPLIT = 1 (as la_fwd_kernel's): two launches, one per Cosformer part (`part`), dv being the sum
    of the parts' terms; part 0 writes its dv rows to acc [B*Hkv, N, DV] (fp32), which part 1 adds.
    Grid: Dv tiles x G x B*Hkv (fastest first)."""
    wait_for_primary()  # first: everything below may read the previous kernel's output
    if FEAT > 0:  # the feature map compiled in (spec.FEATURES)
        phi_kind = FEAT - 1
        n_parts = 1
    FW: tl.constexpr = BK // (1 + SPLIT)  # the features one program holds
    if SPLIT:
        tile_parts = 1  # one part, its weight on every column
    else:
        tile_parts = n_parts
    n_rep = H // HKV
    t, _, g, bk, b, hk = _program(tl.cdiv(DV, BT), 1, G, HKV)
    kb = k_ptr + b * sk_b + hk * sk_h
    dvb = dv_ptr + b * sdv_b + hk * sdv_h
    vc = t * BT + tl.arange(0, BT)
    v_ok = vc < DV
    frow, f_ok = _state_rows(FW, 0, DS, tile_parts)
    if SPLIT:
        frow += part * DS
    rt = tl.load(r_ptr + bk.to(tl.int64) * sr_bh + g * sr_g + frow[:, None] * DVS + vc[None, :],
                 mask=f_ok[:, None] & (vc < DVS)[None, :] & (has_r != 0), other=0.0)
    ci = tl.arange(0, C)
    s0 = g * L
    n_ch = tl.cdiv(tl.minimum(s0 + L, N) - s0, C)
    reps = tl.maximum(n_rep * CAUSAL, 1)
    dv = tl.zeros((C, BT), dtype=tl.float32)
    # One loop over (chunk, query head of the group), not a loop over heads inside the chunk loop:
    # Triton software-pipelines only loops that hold no loop. k's rows are read again for each head
    # of a group (cache hits).
    for it in range(n_ch * reps):
        rep = it % reps
        rows = s0 + (n_ch - 1 - it // reps) * C + ci
        r_ok = rows < N
        wc, ws = _position_weights(wc_ptr + b * sw_b, ws_ptr + b * sw_b, rows, N, n_parts)
        if SPLIT:
            wc = tl.where(part == 0, wc, ws)
        kf = _op(_features(kb, rows, N, sk_n, 0, D, wc, ws, tile_parts, phi_kind, 1.0, 1, FW), PREC)
        h = hk * n_rep + rep
        dout = _load_in(do_ptr + b * sd_b + h * sd_h + rows[:, None].to(tl.int64) * sd_n + vc[None, :],
                        r_ok[:, None] & (v_ok & (CAUSAL != 0))[None, :])
        inv = 1.0 / tl.load(den_ptr + (b * H + h) * N + rows, mask=r_ok & (normalize * CAUSAL != 0), other=1.0)
        qg = _op(_features(q_ptr + b * sq_b + h * sq_h, rows, N, sq_n, 0, D, wc, ws, tile_parts, phi_kind,
                           scale * inv, CAUSAL, FW), PREC)  # qf_i / den_i: g_i's 1 / den_i moved to its rows
        dv = _dv_chunk(dv, kf, qg, dout, rt, rep, ci, CAUSAL, PREC, FW)
        if CAUSAL:
            rt += _mm(tl.trans(qg), dout, PREC)
        d_mask = r_ok[:, None] & v_ok[None, :] & (rep == reps - 1)
        dv_rows = dv
        if SPLIT:
            dv_rows = _part_sums(acc_ptr + (bk.to(tl.int64) * N + rows)[:, None] * DV + vc[None, :], dv, d_mask,
                                 part, True)
            d_mask = d_mask & (part != 0)
        _store_out(dvb + rows[:, None].to(tl.int64) * sdv_n + vc[None, :], dv_rows, d_mask)
    launch_dependents()  # last: the next kernel may be scheduled as this grid drains


@triton.jit
def la_bwd_dk_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, wc_ptr, ws_ptr, r_ptr, rz_ptr, den_ptr, dl_ptr,
    H, HKV, N, D, DV, DS, DVS, G, L,
    phi_kind, normalize, n_parts, has_r,
    scale,
    sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, sd_b, sd_h, sd_n, sdk_b, sdk_h, sdk_n,
    sdv_b, sdv_h, sdv_n,
    sw_b, sr_bh, sr_g, srz_bh, srz_g,
    C: tl.constexpr, CAUSAL: tl.constexpr, BF: tl.constexpr, BKV: tl.constexpr, PREC: tl.constexpr,
    FEAT: tl.constexpr, WITH_DV: tl.constexpr,
):
    """dk of segment g, kv head hk, feature tile ft (all of Dv), in reverse order from
    (R, rho)[b, hk, g], summed over the query heads of hk; bidirectional mode (CAUSAL = 0) leaves
    dkf = v R^T + rho with the totals. WITH_DV = 1 (one feature tile holding all of F): the program
    also computes dv, as la_bwd_dv_kernel would, from the same reverse state and inputs.
    Grid: feature tiles x G x B*Hkv (fastest first)."""
    wait_for_primary()  # first: everything below may read the previous kernel's output
    if FEAT > 0:  # the feature map compiled in (spec.FEATURES)
        phi_kind = FEAT - 1
        n_parts = 1
    hw = _half_width(BF, n_parts)
    n_rep = H // HKV
    ft, _, g, bk, b, hk = _program(tl.cdiv(D, hw), 1, G, HKV)
    d0 = ft * hw
    kb = k_ptr + b * sk_b + hk * sk_h
    vb = v_ptr + b * sv_b + hk * sv_h
    dkb = dk_ptr + b * sdk_b + hk * sdk_h
    vc = tl.arange(0, BKV)
    v_ok = vc < DV
    frow, f_ok = _state_rows(BF, d0, DS, n_parts)
    rt = tl.load(r_ptr + bk.to(tl.int64) * sr_bh + g * sr_g + frow[:, None] * DVS + vc[None, :],
                 mask=f_ok[:, None] & (vc < DVS)[None, :] & (has_r != 0), other=0.0)
    rho = tl.load(rz_ptr + bk.to(tl.int64) * srz_bh + g * srz_g + frow, mask=f_ok & (has_r != 0), other=0.0)
    ci = tl.arange(0, C)
    s0 = g * L
    n_ch = tl.cdiv(tl.minimum(s0 + L, N) - s0, C)
    reps = tl.maximum(n_rep * CAUSAL, 1)
    gk = tl.zeros((C, BF), dtype=tl.float32)
    if WITH_DV:
        dvb = dv_ptr + b * sdv_b + hk * sdv_h
        dv = tl.zeros((C, BKV), dtype=tl.float32)
    # One loop over (chunk, query head of the group), as in la_bwd_dv_kernel (pipelined).
    for it in range(n_ch * reps):
        rep = it % reps
        rows = s0 + (n_ch - 1 - it // reps) * C + ci
        r_ok = rows < N
        wc, ws = _position_weights(wc_ptr + b * sw_b, ws_ptr + b * sw_b, rows, N, n_parts)
        vt = _load_in(vb + rows[:, None].to(tl.int64) * sv_n + vc[None, :], r_ok[:, None] & v_ok[None, :])
        h = hk * n_rep + rep
        inv, ndl = _row_grad_scales(den_ptr, dl_ptr, b * H + h, rows, N, normalize * CAUSAL)
        qg = _features(q_ptr + b * sq_b + h * sq_h, rows, N, sq_n, d0, D, wc, ws, n_parts, phi_kind,
                       scale * inv, CAUSAL, BF)  # qf_i / den_i: ds_ij's 1 / den_i moved to its rows
        dout = _load_in(do_ptr + b * sd_b + h * sd_h + rows[:, None].to(tl.int64) * sd_n + vc[None, :],
                        r_ok[:, None] & (v_ok & (CAUSAL != 0))[None, :])
        if WITH_DV:
            kf = _op(_features(kb, rows, N, sk_n, d0, D, wc, ws, n_parts, phi_kind, 1.0, 1, BF), PREC)
            dv = _dv_chunk(dv, kf, qg, dout, rt, rep, ci, CAUSAL, PREC, BF)
        if rep == 0:
            gk = _mm_state(vt, tl.trans(rt), PREC, BKV) + rho[None, :]
        if CAUSAL:
            dst = _mm(vt, tl.trans(dout), PREC) + ndl[None, :]
            dst = tl.where(ci[None, :] >= ci[:, None], dst, 0.0)
            gk += _mm(dst, qg, PREC)
            rt += _mm(tl.trans(qg), dout, PREC)
            if PREC == 1:  # qf^T r as a dot (see SUM_W)
                rho += tl.sum(_mm(tl.trans(qg), _hi_lo_columns(ndl[:, None]), PREC), 1)
            else:
                rho += tl.sum(qg * ndl[:, None], 0)
        # N = 0 stores nothing: the rows are stored after the group's last query head.
        _store_feature_grad(gk, kb, dkb, rows, tl.where(rep == reps - 1, N, 0), sk_n, sdk_n, d0, D, wc, ws,
                            n_parts, phi_kind, 1.0, BF)
        if WITH_DV:
            _store_out(dvb + rows[:, None].to(tl.int64) * sdv_n + vc[None, :], dv,
                       r_ok[:, None] & v_ok[None, :] & (rep == reps - 1))
