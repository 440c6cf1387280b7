"""benchmarks/device.py (issue #52 item 4): its --tiny run on the CPU measures every section for each encoding in a
subprocess of its own, writes one JSON line a figure and prints the tables; the cap stops an encoding and keeps
what it measured; the MFU count is PaLM's; bad input is refused in one line."""
import importlib.util
import json
import os

import pytest

from tests.conftest import ROOT, run_py
from tests.inproc import one_line_error


def device_module():
    spec = importlib.util.spec_from_file_location("device_bench", os.path.join(ROOT, "benchmarks", "device.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lines(out):
    return [json.loads(line) for line in (out / "device.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_tiny_run_measures_every_section_per_encoding(tmp_path):
    r = run_py("benchmarks/device.py", "--tiny", "--encodings=rope,alibi", f"--out={tmp_path}", timeout=600)
    rows = lines(tmp_path)
    assert rows[0]["device"] == "cpu" and rows[0]["args"]["decode_batches"] == [1, 4]
    for name in ("rope", "alibi"):
        mine = {(x["section"], x["case"]): x for x in rows if x.get("encoding") == name}
        assert mine["process", ""]["exit"] == 0
        for B in (1, 4):
            d = mine["decode", f"batch {B}"]
            assert d["graph"] == "unmeasured (no CUDA)" and d["eager_same"] and d["nanogpt_same"]
            assert min(d[f"{m}_tokens_per_s"] for m in ("eager", "static", "nanogpt")) > 0
        for block, batch in ((64, 16), (128, 8)):
            t = mine["train", f"block {block}"]
            assert t["batch"] == batch and t["mfu"] == "unmeasured (no CUDA)" and t["peak_bytes"] > 2 ** 20
            assert t["tokens_per_s"] == pytest.approx(batch * block / t["s_per_step"])
        assert mine["eval", "512 tokens"]["s"] > 0
    for header in ("\ndecode\n", "\ntrain\n", "\neval\n", "static tok/s", "unmeasured (no CUDA)"):
        assert header in r.stdout
    assert "  rope            decode  batch 1" in r.stdout   # printed as measured, before the tables


@pytest.mark.slow
def test_an_encoding_past_its_cap_is_stopped_and_keeps_what_it_measured(tmp_path):
    run_py("benchmarks/device.py", "--tiny", "--encodings=rope", "--sections=decode,train", "--cap=10",
           "--train_blocks=64,64,64,64,64,64,64,64,64,64,64,64", "--steps=200", f"--out={tmp_path}", timeout=120)
    rows = lines(tmp_path)
    assert [x["case"] for x in rows if x.get("section") == "decode"] == ["batch 1", "batch 4"]
    assert "stopped at the cap (10 s)" in next(x["exit"] for x in rows if x.get("section") == "process")
    assert len([x for x in rows if x.get("section") == "train"]) < 12


def test_model_flops_per_token_are_palms_count():
    """6N + 12 L H Q T (arXiv:2204.02311, Appendix B), by hand for a 2-layer, 2-head, 64-wide model at T = 128."""
    d = device_module()
    model = d.model_for(d.parse_args(["--tiny"]), "rope", 128)
    n = model.get_num_params()
    assert n == 65 * 64 + 2 * (4 * 64 * 64 + 8 * 64 * 64 + 2 * 64) + 64   # tied embedding, no biases, norms' gains
    assert d.flops_per_token(model, 128) == 6 * n + 12 * 2 * 2 * 32 * 128


@pytest.mark.parametrize("argv, message", [
    (["--sections=decode,speed"], "valid sections are decode, train, eval"),
    (["--encodings=rope,ropee"], "unknown encoding 'ropee'"),
    (["--decode_batches=0"], "--decode_batches must be whole numbers > 0"),
    (["--budget=0"], "--budget must be > 0"),
    (["--dtype=float16"], "--dtype must be auto, float32 or bfloat16"),
])
def test_device_bench_bad_input(argv, message, capsys):
    assert message in one_line_error(device_module().main, ["--tiny", *argv], capsys)
