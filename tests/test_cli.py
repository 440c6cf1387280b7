"""One command-line convention (cli.py) for train, sample, evaluate, compare, bench and plots;
sample.py's compile, dtype, window default and tokenizer; evaluate.py's report rule; and the
import rules: no CLI script imports another, positional/ imports nothing of the application."""
import ast
import dataclasses
import glob
import os
import pickle
import re

import pytest
import torch

import bench
from training import checkpoint
from training import cli
import compare
from training import cpu_threads
import generate as decode
import evaluate
from measure import plots
import sample
from training import config
from training.config import load_config
from tests.conftest import ROOT, TINY_ARGS, run_py, tiny_gpt
from tests.inproc import copy_run, one_line_error, snapshot

CLIS = ("train", "sample", "evaluate", "compare", "bench", "plots")


@pytest.mark.parametrize("spelling, value", [("True", True), ("true", True), ("1", True),
                                             ("False", False), ("false", False), ("0", False)])
def test_boolean_spellings_are_read_the_same_everywhere(spelling, value):
    assert load_config([f"--wandb_log={spelling}"]).wandb_log is value
    assert sample.parse_args([f"--compile={spelling}"])[0]["compile"] is value
    assert evaluate.parse_args(["out", f"--wandb_log={spelling}"])[1]["wandb_log"] is value
    assert compare.parse([f"--plots={spelling}", "--only=rope"])[0]["plots"] is value
    assert bench.parse_args([f"--compile={spelling}"]).compile is value


def test_a_misspelled_boolean_is_refused_in_one_line_by_every_script(tiny_run, tmp_path, capsys):
    import train
    out = copy_run(tiny_run, tmp_path / "run")
    before = snapshot(checkpoint.path_in(out))
    cases = [(train.main, [f"--out_dir={out}", "--wandb_log=ture"], "config key 'wandb_log'"),
             (sample.main, [f"--out_dir={out}", "--compile=ture"], "--compile"),
             (evaluate.main, [str(out), "--wandb_log=ture"], "--wandb_log"),
             (compare.main, ["--plots=ture"], "compare key 'plots'"),
             (bench.main, ["--compile=ture"], "--compile"),
             (plots.main, ["--head_dim=ten"], "--head_dim wants an integer, got 'ten'")]
    for main, argv, who in cases:
        err = one_line_error(main, argv, capsys)
        assert who in err and ("wants True or False (or true/false/1/0), got 'ture'" in err or "ten" in err), err
    assert one_line_error(sample.main, [f"--out_dir={out}", "--compile"], capsys) == \
        "error: --compile needs a value: --compile=True"
    assert snapshot(checkpoint.path_in(out)) == before
    assert not glob.glob(str(out / "extrapolation.*"))


def test_device_and_dtype_default_to_auto_everywhere():
    assert sample.DEFAULTS["device"] == sample.DEFAULTS["dtype"] == "auto"
    assert evaluate.OPTIONS["device"] == evaluate.OPTIONS["dtype"] == "auto"
    assert compare.DEFAULTS["eval_device"] == compare.DEFAULTS["eval_dtype"] == "auto"
    assert bench.options()["device"] == bench.options()["dtype"] == "auto"
    cfg = load_config([])
    assert cfg.device == cfg.dtype == "auto"
    assert cli.pick_dtype("auto", "cpu") == "float32" and cli.pick_device("cpu") == "cpu"


def test_sample_dtype_names(tiny_run, capsys):
    err = one_line_error(sample.main, [f"--out_dir={tiny_run}", "--dtype=fp16"], capsys)
    assert err == "error: dtype must be auto, float32, bfloat16, float16, got 'fp16'"
    sample.main([f"--out_dir={tiny_run}", "--start=All:", "--max_new_tokens=5", "--dtype=bfloat16", "--device=cpu"])
    assert capsys.readouterr().out.startswith("All:")


def generated(out_dir, capsys, *extra):
    capsys.readouterr()
    sample.main([f"--out_dir={out_dir}", "--start=All:", "--max_new_tokens=12", "--device=cpu", *extra])
    return capsys.readouterr()


def test_compile_runs_generation_through_the_compiled_step(tiny_run, capsys, monkeypatch):
    calls = []

    def fake_compile(fn, **kw):      # stands in for torch.compile: counts the calls of what it returns
        def compiled(*args, **kwargs):
            calls.append(args[1].shape)                                # decode_step(model, idx, pos, cache, n_slots)
            return fn(*args, **kwargs)
        return compiled

    eager = generated(tiny_run, capsys)
    monkeypatch.setattr(torch, "compile", fake_compile)
    got = generated(tiny_run, capsys, "--compile=True")
    assert got.out == eager.out
    # the 4-token prompt is prefilled eagerly, then one compiled step per new token but the last
    assert calls == [(1, 1)] * 11
    assert "compiled static step, 11 compiled steps" in got.err.splitlines()[-1]
    assert "compiled" not in eager.err


@pytest.mark.slow
def test_aot_samples_the_eager_text_through_the_ahead_of_time_step(tiny_run, capsys):
    """--aot=True: the same text as the eager static step, every new token but the last by the compiled package."""
    eager = generated(tiny_run, capsys)
    got = generated(tiny_run, capsys, "--aot=True")
    assert got.out == eager.out
    assert "compiled static step, 11 compiled steps" in got.err.splitlines()[-1]


def test_sample_ends_with_tokens_per_second(tiny_run, capsys):
    last = generated(tiny_run, capsys).err.strip().splitlines()[-1]
    assert re.fullmatch(r"\[12 tokens in [\d.]+ s: [\d.]+ tokens/s; static step; 1 thread\(s\): OMP_NUM_THREADS\]",
                        last), last


def test_sample_picks_its_decoding_threads(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert cpu_threads.choose(0, "cpu", default=cpu_threads.DECODE_THREADS) == \
            f"{cpu_threads.DECODE_THREADS} thread(s): the default here, --threads=N to choose"
        assert torch.get_num_threads() == cpu_threads.DECODE_THREADS
        assert cpu_threads.choose(2, "cpu", default=1) == "2 thread(s): --threads" and torch.get_num_threads() == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert cpu_threads.choose(0, "cpu", default=2) == "1 thread(s): OMP_NUM_THREADS"
        assert cpu_threads.choose(0, "cuda") is None
    finally:
        torch.set_num_threads(before)


def char_vocabulary(tiny_data):
    with open(tiny_data / "tiny" / "meta.pkl", "rb") as f:
        return set(pickle.load(f)["itos"].values())


def test_sample_decodes_the_char_vocabulary_from_another_folder(tiny_run, tiny_data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open(tiny_data / "tiny" / "meta.pkl", "rb") as f:
        assert checkpoint.load(tiny_run)["tokenizer"]["itos"] == pickle.load(f)["itos"]
    text = generated(tiny_run, capsys).out
    assert text.startswith("All:") and set(text.rstrip("\n-")) <= char_vocabulary(tiny_data)


def old_checkpoint(src, dst, data_dir):
    """A copy of checkpoint src as older train.py wrote it: no tokenizer, data_dir as given."""
    ckpt = checkpoint.load(src)
    del ckpt["tokenizer"]
    ckpt["config"]["data_dir"] = data_dir
    checkpoint.save(ckpt, checkpoint.path_in(dst))
    return dst


def test_a_checkpoint_without_tokenizer_finds_meta_from_the_project_not_the_cwd(tiny_run, tiny_data, tmp_path,
                                                                                capsys, monkeypatch):
    old = old_checkpoint(tiny_run, tmp_path / "old", os.path.relpath(tiny_data, ROOT))   # relative to the project
    monkeypatch.chdir(tmp_path)
    text = generated(old, capsys).out
    assert text.startswith("All:") and set(text.rstrip("\n-")) <= char_vocabulary(tiny_data)
    # the same relative path, now only valid from the working directory: not used
    elsewhere = tmp_path / "cwd"
    (elsewhere / "d").mkdir(parents=True)
    os.symlink(tiny_data / "tiny", elsewhere / "d" / "tiny")
    lost = old_checkpoint(tiny_run, tmp_path / "lost", "d")
    monkeypatch.chdir(elsewhere)
    err = one_line_error(sample.main, [f"--out_dir={lost}"], capsys)
    assert f"{os.path.join(ROOT, 'd', 'tiny', 'meta.pkl')} does not exist" in err and "not GPT-2's" in err


def test_past_the_training_length_sample_keeps_distances_in_range(tiny_run, capsys, monkeypatch):
    block = checkpoint.load(tiny_run)["model_args"]["block_size"]                  # 16; the text runs to 4 + 40
    built = []
    real = checkpoint.build_model
    monkeypatch.setattr(checkpoint, "build_model", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    err = generated(tiny_run, capsys, "--max_new_tokens=40").err
    assert built[-1].config.window == block and f"(--window={block})" in err and "--window=0 for the raw" in err
    err = generated(tiny_run, capsys, "--max_new_tokens=40", "--window=0").err
    assert built[-1].config.window == 0 and "going past the training length" in err
    notes = lambda *a: generated(tiny_run, capsys, *a).err.splitlines()[:-1]   # noqa: E731 (the last: tokens/s)
    assert notes("--max_new_tokens=10") == [] and built[-1].config.window == 0
    # the rule is the same for every encoding: no class attribute turns it off
    monkeypatch.setattr(type(built[-1].pe), "extrapolates", True, raising=False)
    assert len(notes("--max_new_tokens=40")) == 1 and built[-1].config.window == block


def test_windowed_default_equals_an_explicit_window(tiny_run, capsys):
    auto = generated(tiny_run, capsys, "--max_new_tokens=40").out
    assert auto == generated(tiny_run, capsys, "--max_new_tokens=40", "--window=16").out


def save_tiny(tiny_data, out_dir):
    with open(tiny_data / "tiny" / "meta.pkl", "rb") as f:
        vocab = pickle.load(f)["vocab_size"]
    model = tiny_gpt("alibi", vocab_size=vocab, block_size=16)
    checkpoint.save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config),
                     "config": {"data_dir": str(tiny_data), "dataset": "tiny"}, "iter_num": 0},
                    checkpoint.path_in(out_dir))


def test_the_header_counts_the_targets_a_short_split_has(tiny_data, tmp_path, capsys):
    """Asked for more targets than the val split holds, the header says how many are scored, as the rows do."""
    save_tiny(tiny_data, tmp_path)
    rows = evaluate.main([str(tmp_path), "--lengths=16,32", "--tokens_per_point=1000000"])
    scored = {r["tokens"] for r in rows}
    header = capsys.readouterr().out.splitlines()[0]
    assert len(scored) == 1 and 0 < scored.pop() < 1000000
    assert f"val perplexity of {rows[0]['tokens']:,} val targets, in chunks" in header, header


@pytest.mark.slow
def test_evaluate_says_what_it_scores_and_keeps_an_earlier_report(tiny_data, tmp_path, capsys):
    save_tiny(tiny_data, tmp_path)
    argv = [str(tmp_path), "--lengths=16", "--tokens_per_point=64"]
    evaluate.main(argv)
    out = capsys.readouterr().out
    assert "val perplexity of 64 val targets, in chunks" in out and "training's val loss averages random" in out
    assert "training's val loss averages random batches" in open(tmp_path / "extrapolation.md").read()
    before = {p: snapshot(p) for p in glob.glob(str(tmp_path / "extrapolation.*"))}
    err = one_line_error(evaluate.main, argv + ["--lengths=32"], capsys)
    assert "holds an earlier evaluation" in err and "--overwrite=True" in err
    assert {p: snapshot(p) for p in before} == before
    rows = evaluate.main(argv + ["--lengths=32", "--overwrite=True"])
    assert [r["length"] for r in rows] == [32] and "| 32 |" in open(tmp_path / "extrapolation.md").read()


def imports_of(path):
    tree = ast.parse(open(path).read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_cli_script_imports_another():
    paths = {name: os.path.join(ROOT, "measure" if name == "plots" else "", f"{name}.py") for name in CLIS}
    for name, path in paths.items():
        assert not imports_of(path) & (set(CLIS) - {name}), name


def test_positional_imports_nothing_of_the_application():
    ours = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "*.py"))} | {"data"}
    for path in glob.glob(os.path.join(ROOT, "positional", "**", "*.py"), recursive=True):
        assert not imports_of(path) & ours, path


# ---- --help everywhere, generated from the source ----------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("script, says", [
    (["train.py"], ["--max_iters=2000", "optimizer steps", "--pos_encoding='rope'", "a key of positional.REGISTRY",
                    "--rope_base=10000.0", "theta_j = base^(-2j/d) [rope"]),
    (["sample.py"], ["--max_new_tokens=500", "tokens generated per sample", "--window=0", "--rope_factor=1.0"]),
    (["evaluate.py"], ["--tokens_per_point=8192", "targets scored per (checkpoint", "--samples=200", "--sinks=0"]),
    (["compare.py"], ["--suite='lm'", "\"tasks\": accuracy on tasks/", "--finetune_iters=[]", "--n_layer=6"]),
    (["bench.py"], ["--rounds=7", "rounds alternating between encodings"]),
    (["-m", "measure.plots"], ["--head_dim=128", "d of the untrained encodings"]),
])
@pytest.mark.slow
def test_every_cli_prints_its_keys_with_defaults_and_meanings(script, says):
    r = run_py(*script, "--help")
    assert r.returncode == 0 and all(s in r.stdout for s in says), r.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(os.path.relpath(p, ROOT)
                                          for p in glob.glob(os.path.join(ROOT, "benchmarks", "*.py"))))
def test_every_benchmark_script_answers_help_without_pythonpath(script):
    """Run as a new user runs them (`python benchmarks/x.py --help` from the root, no PYTHONPATH): each finds the
    repository's modules itself and prints its docstring (greedy_positions.py did not: ModuleNotFoundError)."""
    r = run_py(script, "--help", env={"PYTHONPATH": None}, check=False, timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), f"{script}: exit {r.returncode}\n{r.stderr[-2000:]}"


@pytest.mark.slow
def test_help_lists_only_evaluation_time_keys_where_the_model_is_the_checkpoints():
    text = run_py("sample.py", "--help").stdout
    keys = set(re.findall(r"^  --(\w+)=", text.split("evaluation-time model keys")[1], re.M))
    assert keys == config.EVAL_KEYS and "pos_encoding" not in keys and "n_layer" not in keys


@pytest.mark.slow
def test_train_without_arguments_prints_the_usage_and_trains_nothing(tmp_path):
    r = run_py("train.py", check=False)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith("usage: python train.py [CONFIG_FILE]")
    configs = r.stderr.split("configs: ")[1].split()
    assert "configs/rope.py" in configs and "configs/tasks/copy.py" in configs
    assert "configs/compare.py" not in configs and "configs/tasks/quick.py" not in configs   # compare.py's


# ---- a checkpoint's model is the checkpoint's -----------------------------------------------------
@pytest.mark.parametrize("key", ["--pos_encoding=alibi", "--n_layer=2", "--rope_base=500.0", "--qk_norm=True"])
def test_keys_that_change_the_trained_model_are_refused_on_a_checkpoint(key, tiny_run, capsys):
    for main, argv in ((sample.main, [f"--out_dir={tiny_run}"]), (evaluate.main, [str(tiny_run)])):
        err = one_line_error(main, [*argv, key], capsys)
        assert f"{key.split('=')[0]} would change the trained model" in err


def test_evaluation_time_keys_are_accepted(tiny_run, capsys):
    out = generated(tiny_run, capsys, "--window=8", "--sinks=2", "--logn_scaling=True").out
    assert out.startswith("All:")


# ---- devices this machine does not have -------------------------------------------------------------
@pytest.mark.parametrize("device, says", [("cuda", "this machine has no CUDA device"),
                                          ("gpu", "unknown device 'gpu'; use auto, cpu, cuda, cuda:N or mps")])
def test_a_missing_device_is_one_line_naming_the_fix(device, says, tiny_run, tiny_data, tmp_path, capsys,
                                                     monkeypatch):
    import train
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cases = [(train.main, [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / 'new'}"]),
             (sample.main, [f"--out_dir={tiny_run}"]), (evaluate.main, [str(tiny_run), f"--report_dir={tmp_path}"])]
    for main, argv in cases:
        err = one_line_error(main, [*argv, f"--device={device}"], capsys)
        assert says in err and ("--device=cpu" in err if device == "cuda" else True), err
    assert not os.path.exists(tmp_path / "new")


def test_a_missing_checkpoint_suggests_the_config_of_its_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = one_line_error(evaluate.main, ["out-alibi"], capsys)
    assert "python train.py configs/alibi.py --out_dir=out-alibi" in err
    err = one_line_error(sample.main, ["--out_dir=out-mine"], capsys)
    assert "python train.py configs/<encoding>.py --out_dir=out-mine" in err


def test_sample_streams_characters_split_across_byte_tokens():
    import io
    from data.tokenizer import byte_tokenizer
    encode, decode, _ = byte_tokenizer(256, 257)
    ids = encode("héllo, wörld: ✓")                       # é, ö: 2 bytes; ✓: 3 bytes
    out = io.StringIO()
    write = sample.streamer(decode, out)
    seen = []
    for tok in ids:
        write(tok)
        seen.append(out.getvalue())
    assert out.getvalue() == "héllo, wörld: ✓" and "\ufffd" not in "".join(seen)
