"""The AOT build tool: declarations expand to variants, the cache is keyed by content, and the
generated dispatcher matches the declaration."""

import dataclasses
from pathlib import Path

import pytest

from triton_src.aot import codegen, compiler
from triton_src.aot.__main__ import parse_archs
from triton_src.aot.spec import KernelSpec

ROOT = Path(__file__).resolve().parents[2]


def toy_spec(**overrides) -> KernelSpec:
    fields = dict(name="toy_copy", function="toy", params=(("x", "*{dtype}"), ("n", "i32")),
                  keys={"dtype": ("fp16", "fp32"), "BLOCK": (64, 128)},
                  constexprs=lambda key: {"BLOCK": key["BLOCK"]}, aligned=("x",))
    fields.update(overrides)
    return KernelSpec(**fields)


def test_variants_are_the_product_of_keys_aligned_first():
    variants = toy_spec().variants()
    assert len(variants) == 2 * 2 * 2
    assert [v.aligned for v in variants[:2]] == [True, False]
    assert variants[0].name == "toy_copy_fp16_BLOCK64_a16"
    assert variants[0].param_types() == [("x", "*fp16:16"), ("n", "i32")]
    assert variants[1].param_types() == [("x", "*fp16"), ("n", "i32")]
    assert len(toy_spec(include=lambda k: k["BLOCK"] == 64).variants()) == 4


def test_spec_rejects_bad_declarations():
    with pytest.raises(ValueError, match="aligned names unknown parameters"):
        toy_spec(aligned=("y",))
    with pytest.raises(ValueError, match="unsupported parameter type"):
        toy_spec(params=(("x", "u8"),))
    with pytest.raises(ValueError, match="dtype names"):
        toy_spec(keys={"dtype": ("int8",)})


def test_max_stages_caps_the_pipeline_per_architecture():
    v = toy_spec(num_stages=lambda key: 3, max_stages={100: 1}).variants()[0]
    tasks = {arch: compiler.make_task("toy", ROOT / "triton_src" / "gqa", v, arch) for arch in (90, 100)}
    assert (tasks[90].num_stages, tasks[100].num_stages) == (3, 1)


def test_kernel_source_file_and_architectures():
    """A kernel in its own file (Gluon) compiles from it, and one written for some architectures is
    built for those alone: the dispatcher has no entry for it elsewhere (an empty table, which must
    still compile) and says so through <name>_runs_on."""
    spec = toy_spec(source="toy_gluon.py", archs=(90,))
    v = spec.variants()[0]
    assert compiler.make_task("toy", ROOT / "triton_src" / "gqa", v, 90).kernel_file.endswith("gqa/toy_gluon.py")
    assert compiler.make_task("toy", ROOT / "triton_src" / "gqa", toy_spec().variants()[0], 90).kernel_file.endswith(
        "gqa/kernels.py")
    assert [spec.builds_for(a) for a in (80, 90, 100)] == [False, True, False]
    assert all(toy_spec().builds_for(a) for a in (80, 90, 100))
    assert "bool toy_copy_runs_on(const ToyCopyKey& key, int device);" in codegen._header("toy", [spec])
    source = codegen._source("toy", [spec], {})
    assert "const std::array<ToyCopyEntry, 0> k_toy_copy = {{\n}};" in source
    assert "return runtime::runs_on(e.variant, device);" in source


def test_parse_archs():
    assert parse_archs("80;90") == [80, 90]
    assert parse_archs("sm_90a, 80") == [80, 90]
    with pytest.raises(SystemExit, match="not an architecture"):
        parse_archs("hopper")


def test_cache_key_covers_source_spec_arch_and_triton():
    v = toy_spec().variants()[0]
    task = compiler.make_task("toy", ROOT / "triton_src" / "gqa", v, 90)
    key = compiler.cache_key(task, "src1", "3.8.0")
    assert key == compiler.cache_key(task, "src1", "3.8.0")
    assert key != compiler.cache_key(task, "src2", "3.8.0")
    assert key != compiler.cache_key(task, "src1", "3.6.0")
    assert key != compiler.cache_key(dataclasses.replace(task, arch=80), "src1", "3.8.0")
    assert key != compiler.cache_key(dataclasses.replace(task, num_warps=8), "src1", "3.8.0")


def test_source_hash_ignores_the_spec(tmp_path):
    (tmp_path / "kernels.py").write_text("a = 1\n")
    (tmp_path / "spec.py").write_text("b = 1\n")
    h = compiler.source_hash(tmp_path)
    (tmp_path / "spec.py").write_text("b = 2\n")
    assert compiler.source_hash(tmp_path) == h
    (tmp_path / "kernels.py").write_text("a = 2\n")
    assert compiler.source_hash(tmp_path) != h


def test_source_hash_covers_the_common_helpers(tmp_path):
    op_dir, common = tmp_path / "op", tmp_path / "common"
    op_dir.mkdir()
    common.mkdir()
    (op_dir / "kernels.py").write_text("a = 1\n")
    (common / "helpers.py").write_text("c = 1\n")
    h = compiler.source_hash(op_dir, common)
    (common / "helpers.py").write_text("c = 2\n")
    assert compiler.source_hash(op_dir, common) != h


def test_generated_header_declares_typed_entry_points():
    header = codegen._header("toy", [toy_spec()])
    assert "struct ToyCopyKey {\n  c10::ScalarType dtype;\n  int64_t BLOCK;\n};" in header
    assert ("void toy_copy(const ToyCopyKey& key, const runtime::LaunchConfig& config, "
            "const void* x, int64_t n);") in header


def test_constexprs_and_warps_may_differ_per_architecture(tmp_path):
    """A tile per architecture: constexprs and num_warps see the arch being compiled, each cubin's
    constexprs go into the dispatcher beside it, and <name>_constexprs(key, device) returns those of
    the cubin that runs on the device; names that differ between architectures fail the build."""
    spec = toy_spec(constexprs=lambda key: {"BLOCK": key["BLOCK"], "TILE": 128 if key["arch"] == 90 else 32},
                    num_warps=lambda key: 8 if key["arch"] == 90 else 4, aligned=())
    v = spec.variants()[0]
    tasks = {arch: compiler.make_task("toy", ROOT / "triton_src" / "gqa", v, arch) for arch in (80, 90)}
    assert dict(tasks[80].constexprs) == {"BLOCK": 64, "TILE": 32} and tasks[80].num_warps == 4
    assert dict(tasks[90].constexprs) == {"BLOCK": 64, "TILE": 128} and tasks[90].num_warps == 8
    images = [compiler.Compiled(tasks[a], tmp_path / f"{a}.cubin", "toy", 0, tasks[a].num_warps, 0, False)
              for a in (80, 90)]
    for img in images:
        img.cubin.write_bytes(b"cubin")
    assert "int64_t TILE;" in codegen._header("toy", [spec])
    source = codegen._source("toy", [spec], {v: images})
    assert f"const ToyCopyConstexprs k_{v.name}_constexprs[] = {{\n    {{64, 32}},\n    {{64, 128}}}};" in source
    assert "return e.constexprs[runtime::image_index(e.variant, device)];" in source
    assert "ToyCopyConstexprs toy_copy_constexprs(const ToyCopyKey& key, int device) {" in source
    odd = compiler.Compiled(dataclasses.replace(tasks[90], constexprs=(("BLOCK", 64),)), images[1].cubin, "toy", 0,
                            8, 0, False)
    with pytest.raises(ValueError, match=r"constexprs \['BLOCK'\] differ from toy_copy's \['BLOCK', 'TILE'\]"):
        codegen._source("toy", [spec], {v: [images[0], odd]})


def test_compile_is_cached(tmp_path):
    pytest.importorskip("triton")
    from triton_src.aot import probe

    first = probe.probe((90,), tmp_path, ROOT)
    assert first == {90: None}
    task = probe._task(90)
    results = compiler.compile_tasks([task], {"probe": "x"}, tmp_path, 1, ROOT, quiet=True)
    assert not results[0].cached and results[0].cubin.stat().st_size > 0
    again = compiler.compile_tasks([task], {"probe": "x"}, tmp_path, 1, ROOT, quiet=True)
    assert again[0].cached and again[0].cubin == results[0].cubin


def test_failing_kernel_fails_naming_it(tmp_path):
    pytest.importorskip("triton")
    bad = tmp_path / "kernels.py"
    bad.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\n"
                   "def broken(ptr):\n    tl.store(ptr, undefined_name)\n")
    task = compiler.Task(op="bad", variant_name="bad_variant", kernel_file=str(bad), function="broken",
                         params=(("ptr", "*fp32"),), constexprs=(), num_warps=1, num_stages=1, arch=90)
    with pytest.raises(RuntimeError, match="failed to compile bad_variant for sm_90"):
        compiler.compile_tasks([task], {"bad": "x"}, tmp_path, 1, ROOT, quiet=True)


def test_ptxas_options_reach_ptxas_and_the_cache_key(tmp_path):
    """KernelSpec.ptxas_options: keyed in the cache, and passed to ptxas (a flag it does not know
    fails the build; one it knows builds)."""
    pytest.importorskip("triton")
    from triton_src.aot import probe

    variant = toy_spec(ptxas_options=lambda key: "-O1" if key["arch"] == 90 else "").variants()[0]
    assert (variant.ptxas_options(90), variant.ptxas_options(80)) == ("-O1", "")
    task = probe._task(90)
    assert task.ptxas_options == ""
    unknown, o1 = (dataclasses.replace(task, ptxas_options=flag) for flag in ("--no-such-ptxas-flag", "-O1"))
    assert len({compiler.cache_key(t, "x", "3.8.0") for t in (task, unknown, o1)}) == 3
    with pytest.raises(RuntimeError, match=r"(?s)failed to compile probe for sm_90.*Unknown option .-no-such-ptxas"):
        compiler.compile_tasks([unknown], {"probe": "x"}, tmp_path, 1, ROOT, quiet=True)
    assert compiler.compile_tasks([o1], {"probe": "x"}, tmp_path, 1, ROOT, quiet=True)[0].cubin.stat().st_size > 0


def _cached(tmp_path, task, shared):
    """A cache entry for `task` whose block takes `shared` bytes (compile_tasks then compiles nothing)."""
    key = compiler.cache_key(task, "src", compiler.triton_version())
    (tmp_path / f"{key}.cubin").write_bytes(f"cubin {task.num_stages}".encode())
    (tmp_path / f"{key}.json").write_text(
        f'{{"function": "big", "shared": {shared}, "num_warps": 4, "scratch_args": 0}}')


def test_shared_memory_over_the_limit_takes_fewer_stages_or_fails(tmp_path):
    """A cubin whose block needs more shared memory than its architecture allows is built again with
    one pipeline stage fewer until it fits (Triton compiles it; only a launch would fail), and the
    build fails, naming the variant, where one stage does not fit. Fed through the cache."""
    pytest.importorskip("triton")
    task = {arch: compiler.Task(op="big", variant_name=f"big_{arch}", kernel_file="k.py", function="big",
                                params=(("ptr", "*fp32"),), constexprs=(), num_warps=4, num_stages=3, arch=arch)
            for arch in (80, 90)}
    _cached(tmp_path, task[90], 232448)  # at sm_90's limit: kept
    for stages, shared in ((3, 140000), (2, 101377), (1, 60000)):  # over sm_80's 99 KB until one stage
        _cached(tmp_path, dataclasses.replace(task[80], num_stages=stages), shared)
    tasks = [task[80], task[90]]
    results = compiler.compile_tasks(tasks, {"big": "src"}, tmp_path, 1, ROOT, quiet=True)
    assert [r.task for r in results] == tasks and [r.shared for r in results] == [60000, 232448]
    assert results[0].cubin.read_bytes() == b"cubin 1"
    _cached(tmp_path, dataclasses.replace(task[80], num_stages=1), 101377)
    with pytest.raises(RuntimeError, match=r"big_80 for sm_80 needs 101377 bytes of shared memory per block with "
                                           r"one pipeline stage, over the 101376"):
        compiler.compile_tasks(tasks, {"big": "src"}, tmp_path, 1, ROOT, quiet=True)


def test_stages_constexpr_takes_the_stage_count_and_fits_shared_memory(tmp_path):
    """A kernel that pipelines its own copies (Gluon) gets its stage count as a constexpr, which the
    build lowers like Triton's num_stages where a block does not fit (Triton's pipeliner gets one
    stage). Fed through the cache, as above."""
    pytest.importorskip("triton")
    v = toy_spec(num_stages=lambda key: 2, stages_constexpr="STAGES").variants()[0]
    assert "STAGES" not in v.constexprs(90)
    task = compiler.make_task("toy", ROOT / "triton_src" / "gqa", v, 90)
    assert (task.stages_constexpr, task.num_stages) == ("STAGES", 2)
    assert compiler._signature(["x", "n", "BLOCK", "STAGES"], task) == "*fp16:16, i32, 64, 2"
    plain = compiler.make_task("toy", ROOT / "triton_src" / "gqa", toy_spec(num_stages=lambda key: 2).variants()[0], 90)
    assert compiler.cache_key(task, "src", "t") != compiler.cache_key(plain, "src", "t")
    _cached(tmp_path, task, 233472)  # over sm_90's 232448 with two stages
    _cached(tmp_path, dataclasses.replace(task, num_stages=1), 225280)
    results = compiler.compile_tasks([task], {"toy": "src"}, tmp_path, 1, ROOT, quiet=True)
    assert results[0].shared == 225280 and results[0].cubin.read_bytes() == b"cubin 1"
