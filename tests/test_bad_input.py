"""Bad input, everywhere a user types something: one line on stderr starting with
"error: ", exit status 2, and nothing already saved is lost (ckpt.pt keeps its bytes and
mtime). train.py and sample.py run in this process, so each case costs milliseconds."""
import os
import pickle
import signal

import numpy as np
import pytest

from training import checkpoint
import data.loader
import positional
from training.guard import lock_out_dir
from tests.conftest import TINY_ARGS
from tests.inproc import copy_run, sample_error, snapshot, train_error


@pytest.fixture
def saved_run(tiny_run, tmp_path):
    """A private out_dir holding a good checkpoint, and its snapshot to compare with afterwards."""
    out = copy_run(tiny_run, tmp_path / "run")
    before = snapshot(checkpoint.path_in(out))
    yield out
    assert snapshot(checkpoint.path_in(out)) == before, "a bad input modified the saved checkpoint"


@pytest.mark.parametrize("argv, message", [
    (["--pos_encoding=rotary"], f"unknown pos_encoding 'rotary'; valid: {', '.join(positional.REGISTRY)}"),
    (["--pos_encoding=alibbi"], "unknown pos_encoding 'alibbi'; did you mean 'alibi'?"),
    (["--rope_scaling=yarnn"],
     f"unknown rope_scaling 'yarnn'; did you mean 'yarn'? valid: {', '.join(positional.SCALINGS)}"),
    (["--t5_num_buckets=64"], "t5_num_buckets is a setting of t5; this run uses rope"),
    (["--pos_encoding=path", "--path_w_rank=-1"], "path_w_rank must be >= 0 (rank of the map W making w; 0: full "
                                                   "rank, r > 0: C -> r -> H*D), got -1"),
    (["--rope_factor=4"], "rope_factor is a setting of rope_scaling"),
    (["--sinks=4"], "sinks=4 needs a window"),
    (["--n_layr=2"], "unknown config key 'n_layr'; did you mean 'n_layer'?"),
    (["--lerning_rate=1e-3"], "unknown config key 'lerning_rate'; did you mean 'learning_rate'?"),
    (["--n_layer=two"], "config key 'n_layer' wants an integer, got 'two'"),
    (["--learning_rate=[1]"], "config key 'learning_rate' wants a number, got [1]"),
    (["--learning_rate=-1e-3"], "learning_rate must be >= 0, got -0.001"),
    (["--batch_size=0"], "batch_size must be >= 1, got 0"),
    (["--embed_std=0"], "embed_std must be > 0 (the token embedding's initial std; GPT-2's 0.02), got 0"),
    (["--block_size=0"], "block_size must be >= 1, got 0"),
    (["--n_embd=100", "--n_head=3"], "n_embd=100 is not divisible by n_head=3"),
    (["--n_embd=24", "--n_head=2", "--rotary_fraction=0.25"], "rotary dimension must be even"),
    (["--init_from=resum"], "init_from must be 'scratch' or 'resume', got 'resum'"),
    (["--on_nonfinite=ignore"], "on_nonfinite must be 'stop' or 'skip', got 'ignore'"),
    (["configs/nothere.py"], "config file 'configs/nothere.py' not found"),
    (["n_layer=2"], "overrides look like --key=value"),
    (["--dataset=nope"], "dataset 'nope' is not prepared"),
    (["--block_size=100000"], "train.bin has 6300 tokens, fewer than block_size+1 = 100001"),
    # keys that would do nothing without the option they belong to
    (["--max_position=64"], "max_position=64 is the range position_sampling draws training positions from, and "
                            "position_sampling is off"),
    (["--pose_chunks=3"], "pose_chunks=3 applies to position_sampling=pose only; add --position_sampling=pose"),
    (["--position_sampling=randomized", "--max_position=64", "--pose_chunks=3"], "applies to position_sampling=pose"),
    (["--lora_rank=4"], "lora_rank applies to finetune_method=longlora only; add --finetune_method=longlora"),
    (["--lora_targets=qkv"], "lora_targets applies to finetune_method=longlora only"),
    (["--backend=nccl"], "backend=nccl picks how DDP processes talk, and this is one process (no torchrun)"),
    (["--backend=mpii"], "backend must be auto, nccl or gloo, got 'mpii'"),
    (["--wandb_group=cmp"], "wandb_group='cmp' groups wandb runs, and wandb logging is off; add --wandb_log=True"),
    (["--copy_max=32"], "copy_max=32 applies to copy_rows > 0 only"),
    (["--copy_rows=1.5"], "copy_rows must be a fraction in [0, 1], got 1.5"),
    (["--copy_rows=0.25", "--copy_min=32", "--copy_max=8"], "copy rows need 2 <= copy_min <= copy_max < block_size"),
    (["--copy_rows=0.25", "--copy_min=4", "--copy_max=8", "--documents=masked"],
     "copy_rows replaces whole rows, and documents=masked"),
])
def test_train_bad_config(argv, message, saved_run, tiny_data, capsys):
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={saved_run}", *argv], capsys)
    assert message in err


def test_nccl_on_a_cpu_device_under_torchrun(saved_run, tiny_data, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")   # as torchrun sets it; refused before any process group is joined
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={saved_run}", "--backend=nccl"], capsys)
    assert "backend=nccl needs CUDA devices, and this run's device is cpu; use --backend=gloo (or auto)" in err


def test_config_file_that_raises(saved_run, tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("n_layer = 1 / 0\n")
    err = train_error([str(bad), f"--out_dir={saved_run}"], capsys)
    assert f"config file '{bad}' raised ZeroDivisionError: division by zero" in err


@pytest.mark.slow
def test_dataset_that_cannot_be_prepared_says_why(saved_run, tmp_path, monkeypatch, capsys):
    (tmp_path / "repo" / "broken").mkdir(parents=True)
    failing_prepare = "import sys; sys.exit('corpus download failed: offline')\n"
    (tmp_path / "repo" / "broken" / "prepare.py").write_text(failing_prepare)
    monkeypatch.setattr(data.loader, "HERE", str(tmp_path / "repo"))  # stand-in for the repo's data/
    err = train_error([*TINY_ARGS, f"--data_dir={tmp_path / 'data'}", "--dataset=broken", f"--out_dir={saved_run}"],
                      capsys)
    assert "broken/prepare.py --out_dir" in err and "failed: corpus download failed: offline" in err


def write_dataset(d, train, val, vocab_size):
    os.makedirs(d)
    np.asarray(train, dtype=np.uint16).tofile(d / "train.bin")
    np.asarray(val, dtype=np.uint16).tofile(d / "val.bin")
    with open(d / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": vocab_size}, f)


def test_token_ids_beyond_the_vocabulary(saved_run, tmp_path, capsys):
    write_dataset(tmp_path / "d" / "odd", np.arange(200) % 90, np.arange(50) % 10, vocab_size=65)
    err = train_error([*TINY_ARGS, f"--data_dir={tmp_path / 'd'}", "--dataset=odd", f"--out_dir={saved_run}"], capsys)
    assert "train.bin has token id 89 but meta.pkl vocab_size is 65" in err


def test_dataset_shorter_than_one_block(saved_run, tmp_path, capsys):
    write_dataset(tmp_path / "d" / "short", np.arange(200) % 10, np.arange(12) % 10, vocab_size=10)
    err = train_error([*TINY_ARGS, f"--data_dir={tmp_path / 'd'}", "--dataset=short", f"--out_dir={saved_run}"],
                      capsys)
    assert "val.bin has 12 tokens, fewer than block_size+1 = 17; use a smaller --block_size or more data" in err


def test_resume_without_a_checkpoint(tiny_data, tmp_path, capsys):
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--init_from=resume"], capsys)
    assert f"no checkpoint at {checkpoint.path_in(tmp_path)}; train one first" in err
    assert os.listdir(tmp_path) == []  # a refused run leaves no trace, not even its lock file


def test_a_refused_run_creates_no_out_dir(tiny_data, tmp_path, capsys):
    train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / 'new'}", "--dataset=nope"], capsys)
    assert not os.path.exists(tmp_path / "new")


def test_second_trainer_on_the_same_out_dir_is_refused(saved_run, tiny_data, capsys):
    """The lock is an flock: held while its process lives, gone when the process dies, even by SIGKILL."""
    argv = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={saved_run}", "--init_from=resume"]
    lock = lock_out_dir(saved_run)
    err = train_error(argv, capsys)
    os.close(lock)
    assert f"{saved_run} is in use by another training process (pid {os.getpid()})" in err
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a trainer that dies without cleaning up
        try:
            lock_out_dir(saved_run)
            os.write(w, b"locked")
            signal.pause()
        finally:
            os._exit(1)
    assert os.read(r, 6) == b"locked"
    assert f"(pid {pid})" in train_error(argv, capsys)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(lock_out_dir(saved_run))  # free again


@pytest.mark.parametrize("argv, message", [
    (["--start=Zebra €"], "prompt has characters not in the vocabulary: 'Z', 'b', '€'"),
    (["--max_new_tokens=-5"], "--max_new_tokens must be >= 0, got -5"),
    (["--num_samples=0"], "--num_samples must be >= 1, got 0"),
    (["--temperature=hot"], "--temperature wants a number, got 'hot'"),
    (["--temprature=0.5"], "unknown option --temprature; did you mean --temperature?"),
    (["--start=FILE:/nonexistent/prompt.txt"], "--start=FILE:/nonexistent/prompt.txt: cannot read "
                                               "'/nonexistent/prompt.txt' (No such file or directory); give a "
                                               "readable UTF-8 file after FILE:"),
    (["--start=FILE:/"], "--start=FILE:/: cannot read '/' (Is a directory)"),
])
def test_sample_bad_input(argv, message, saved_run, capsys):
    assert message in sample_error([f"--out_dir={saved_run}", *argv], capsys)


def test_sample_without_a_checkpoint(tmp_path, capsys):
    err = sample_error([f"--out_dir={tmp_path}"], capsys)
    assert f"no checkpoint at {checkpoint.path_in(tmp_path)}" in err
