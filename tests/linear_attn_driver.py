"""Runs the linear attention Triton kernels from Python the way csrc/ops/linear_attn.cpp does: the
same block and segment choices, buffers, launch order and arguments. The interpreter tests use it
on CPU tensors; on a GPU it runs the kernels through Triton's JIT (for experiments, not the op)."""

from __future__ import annotations

import torch
import triton

from triton_src.linear_attn import kernels as K
from triton_src.linear_attn.spec import (DECODE_BT, DECODE_WARPS, PRECISION, SCAN_CONSTEXPRS,
                                         dk_dv_built, dq_stats_built, feature_blocks, feature_key, fwd_table,
                                         state_feature_tile, tile_of, walks_by_part)


def pad16(x: int) -> int:
    return (x + 15) // 16 * 16


DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def block_for(dtype: str, width: int) -> int:
    """The smallest block built for `dtype` tensors that holds `width` columns (as csrc, among the
    blocks of the run-time map, FEAT 0: Cosformer's 512 the widest)."""
    for b in feature_blocks(dtype, 0):
        if b >= width:
            return b
    raise ValueError(f"no block holds {width} columns of {dtype} tensors")


DECODE_MAX_ROWS = 4  # csrc/ops/linear_attn.cpp kDecodeMaxRows: causal calls this short take la_decode_kernel


def segment_count(nc: int, quantum: int, per_segment: int, block: int, dv_tile: int, causal: bool,
                  sms: int) -> int:
    """csrc/ops/linear_attn.cpp segment_count: few, long segments, as long as the GPU stays busy."""
    wide = not causal and block > 64 and dv_tile >= 128
    per_sm = 4 if causal or block <= 64 else (1 if block >= 256 else 2) if wide else 8
    min_rows = 1024 if causal else 8 * block
    resident = 2 if block <= 64 else 1
    by_programs = max(1, per_sm * sms // per_segment) if wide else triton.cdiv(per_sm * sms, per_segment)
    by_rows = triton.cdiv(nc, triton.cdiv(min_rows, quantum))
    one_wave = max(1, resident * sms // per_segment)
    return min(nc, by_programs, max(by_rows, one_wave))


MIN_STATE_ROWS = 256  # csrc/ops/linear_attn.cpp kMinStateRows


def state_split(g: int, chunks: int, quantum: int, programs: int, block: int, causal: bool, sms: int,
                scanned: bool, scan_step: int) -> int:
    """csrc/ops/linear_attn.cpp state_split: the causal state pass's sub-segments per segment."""
    slots = (4 if block <= 64 else 2) * sms
    split = (causal and g >= 2 and chunks % 2 == 0 and chunks // 2 * quantum >= MIN_STATE_ROWS
             and 2 * (g - 1) * programs <= slots and (not scanned or 2 * g <= scan_step))
    return 2 if split else 1


FOLD_MAX_SEGMENTS = 4  # csrc/ops/linear_attn.cpp kFoldMaxSegments


def fold_scan(g: int, causal: bool, built: bool, has_initial_state: bool, returns_total: bool) -> bool:
    """csrc/ops/linear_attn.cpp fold_scan: few segments and no initial state skip the scan, in the
    variants built to fold it (`built`)."""
    return 1 < g <= FOLD_MAX_SEGMENTS and built and not has_initial_state and (causal or not returns_total)


def segments(nc: int, c: int, g: int, seg_len: int | None = None):
    """(G, L) for nc chunks of C tokens: about g segments of L tokens; seg_len forces L (tests)."""
    per = max(1, seg_len // c) if seg_len is not None else triton.cdiv(nc, g)
    return triton.cdiv(nc, per), per * c


def _padded(x: torch.Tensor, width: int, fill: float) -> torch.Tensor:
    """x with its last dimension padded to `width` (a copy with 16-divisible strides), or x."""
    if x.shape[-1] == width and x.stride(-1) == 1 and all(s % 16 == 0 for s in x.stride()[:-1]):
        return x
    out = torch.full((*x.shape[:-1], width), fill, dtype=x.dtype, device=x.device)
    out[..., : x.shape[-1]] = x
    return out


def device_arch(device: torch.device) -> int | None:
    """The sm_ target whose tiles (spec.tile_of) the op uses on `device`; None on the CPU."""
    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


def _st(t: torch.Tensor) -> list[int]:
    return [t.stride(i) if t.size(i) > 1 else 0 for i in range(3)]


def part_sums(split: bool, rows: int, n: int, width: int, dummy: torch.Tensor) -> tuple:
    """(acc [rows, n, width], accd [rows, n], parts) for a walk (csrc's part_walks): with `split`
    (spec.walks_by_part) part 0, then part 1, which adds part 0's sums from acc and accd; NaN where
    part 0 writes nothing, so that part 1 would show a read of it."""
    if not split:
        return dummy, dummy, (0,)
    nan = float("nan")
    return (torch.full((rows, n, width), nan, device=dummy.device), torch.full((rows, n), nan, device=dummy.device),
            (0, 1))


class _Setup:
    def __init__(self, q, k, v, phi, causal, cos, sin, seg_len, split=None, sms=None):
        self.b, self.h, self.n, self.d = q.shape
        self.hkv, self.dv = k.shape[1], v.shape[-1]
        self.n_rep = self.h // self.hkv
        self.n_parts = 2 if cos is not None else 1
        self.phi_kind = K.PHI_KINDS["identity" if phi == "softmax_free" else phi]
        self.normalize = int(phi != "softmax_free")
        self.feat = feature_key(self.phi_kind, self.n_parts)
        self.causal = int(causal)
        self.dtype = DTYPE_NAMES[q.dtype]
        self.dp, self.dvp = pad16(self.d), pad16(self.dv)
        # Padding columns must have zero features: phi(0) = 0 except for elu+1, where exp(-inf) = 0.
        fill = float("-inf") if self.phi_kind == 1 else 0.0
        self.q, self.k = _padded(q, self.dp, fill), _padded(k, self.dp, fill)
        self.v = _padded(v, self.dvp, 0.0)
        self.bk = block_for(self.dtype, self.n_parts * self.dp)
        self.prec = PRECISION[self.dtype]
        self.arch = device_arch(q.device)
        # (C, BT, launch options, Dv tiles) of the state pass, the forward and the dv pass.
        state_tile, fwd_tile, dv_tile = (tile_of(t, self.arch, self.dtype, self.bk, self.feat)
                                         for t in ("STATE_TILES", fwd_table(self.causal), "TILES"))
        self.state, self.fwd, self.dvt = (self._tiles(t) for t in (state_tile, fwd_tile, dv_tile))
        # The state pass's feature tile, and its programs per segment and head: Dv x feature tiles.
        self.state_bf = state_feature_tile(state_tile, self.bk)
        self.state = (*self.state[:3], self.state[3] * triton.cdiv(self.n_parts * self.dp, self.state_bf))
        self.nt = self.fwd[3]
        # Segments hold whole chunks of the backward's dq / dk kernels too (as csrc's make_plan).
        bkv = block_for(self.dtype, self.dvp)
        c_value, bf = tile_of("VALUE_TILES", self.arch, self.dtype, bkv, self.feat)[:2]
        # The variants built to fold the scan (kernels.FOLD_MAX_BLOCK), as csrc's make_plan.
        self.fold_fwd = max(self.bk, self.fwd[1]) <= K.FOLD_MAX_BLOCK.value
        self.fold_bwd = self.fold_fwd and max(bf, bkv) <= K.FOLD_MAX_BLOCK.value
        quantum = max(self.state[0], self.fwd[0], self.dvt[0], c_value)
        nc = max(1, triton.cdiv(self.n, quantum))
        per_segment = max(1, self.nt * self.h * self.b)
        # As csrc, on the device's multiprocessors (an H100/H200's 132 for the interpreter).
        # `sms` forces a count (tests: the plan's rules for a full GPU on small shapes).
        if sms is None:
            sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.device.type == "cuda" else 132
        g = segment_count(nc, quantum, per_segment, self.bk, self.fwd[1], bool(self.causal), sms)
        self.g, self.l = segments(nc, quantum, g, seg_len)
        # The state passes' splits, forward and reverse (csrc's state_split); `split` forces both (tests).
        chunks = self.l // quantum
        scan_step = SCAN_CONSTEXPRS["GB"]
        scanned = not fold_scan(self.g, self.causal, self.fold_fwd, False, False)
        is_causal = bool(self.causal)
        self.r = split or state_split(self.g, chunks, quantum, self.state[3] * self.b * self.hkv, self.bk, is_causal,
                                      sms, scanned, scan_step)
        self.r_rev = split or state_split(self.g, chunks, quantum, self.state[3] * self.b * self.h, self.bk, is_causal,
                                          sms, True, scan_step)
        self.whole_state = not self.causal and self.g > 1 and self.state[3] * self.b * self.hkv >= sms
        for r in (self.r, self.r_rev):
            assert self.causal or r == 1, "the bidirectional state pass is not split"
            assert self.l % (r * self.state[0]) == 0, "sub-segments of whole chunks"
        self.f = self.n_parts * self.d
        self.fd = self.f * self.dv
        self.e = self.fd + self.f
        self.ep = pad16(self.e)
        dev = q.device
        self.dummy = torch.zeros(1, dtype=torch.float32, device=dev)
        if cos is not None:
            self.wc, self.ws = cos.float().contiguous(), sin.float().contiguous()
            self.sw_b = self.n if cos.dim() == 2 else 0
        else:
            self.wc = self.ws = self.dummy
            self.sw_b = 0

    def _tiles(self, tile):
        c, bt, warps, stages = tile[:4]
        return c, bt, dict(num_warps=warps, num_stages=stages), triton.cdiv(self.dvp, bt)

    def dims(self):
        return (self.dp, self.dvp, self.d, self.dv)

    def folds(self, s0, returns_total: bool, backward: bool) -> bool:
        built = self.fold_bwd if backward else self.fold_fwd
        return fold_scan(self.g, self.causal, built, s0 is not None, returns_total)

    def forward_states(self, s0, z0, total_s=None, total_z=None, backward=False):
        """Segment-initial forward states (K1 + scan) -> (s, z, ss_bh, ss_g, sz_bh, sz_g, has_s),
        or the initial state itself when one causal segment needs no scan, or the sub-segment sums
        when the walks fold the scan in (has_s 1 + R)."""
        if self.causal and self.g == 1:
            if s0 is None:
                return self.dummy, self.dummy, 0, 0, 0, 0, 0
            return s0, z0, self.fd, 0, self.f, 0, 1
        # NaN where no sum is written: a kernel that read the segment left out would show it.
        gs = self.g * self.r
        x = torch.full((self.b, self.hkv, gs, self.ep), float("nan"), device=self.q.device)
        fold = self.folds(s0, total_s is not None, backward)
        # csrc's whole_state_pass: one bidirectional segment of all rows writes the total
        whole = self.whole_state and s0 is None and total_s is None and not fold
        # csrc's forward_states: no causal walk reads the last segment's sums, only the scan's total
        last = self.causal and (fold or total_s is None)
        if whole:
            self.state_sums(x, n_walk=1, seg_len=self.g * self.l)
        else:
            self.state_sums(x, n_walk=self.r * (self.g - 1) if last else gs)
        xz = x.view(-1)[self.fd:]
        if fold:
            return x, xz, gs * self.ep, self.ep, gs * self.ep, self.ep, 1 + self.r
        if not whole and (self.causal or gs > 1 or total_s is not None):  # one bidirectional segment is the total
            self.scan(x, x, 1, 0 if self.causal else 2, s0, z0, total_s, total_z, self.b * self.hkv)
        seg = self.r * self.ep if self.causal else 0
        return x, xz, gs * self.ep, seg, gs * self.ep, seg, 1

    def state_sums(self, x, do=None, den=None, dl=None, scale=1.0, g_first=0, n_walk=None, r=None, seg_len=None):
        """la_state_kernel: the sums of sub-segments g_first .. g_first + n_walk - 1 (default all) into
        x [B, Hkv, G * R, EP]; with grad_out `do`, the backward's (sum qf^T g, sum qf r) per query head
        into x [B, H, G * R, EP]. R: the forward's split, or `r` (the reverse one); seg_len: the rows of
        a sub-segment (default L / R)."""
        c, bt, launch, nt = self.state
        grads = do is not None
        keys, values, heads = (self.q, do, self.h) if grads else (self.k, self.v, self.hkv)
        r = self.r if r is None else r
        n_walk = self.g * r - g_first if n_walk is None else n_walk
        K.la_state_kernel[(nt * n_walk * self.b * heads,)](
            keys, values, self.wc, self.ws, x, self.dummy if den is None else den, self.dummy if dl is None else dl,
            heads, self.n, *self.dims(), self.g * r, seg_len or self.l // r, g_first, n_walk, self.phi_kind, self.n_parts,
            self.normalize if grads else 0, scale,
            *_st(keys), *_st(values), self.sw_b, self.ep,
            C=c, GRADS=int(grads), BK=self.bk, BF=self.state_bf, BT=bt, PREC=self.prec, FEAT=self.feat, **launch)

    def fwd_pass(self, o, states, scale, eps, sf=None, zf=None, write_final=False, den=None, dl=None):
        """la_fwd_kernel from forward_states' `states`: outputs into o, or with den and dl (the
        backward's stats pass) o is grad_out and the kernel writes den and dl instead."""
        s, z, ss_bh, ss_g, sz_bh, sz_g, has_s = states
        c, bt, launch, nt = self.fwd
        stats = den is not None
        d = self.dummy
        split = walks_by_part(self.bk)
        acc, accd, parts = part_sums(split, self.b * self.h, self.n, self.dvp, d)
        for part in parts:
            K.la_fwd_kernel[(nt * self.n_rep * self.g * self.b * self.hkv,)](
                self.q, self.k, self.v, o, self.wc, self.ws, s, z,
                d if sf is None else sf, d if zf is None else zf, den if stats else d, dl if stats else d, acc, accd,
                self.h, self.hkv, self.n, *self.dims(), self.g, self.l,
                self.phi_kind, self.normalize, self.n_parts, has_s, int(write_final), int(stats), part,
                scale, eps, *_st(self.q), *_st(self.k), *_st(self.v), *_st(o),
                self.sw_b, ss_bh, ss_g, sz_bh, sz_g,
                C=c, CAUSAL=self.causal, BK=self.bk, BT=bt, PREC=self.prec, FEAT=self.feat, SPLIT=int(split),
                **launch)

    def scan(self, x, y, n_grp, mode, init_s, init_z, tot_s, tot_z, bh, r=None):
        r = self.r if r is None else r
        _launch_scan(x, y, bh, self.g * r, self.fd, self.e, self.ep, y.shape[2] * self.ep, n_grp, mode,
                     init_s, init_z, tot_s, tot_z, self.dummy, n_far=r)


def _launch_scan(x, y, bh, g, fd, e, ep, sy_bh, n_grp, mode, init_s, init_z, tot_s, tot_z, dummy, n_far=1):
    """la_scan_kernel as csrc's launch_scan: x [bh * n_grp, g, ep] (g segments of e elements)."""
    K.la_scan_kernel[(triton.cdiv(e, SCAN_CONSTEXPRS["BE"]) * bh,)](
        x, y, *(t if t is not None else dummy for t in (init_s, init_z, tot_s, tot_z)),
        g, fd, e, n_grp, mode, int(init_s is not None), int(tot_s is not None), n_far, 1,
        ep, sy_bh, **SCAN_CONSTEXPRS, num_warps=4, num_stages=2)


def _unpad(t: torch.Tensor, width: int) -> torch.Tensor:
    return t if t.shape[-1] == width else t[..., :width].contiguous()


def forward(q, k, v, phi="elu+1", causal=False, eps=1e-6, scale=1.0, cos=None, sin=None, s0=None, z0=None,
            return_state=False, seg_len=None, split=None, sms=None):
    """(out, S_final or None, z_final or None); states fp32 [B, Hkv, F, Dv] and [B, Hkv, F]."""
    st = _Setup(q, k, v, phi, causal, cos, sin, seg_len, split, sms)
    dev = q.device
    sf = zf = None
    if return_state:
        sf = torch.empty(st.b, st.hkv, st.f, st.dv, dtype=torch.float32, device=dev)
        zf = torch.empty(st.b, st.hkv, st.f, dtype=torch.float32, device=dev)
    out = torch.empty(st.b, st.h, st.n, st.dvp, dtype=q.dtype, device=dev)
    if st.causal and st.n <= DECODE_MAX_ROWS:
        bt = DECODE_BT[st.bk]
        K.la_decode_kernel[(triton.cdiv(st.dvp, bt) * st.b * st.hkv,)](
            st.q, st.k, st.v, out, st.wc, st.ws,
            s0 if s0 is not None else st.dummy, z0 if z0 is not None else st.dummy,
            sf if sf is not None else st.dummy, zf if zf is not None else st.dummy,
            st.h, st.hkv, st.n, *st.dims(), st.phi_kind, st.normalize, st.n_parts, int(s0 is not None),
            int(return_state), scale, eps, *_st(st.q), *_st(st.k), *_st(st.v), *_st(out), st.sw_b, st.fd, st.f,
            BK=st.bk, BT=bt, num_warps=DECODE_WARPS, num_stages=1)
        return _unpad(out, st.dv), sf, zf
    states = st.forward_states(s0, z0, sf, zf)
    # With no scan to total them (one segment, or the scan folded in), the last causal walk writes them.
    final_from_walk = st.causal and (st.g == 1 or states[6] >= 2)
    st.fwd_pass(out, states, scale, eps, sf, zf, write_final=return_state and final_from_walk)
    return _unpad(out, st.dv), sf, zf


def _fused(st: _Setup, built) -> bool:
    """Whether one dq or dk program holds all of F and `built` (a spec rule) builds its variant."""
    bkv = block_for(st.dtype, st.dvp)
    one_tile = triton.cdiv(st.dp, tile_of("VALUE_TILES", st.arch, st.dtype, bkv, st.feat)[1] // st.n_parts) == 1
    return one_tile and built({"dtype": st.dtype, "BKV": bkv})


def dq_uses_stats(st: _Setup) -> bool:
    """csrc's dq_key: dq computes den and dout . out itself (normalized maps only)."""
    return bool(st.normalize) and _fused(st, dq_stats_built)


def dk_computes_dv(st: _Setup) -> bool:
    """csrc's dv_in_dk: dk computes dv too."""
    return _fused(st, dk_dv_built)


def backward(dout, q, k, v, phi="elu+1", causal=False, eps=1e-6, scale=1.0, cos=None, sin=None, s0=None, z0=None,
             ds_fin=None, dz_fin=None, state_grad=False, seg_len=None, split=None, sms=None):
    """(dq, dk, dv, dS0 or None, dz0 or None)."""
    st = _Setup(q, k, v, phi, causal, cos, sin, seg_len, split, sms)
    dev = q.device
    do = _padded(dout, st.dvp, 0.0)
    states = st.forward_states(s0, z0, backward=True)
    s, z, ss_bh, ss_g, sz_bh, sz_g, has_s = states
    bkv = block_for(st.dtype, st.dvp)
    c2, bf, w2, s2 = tile_of("VALUE_TILES", st.arch, st.dtype, bkv, st.feat)
    launch2 = dict(num_warps=w2, num_stages=s2)
    nf = triton.cdiv(st.dp, bf // st.n_parts)
    stats = int(dq_uses_stats(st))
    den, dl = st.dummy, st.dummy
    if st.normalize:
        den = torch.empty(st.b, st.h, st.n, dtype=torch.float32, device=dev)
        dl = torch.empty(st.b, st.h, 1 if stats else st.nt, st.n, dtype=torch.float32, device=dev)
    if st.normalize and not stats:
        st.fwd_pass(do, states, scale, eps, den=den, dl=dl)
        if st.nt > 1:  # the shares per Dv tile summed by the scan (csrc sum_tile_shares)
            total = torch.empty(st.b, st.h, st.n, dtype=torch.float32, device=dev)
            _launch_scan(dl, total, st.b * st.h, st.nt, st.n, st.n, st.n, st.n, 1, 2, None, None, None, None, st.dummy,
                         n_far=0)
            dl = total
    dq = torch.empty(st.b, st.h, st.n, st.dp, dtype=q.dtype, device=dev)
    K.la_bwd_dq_kernel[(nf * st.n_rep * st.g * st.b * st.hkv,)](
        st.q, st.k, st.v, do, dq, st.wc, st.ws, s, z, den, dl,
        st.h, st.hkv, st.n, *st.dims(), st.g, st.l,
        st.phi_kind, st.normalize, st.n_parts, has_s,
        scale, eps, *_st(st.q), *_st(st.k), *_st(st.v), *_st(do), *_st(dq),
        st.sw_b, ss_bh, ss_g, sz_bh, sz_g,
        C=c2, CAUSAL=st.causal, BF=bf, BKV=bkv, PREC=st.prec, FEAT=st.feat, STATS=stats, **launch2)
    ds0 = dz0 = None
    if state_grad:
        ds0 = torch.empty(st.b, st.hkv, st.f, st.dv, dtype=torch.float32, device=dev)
        dz0 = torch.empty(st.b, st.hkv, st.f, dtype=torch.float32, device=dev)
    if st.g > 1 or not st.causal or state_grad:  # the reverse states, as csrc
        rr = st.r_rev
        rs = torch.full((st.b, st.h, st.g * rr, st.ep), float("nan"), device=dev)
        # as csrc: only dS0 and dz0 (the scan's total) read the first segment's sums
        st.state_sums(rs, do, den, dl, scale, g_first=rr if st.causal and not state_grad else 0, r=rr)
        if st.n_rep == 1:
            ry = rs
        else:
            ry = torch.empty(st.b, st.hkv, st.g * rr if st.causal else 1, st.ep, dtype=torch.float32, device=dev)
        st.scan(rs, ry, st.n_rep, 1 if st.causal else 2, ds_fin, dz_fin, ds0, dz0, st.b * st.hkv, r=rr)
        # segment g starts (walking back) from the state after its last sub-segment, R * g + R - 1
        r = ry.view(-1)[(rr - 1) * st.ep:]
        rz = r[st.fd:]
        sr_bh = ry.shape[2] * st.ep
        sr_g = rr * st.ep if st.causal else 0
        srz_bh, srz_g, has_r = sr_bh, sr_g, 1
    elif ds_fin is not None:
        r, rz, sr_bh, sr_g, srz_bh, srz_g, has_r = ds_fin, dz_fin, st.fd, 0, st.f, 0, 1
    else:
        r, rz, sr_bh, sr_g, srz_bh, srz_g, has_r = st.dummy, st.dummy, 0, 0, 0, 0, 0
    dk = torch.empty(st.b, st.hkv, st.n, st.dp, dtype=q.dtype, device=dev)
    dv = torch.empty(st.b, st.hkv, st.n, st.dvp, dtype=q.dtype, device=dev)
    dv_in_dk = dk_computes_dv(st)
    if not dv_in_dk:
        c, bt, launch, nt = st.dvt
        split = walks_by_part(st.bk)
        acc, _, parts = part_sums(split, st.b * st.hkv, st.n, st.dvp, st.dummy)
        for part in parts:
            K.la_bwd_dv_kernel[(nt * st.g * st.b * st.hkv,)](
                st.q, st.k, do, dv, st.wc, st.ws, r, den, acc,
                st.h, st.hkv, st.n, *st.dims(), st.g, st.l,
                st.phi_kind, st.normalize, st.n_parts, has_r, part,
                scale, *_st(st.q), *_st(st.k), *_st(do), *_st(dv),
                st.sw_b, sr_bh, sr_g,
                C=c, CAUSAL=st.causal, BK=st.bk, BT=bt, PREC=st.prec, FEAT=st.feat, SPLIT=int(split), **launch)
    K.la_bwd_dk_kernel[(nf * st.g * st.b * st.hkv,)](
        st.q, st.k, st.v, do, dk, dv, st.wc, st.ws, r, rz, den, dl,
        st.h, st.hkv, st.n, *st.dims(), st.g, st.l,
        st.phi_kind, st.normalize, st.n_parts, has_r,
        scale, *_st(st.q), *_st(st.k), *_st(st.v), *_st(do), *_st(dk), *_st(dv),
        st.sw_b, sr_bh, sr_g, srz_bh, srz_g,
        C=c2, CAUSAL=st.causal, BF=bf, BKV=bkv, PREC=st.prec, FEAT=st.feat, WITH_DV=int(dv_in_dk), **launch2)
    return _unpad(dq, st.d), _unpad(dk, st.d), _unpad(dv, st.dv), ds0, dz0


def patch_interpreter_bf16_dot() -> None:
    """Triton's interpreter stores bf16 as uint16 bits and multiplies those bits in tl.dot (seen in
    Triton 3.8): make it widen bf16 operands to fp32 first, as the GPU's bf16 dot does."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_neuralops_bf16_dot", False):
        return
    original = builder.create_dot

    def widen(h):
        if h.dtype.scalar == tl.bfloat16:
            return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        return h

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    builder.create_dot = create_dot
    builder._neuralops_bf16_dot = True
