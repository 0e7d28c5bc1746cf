"""The low-rank projection kernel specializations the build compiles (read by triton_src.aot).

Tile sizes are constexprs derived from the key; everything else (sizes, strides, split counts,
whether there is a bias) is a run-time argument, so the variant count stays small: 34 variants.

Two kinds of kernels:
  - the general ones (gemm_nt, wgrad) run any shape and layout: each key is built twice, with and
    without the 16-byte hints (``aligned``), and the dispatcher picks the hinted form when it holds;
  - the fast paths (fused, the two decode kernels) are built only with the hints, written into
    their parameter types (``:16``). csrc/ops/low_rank.cpp checks the hints before it picks them
    and sends other shapes (odd sizes, misaligned views) to the general kernels. Without hints
    Triton cannot vectorize a single load, so a hint-free form would be slow and, for these
    kernels, large.

Shared memory stays within 99 KB per block on sm_80 and sm_120 (the sm_86/sm_89 GPUs an sm_80
cubin also runs on, and consumer Blackwell, allow no more).
"""

from triton_src.aot.spec import KernelSpec

_DTYPES = ("fp16", "bf16", "fp32")


def _wide(key: dict) -> bool:
    # fp32 products run on FMA units (IEEE, no tensor cores): smaller tiles keep registers in check.
    return key["dtype"] != "fp32"


# ---- fused forward: one BLOCK_M row block keeps its [BLOCK_M, BLOCK_R] h tile on chip ----------

def _fused_constexprs(key: dict) -> dict:
    r = key["BLOCK_R"]
    if _wide(key):
        return {"BLOCK_M": 64, "BLOCK_K": 32 if r == 256 else 64, "BLOCK_R": r, "BLOCK_N": 128 if r <= 128 else 64}
    return {"BLOCK_M": 32, "BLOCK_K": 32, "BLOCK_R": r, "BLOCK_N": 64}


# ":16": every pointer 16-byte aligned, every such integer a multiple of 16 (checked by the op).
_FUSED_PARAMS = (
    ("x_ptr", "*{dtype}:16"), ("v_ptr", "*{dtype}:16"), ("u_ptr", "*{dtype}:16"),
    ("bias_ptr", "*{dtype}:16"), ("y_ptr", "*{dtype}:16"), ("h_ptr", "*{dtype}:16"),
    ("M", "i32"), ("K", "i32:16"), ("R", "i32:16"), ("N", "i32:16"), ("n_per_prog", "i32:16"),
    ("has_bias", "i32"), ("store_h", "i32"),
    ("x_inner", "i32"), ("sx_outer", "i64:16"), ("sx_inner", "i64:16"), ("sv_r", "i64:16"),
    ("su_n", "i64:16"), ("sy_m", "i64:16"), ("sh_m", "i64:16"),
)

# ---- decode forward (M <= 64): partials over (R block, K range), then y over N blocks ----------
# The two kernels run one after the other in every call: built for the same (dtype, BLOCK_M), so
# the op can check the first; the second has BLOCK_N values of its own (_decode_out_blocks).
_DECODE_KEYS = {"dtype": _DTYPES, "BLOCK_M": (16, 64)}


def _decode_partial_constexprs(key: dict) -> dict:
    small = key["BLOCK_M"] == 16
    if _wide(key):
        # BLOCK_R 16: twice the programs of BLOCK_R 32 for the same K split, so as many programs
        # read V with half the partials for the second kernel to read. H200, bf16, in = out = 4096,
        # r256, graph of 32 layers: M16 6.0 -> 5.6 us, M64 10.6 -> 9.5 us (against BLOCK_R 32 at the
        # best split of each). BLOCK_K 256 rather than 128 at M16: 5.6 against 6.1 us; 512: 6.0 us.
        return {"BLOCK_M": key["BLOCK_M"], "BLOCK_K": 256 if small else 128, "BLOCK_R": 16}
    return {"BLOCK_M": key["BLOCK_M"], "BLOCK_K": 64 if small else 32, "BLOCK_R": 32}


def _decode_out_blocks(key: dict) -> tuple:
    """The BLOCK_N values built for a (dtype, BLOCK_M): csrc/ops/low_rank.cpp (decode_out_block)
    takes the smallest whose grid fits in one wave of programs, else the largest. Each program
    reads all of h's [M, R] slice and one [BLOCK_N, R] tile of U, so fewer, wider programs read h
    less often, and more, narrower ones spread U over more SMs. H200, bf16, graph of 32 layers,
    BLOCK_M 64 (M32 / M64), BLOCK_N 32 / 64 / 128: out 4096 (128 / 64 / 32 programs), r256 7.2 / 8.8
    / 9.7 and 7.8 / 8.8 / 9.9 us, r512 10.8 / 11.4 / 14.7 and 11.6 / 12.7 / 14.5 us; out 11008 (344 /
    172 / 86 programs), r256 13.1 / 11.3 / 10.4 and 14.0 / 12.2 / 10.5 us. At BLOCK_M 16, 32 rather
    than 64 lost at out 4096 (M16 r256 5.6 -> 6.2 us): 64 only. fp32 (the accuracy path): 32."""
    if not _wide(key):
        return (32,)
    return (64,) if key["BLOCK_M"] == 16 else (32, 64, 128)


def _decode_out_constexprs(key: dict) -> dict:
    # BLOCK_R: the U columns a program loads before it waits for the partials. All of R <= 256, so
    # that the whole read of U overlaps the first kernel; at M = 64 with 8 warps (_decode_out_warps),
    # for the registers of the [64, 256] fp32 sum of partials.
    # KS_UNROLL: partial slices loaded before they are summed (a loop that loads one and adds it
    # waits out L2's latency once per slice). 4 at M = 16: graph of 32 layers, M16 6.4 -> 6.0 us
    # (BLOCK_R 32 partials); 8 with 8 warps: 5.9 us; at M = 64 the reduce kernel leaves one slice.
    if _wide(key):
        return {"BLOCK_M": key["BLOCK_M"], "BLOCK_R": 256, "BLOCK_N": key["BLOCK_N"],
                "KS_UNROLL": 4 if key["BLOCK_M"] == 16 else 1}
    return {"BLOCK_M": key["BLOCK_M"], "BLOCK_R": 64, "BLOCK_N": key["BLOCK_N"], "KS_UNROLL": 1}


def _decode_out_warps(key: dict) -> int:
    return 8 if _wide(key) and key["BLOCK_M"] == 64 else 4


_DECODE_PARTIAL_PARAMS = (
    ("x_ptr", "*{dtype}:16"), ("v_ptr", "*{dtype}:16"), ("u_ptr", "*{dtype}:16"), ("part_ptr", "*fp32:16"),
    ("M", "i32"), ("K", "i32:16"), ("R", "i32:16"), ("N", "i32:16"), ("k_split", "i32:16"),
    ("x_inner", "i32"), ("sx_outer", "i64:16"), ("sx_inner", "i64:16"), ("sv_r", "i64:16"), ("su_n", "i64:16"),
)

_DECODE_OUT_PARAMS = (
    ("part_ptr", "*fp32:16"), ("u_ptr", "*{dtype}:16"), ("bias_ptr", "*{dtype}:16"),
    ("y_ptr", "*{dtype}:16"), ("h_ptr", "*{dtype}:16"),
    ("M", "i32"), ("R", "i32:16"), ("N", "i32:16"), ("n_ksplit", "i32"), ("has_bias", "i32"),
    ("store_h", "i32"), ("su_n", "i64:16"), ("sy_m", "i64:16"), ("sh_m", "i64:16"),
)

# ---- decode reduce: the partials summed once, between the two decode kernels -------------------
# Built for the decode kernels' BLOCK_M values that take it (the op checks): at BLOCK_M 64 each
# program of the output kernel would otherwise read parts * 64 KB of partials (r256). H200, bf16,
# in = out = 4096, r256, graph of 32 layers: M64 9.5 -> 8.8 us, M32 8.3 -> 8.5; r512 M64 16.1 ->
# 12.6 us. At M16 the extra launch costs more than it saves (5.6 -> 7.0 us).
_DECODE_REDUCE_PARAMS = (
    ("part_ptr", "*fp32:16"), ("sum_ptr", "*fp32:16"), ("size", "i32"), ("n_ksplit", "i32"),
)


def _decode_reduce_constexprs(key: dict) -> dict:
    # 512 fp32 per program (one 16-byte load per thread and slice): 32 programs at M64, r256.
    return {"BLOCK": 512, "KS_UNROLL": 4}


# ---- C = A @ B.T (+ bias) -----------------------------------------------------------------------

def _gemm_constexprs(key: dict) -> dict:
    if _wide(key):
        return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}
    return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}


_GEMM_PARAMS = (
    ("a_ptr", "*{dtype}"), ("b_ptr", "*{dtype}"), ("bias_ptr", "*{dtype}"), ("c_ptr", "*{dtype}"),
    ("M", "i32"), ("N", "i32"), ("K", "i32"), ("has_bias", "i32"),
    ("a_inner", "i32"), ("sa_outer", "i64"), ("sa_inner", "i64"), ("sb_n", "i64"), ("sc_m", "i64"),
)

# ---- weight gradients dU, dV (+ dbias) in one launch --------------------------------------------

def _wgrad_constexprs(key: dict) -> dict:
    if _wide(key):
        return {"BLOCK_P": 128, "BLOCK_Q": 128, "BLOCK_M": 64}
    return {"BLOCK_P": 64, "BLOCK_Q": 64, "BLOCK_M": 32}


_WGRAD_PARAMS = (
    ("g_ptr", "*{dtype}"), ("h_ptr", "*{dtype}"), ("dh_ptr", "*{dtype}"), ("x_ptr", "*{dtype}"),
    ("du_ptr", "*{dtype}"), ("dv_ptr", "*{dtype}"), ("db_ptr", "*{dtype}"),
    ("M", "i32"), ("N", "i32"), ("R", "i32"), ("K", "i32"), ("has_bias", "i32"),
    ("g_inner", "i32"), ("sg_outer", "i64"), ("sg_inner", "i64"),
    ("h_inner", "i32"), ("sh_outer", "i64"), ("sh_inner", "i64"), ("sdh_m", "i64"),
    ("x_inner", "i32"), ("sx_outer", "i64"), ("sx_inner", "i64"), ("sdu_n", "i64"), ("sdv_r", "i64"),
)


def _pointers(params: tuple) -> tuple:
    return tuple(name for name, ty in params if ty.startswith("*"))


KERNELS = [
    KernelSpec(
        name="low_rank_fused",
        function="low_rank_fused_kernel",
        params=_FUSED_PARAMS,
        # R <= 128 or <= 256 on chip; fp32 (FMA products, the accuracy path) keeps R <= 128 only.
        keys={"dtype": _DTYPES, "BLOCK_R": (128, 256)},
        include=lambda key: _wide(key) or key["BLOCK_R"] == 128,
        constexprs=_fused_constexprs,
        num_warps=lambda key: 8 if _wide(key) and key["BLOCK_R"] == 256 else 4,
        num_stages=lambda key: 3 if _wide(key) and key["BLOCK_R"] <= 128 else 2,
    ),
    KernelSpec(
        name="low_rank_decode_partial",
        function="low_rank_decode_partial_kernel",
        params=_DECODE_PARTIAL_PARAMS,
        keys=_DECODE_KEYS,
        constexprs=_decode_partial_constexprs,
        num_warps=4,
        # 5 stages: a program walks a few BLOCK_K tiles of K (csrc/ops/low_rank.cpp decode_k_split:
        # 4 at in 4096, r256), about one program per SM, and after its wait the loop is bound by L2
        # round trips, not bandwidth; with 5 stages the first 4 tiles' loads are in flight before
        # the first dot. H200, bf16, graph of 32 layers, against 3 stages in the same run, M16 / M32
        # / M64 (us): r512 4096 x 4096 9.12 / 10.79 / 11.62 -> 8.86 / 10.58 / 11.56; in 4096, out
        # 11008, r256 7.39 / 10.34 / 10.47 -> 6.98 / 9.72 / 10.24; r256 4096 x 4096 unchanged
        # (5.55 / 7.27 / 7.70). 6 stages lost at M32-64 (r256 M64 8.69), 8 warps everywhere (M16
        # 6.23). The build drops stages where the tiles would pass 99 KB (sm_80, sm_120).
        num_stages=5,
    ),
    KernelSpec(
        name="low_rank_decode_out",
        function="low_rank_decode_out_kernel",
        params=_DECODE_OUT_PARAMS,
        keys={**_DECODE_KEYS, "BLOCK_N": (32, 64, 128)},
        include=lambda key: key["BLOCK_N"] in _decode_out_blocks(key),
        constexprs=_decode_out_constexprs,
        num_warps=_decode_out_warps,
        num_stages=3,
    ),
    KernelSpec(
        name="low_rank_decode_reduce",
        function="low_rank_decode_reduce_kernel",
        params=_DECODE_REDUCE_PARAMS,
        keys={"BLOCK_M": (64,)},
        constexprs=_decode_reduce_constexprs,
        num_warps=4,
        num_stages=1,
    ),
    KernelSpec(
        name="low_rank_gemm_nt",
        function="gemm_nt_kernel",
        params=_GEMM_PARAMS,
        keys={"dtype": _DTYPES},
        constexprs=_gemm_constexprs,
        num_warps=lambda key: 8 if _wide(key) else 4,
        num_stages=lambda key: 3 if _wide(key) else 2,
        aligned=_pointers(_GEMM_PARAMS) + ("N", "K", "sa_outer", "sa_inner", "sb_n", "sc_m"),
    ),
    KernelSpec(
        name="low_rank_wgrad",
        function="low_rank_wgrad_kernel",
        params=_WGRAD_PARAMS,
        keys={"dtype": _DTYPES},
        constexprs=_wgrad_constexprs,
        num_warps=lambda key: 8 if _wide(key) else 4,
        num_stages=lambda key: 3 if _wide(key) else 2,
        aligned=_pointers(_WGRAD_PARAMS) + ("N", "R", "K", "sg_outer", "sg_inner", "sh_outer",
                                            "sh_inner", "sdh_m", "sx_outer", "sx_inner", "sdu_n", "sdv_r"),
    ),
]
