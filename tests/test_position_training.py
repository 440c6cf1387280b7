"""Positions sampled in training (training/sampling.py hooked into train.py): GPT.forward's
explicit positions, checked on the host; a pose run resumes bitwise; the checkpoint records
the sampling; a learned table's rows beyond block_size are trained."""
import pytest
import torch

import positional

from training import checkpoint
from training import sampling as position_sampling
from tests.conftest import TINY_ARGS, tiny_gpt
from tests.inproc import on_training_forward, run_train


def test_explicit_positions_are_the_positions_used():
    idx = torch.randint(0, 40, (2, 12))
    model = tiny_gpt("learned", block_size=32)
    with torch.no_grad():
        plain = model(idx)[0]
        assert torch.equal(model(idx, pos=torch.arange(12))[0], plain)
        shifted = model(idx, pos=torch.arange(12) + 5)[0]
        rope = tiny_gpt("rope")
        torch.testing.assert_close(rope(idx, pos=torch.arange(12) + 7)[0], rope(idx)[0],
                                   rtol=1e-4, atol=1e-4)  # relative
    assert not torch.allclose(shifted, plain)


@pytest.mark.parametrize("pos,message", [
    (torch.tensor([0, 2, 2, 5]), "must be >= 0 and increasing"),
    (torch.tensor([3, 2, 4, 5]), "must be >= 0 and increasing"),
    (torch.tensor([-1, 2, 3, 5]), "must be >= 0 and increasing"),
    (torch.tensor([0, 1, 2]), "must be a (T,) = (4,) integer tensor"),
    (torch.tensor([0, 1, 2, 32]), "the learned encoding knows 32 positions, got a sequence reaching position 33"),
])
def test_bad_explicit_positions_are_refused(pos, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny_gpt("learned")(torch.zeros(1, 4, dtype=torch.long), pos=pos)


SPARSE = torch.tensor([0, 2, 3, 7, 8, 9, 13, 20, 21, 26, 30, 31])   # increasing, with gaps (randomized positions)


@pytest.mark.parametrize("name", sorted(positional.REGISTRY))
def test_explicit_positions_continue_a_cache_as_the_full_forward_reads_them(name):
    """A cache continued at sparse increasing positions (a randomized run's greedy scoring) gives the logits of one
    forward over the same positions: a prompt of 5, then one token a call."""
    model = tiny_gpt(name)
    idx = torch.randint(0, 40, (2, len(SPARSE)))
    with torch.no_grad():
        full = model(idx, pos=SPARSE)[0]
        model.setup_cache(2, 32)
        try:
            parts = [model(idx[:, :5], pos=SPARSE[:5])[0]]
            parts += [model(idx[:, t:t + 1], pos=SPARSE[t:t + 1])[0] for t in range(5, len(SPARSE))]
        finally:
            model.clear_cache()
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("first,window", [(3, 0), (0, 8)])
def test_explicit_positions_refuse_to_rewrite_a_cache_or_a_ring(first, window):
    model = tiny_gpt("rope", window=window)
    model.setup_cache(1, 64)
    model(torch.zeros(1, 4, dtype=torch.long), pos=torch.arange(4) if not window else None)
    with pytest.raises(ValueError, match="explicit positions continue a KV cache in order"):
        model(torch.zeros(1, 2, dtype=torch.long), pos=torch.arange(first, first + 2))


def test_randomized_positions_train_the_learned_rows_beyond_block_size():
    model = tiny_gpt("learned", block_size=16, max_position=64).train()
    pos = position_sampling.sample("randomized", 16, 64, generator=torch.Generator().manual_seed(3))
    assert pos[-1] >= 16
    _, loss = model(torch.randint(0, 40, (2, 16)), torch.randint(0, 40, (2, 16)), pos)
    loss.backward()
    rows = model.pe.wpe.weight.grad.abs().sum(-1) > 0                         # (64,)
    assert rows.nonzero().squeeze(1).tolist() == pos.tolist()


COMMON = [*TINY_ARGS, "--position_sampling=pose", "--max_position=64", "--pose_chunks=3", "--lr_decay_iters=40",
          "--max_iters=40", "--eval_interval=10"]


@pytest.mark.slow
def test_pose_run_resumes_bitwise_and_records_the_sampling(tiny_data, tmp_path, monkeypatch):
    drawn, real = [], position_sampling.sample
    monkeypatch.setattr(position_sampling, "sample", lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    straight_losses = on_training_forward(monkeypatch)
    assert run_train([*COMMON, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / 'a'}"]) == 0
    want, straight = checkpoint.load(tmp_path / "a"), list(straight_losses)
    assert len(drawn) == 40 and max(int(p[-1]) for p in drawn) >= 16 and all(int(p[-1]) < 64 for p in drawn)
    assert want["config"]["position_sampling"] == "pose" and want["config"]["pose_chunks"] == 3
    assert want["model_args"]["max_position"] == 64

    losses = on_training_forward(monkeypatch)
    argv = [*COMMON, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / 'b'}"]
    assert run_train([*argv, "--max_iters=20"]) == 0 and run_train([*argv, "--init_from=resume"]) == 0
    assert losses == straight                                                  # exact, step by step
    got = checkpoint.load(tmp_path / "b")
    assert all(torch.equal(got["model"][k], v) for k, v in want["model"].items())


def test_a_task_trains_with_sampled_positions(tmp_path):
    """Task batches hold block_size - 1 inputs: the sampled positions are drawn for what the batch holds."""
    argv = ["configs/tasks/copy.py", "--block_size=12", "--n_layer=1", "--n_head=2", "--n_embd=16", "--batch_size=4",
            "--max_iters=3", "--eval_interval=3", "--eval_iters=1", "--device=cpu", f"--out_dir={tmp_path}"]
    for sampling in ("randomized", "pose"):
        assert run_train([*argv, f"--position_sampling={sampling}", "--max_position=48", "--overwrite=True"]) == 0
        assert checkpoint.load(tmp_path)["config"]["position_sampling"] == sampling
