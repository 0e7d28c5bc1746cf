"""The end-to-end benchmark's code paths at a tiny size on the CPU (the real run needs a GPU)."""

import json

import pytest
import torch

from neuralops.bench import e2e


def test_smoke_run_writes_every_variant(tmp_path, capsys):
    out_json, out_md = tmp_path / "e2e.json", tmp_path / "e2e.md"
    assert e2e.main(["--smoke", "--json", str(out_json), "--markdown", str(out_md)]) == 0
    result = json.loads(out_json.read_text())
    assert [r["variant"] for r in result["rows"]] == list(e2e.VARIANTS)
    for row in result["rows"]:
        assert not row["error"] and row["params"] > 0
        assert row["train_step_ms"] > 0 and row["decode_tokens_per_s"] > 0 and row["prefill_ms"] > 0
    params = {r["variant"]: r["params"] for r in result["rows"]}
    assert params["pytorch"] == params["neuralops repeat_kv"] == params["neuralops linear"]
    assert params["neuralops linear + low-rank"] < params["neuralops linear"]
    table = out_md.read_text()
    assert "| neuralops linear + low-rank |" in table and "decode tokens/s" in table


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_without_cuda_it_says_so(capsys):
    assert e2e.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
