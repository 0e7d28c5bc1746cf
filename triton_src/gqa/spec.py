"""The GQA kernel specializations the build compiles (read by triton_src.aot)."""

from triton_src.aot.spec import KernelSpec

# Tile bytes per program and warps, from the H200 sweep (benchmarks/tune_gqa.py, results in
# benchmarks/results/gqa.md): expand is fastest with 16 KB tiles and 4 warps; the group sum, which
# reads n_rep tiles per output tile, with 8 KB tiles and 8 warps (the same for bf16, 3.90 against
# 2.52 TB/s for fp32). The C++ op picks BLOCK_D from the head dim (csrc/ops/gqa.cpp).
_EXPAND_TILE_BYTES = 16384
_REDUCE_TILE_BYTES = 8192
_ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


def _constexprs(tile_bytes: int):
    def constexprs(key: dict) -> dict:
        block_d = key["BLOCK_D"]
        return {"BLOCK_N": tile_bytes // (block_d * _ELEMENT_BYTES[key["dtype"]]), "BLOCK_D": block_d}

    return constexprs


def _params(src: str) -> tuple:
    return (
        (f"{src}_ptr", "*{dtype}"), ("out_ptr", "*{dtype}"),
        ("HKV", "i32"), ("N", "i32"), ("D", "i32"), ("n_rep", "i32"),
        (f"s{src[0]}_b", "i64"), (f"s{src[0]}_h", "i64"), (f"s{src[0]}_n", "i64"),
        ("so_b", "i64"), ("so_h", "i64"), ("so_n", "i64"),
    )


def _aligned(src: str) -> tuple:
    # Row starts 16-byte aligned and D a multiple of 16 let Triton use 16-byte loads and stores.
    return (f"{src}_ptr", "out_ptr", "D", f"s{src[0]}_b", f"s{src[0]}_h", f"s{src[0]}_n",
            "so_b", "so_h", "so_n")


_KEYS = {"dtype": ("fp16", "bf16", "fp32"), "BLOCK_D": (32, 64, 128)}


def _spec(name: str, function: str, src: str, tile_bytes: int, num_warps: int) -> KernelSpec:
    return KernelSpec(name=name, function=function, params=_params(src), keys=_KEYS,
                      constexprs=_constexprs(tile_bytes), num_warps=num_warps, num_stages=1,
                      aligned=_aligned(src))


KERNELS = [
    _spec("gqa_expand", "gqa_expand_kernel", "x", _EXPAND_TILE_BYTES, num_warps=4),
    _spec("gqa_reduce", "gqa_reduce_kernel", "g", _REDUCE_TILE_BYTES, num_warps=8),
]
