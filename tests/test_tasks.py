"""The synthetic tasks (tasks/): exact lengths, masks that cover exactly the answer, reference
answers, seed determinism, training batches, and scoring (oracle 100%, random ~chance)."""
import pytest
import torch

import tasks
from model import GPT, GPTConfig
from tasks.common import PAD, QRY, SEP, SYM
from tasks.data import TaskData, curriculum_length
from tasks.report import mrr
from tasks.score import accuracy, effective_window, examples, fits, greedy
from tests.inproc import train_error

NAMES = list(tasks.REGISTRY)
# answer tokens at length 20, counted by hand from each task's layout
ANSWER_AT_20 = {"copy": 9, "reverse": 9, "duplicate": 12, "parity": 1, "addition": 6, "passkey": 4, "mqar": 5,
                "grid": 5}


def answer(ex):
    return [t for t, m in zip(ex.ids, ex.mask) if m]


@pytest.mark.parametrize("name", NAMES)
def test_lengths_exact_and_reference_answers(name):
    task = tasks.get(name)
    for n in [task.MIN_LENGTH, task.MIN_LENGTH + 1, task.MIN_LENGTH + 2, 20, 33, 200]:
        for seed in range(5):
            ex = task.generate(seed, n)
            assert len(ex.ids) == n and len(ex.mask) == n
            assert all(0 <= t < task.VOCAB_SIZE for t in ex.ids) and ex.ids[0] == PAD
            assert task.reference(ex.ids) == answer(ex)


@pytest.mark.parametrize("name", NAMES)
def test_mask_covers_exactly_the_answer(name):
    task = tasks.get(name)
    ex = task.generate(3, 20)
    assert sum(ex.mask) == ANSWER_AT_20[name]
    first = ex.mask.index(True)
    if name == "mqar":   # answers interleave with queries after SEP: every second token
        assert ex.ids[first - 2] == SEP and ex.mask[first:] == [True, False] * 4 + [True]
    else:                # one block at the end, right after the question's last token (SEP or QRY)
        assert all(ex.mask[first:]) and ex.ids[first - 1] == (QRY if name == "passkey" else SEP)
    # the answer's positions depend on the length alone
    assert all(task.generate(s, 20).mask == ex.mask for s in range(20))


@pytest.mark.parametrize("name", NAMES)
def test_reference_reads_only_what_precedes_each_answer(name):
    """Causal: the answer token at position a follows from ids[:a] alone (what a model sees)."""
    task = tasks.get(name)
    ex = task.generate(11, 40)
    positions = [i for i, m in enumerate(ex.mask) if m]
    for j, a in enumerate(positions):
        assert task.reference(ex.ids[:a])[j] == ex.ids[a]


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_sequence(name):
    task = tasks.get(name)
    assert task.generate(7, 30) == task.generate(7, 30)
    assert len({tuple(task.generate(s, 30).ids) for s in range(10)}) > 1


def test_hand_written_examples():
    assert tasks.copy.generate(0, 8).ids[4:] == [SEP] + tasks.copy.generate(0, 8).ids[1:4]
    assert tasks.copy.generate(0, 9).ids[:2] == [PAD, PAD]                 # odd length: one more PAD
    # 3 + 1 = 4, LSB first: a = 1 1, b = 1 0, sum = 0 0 1
    seq = [PAD, SYM + 1, SYM + 1, tasks.addition.PLUS, SYM + 1, SYM + 0, SEP]
    assert tasks.addition.reference(seq) == [SYM + 0, SYM + 0, SYM + 1]
    assert tasks.parity.reference([PAD, SYM + 1, SYM + 1, SYM + 1, SEP]) == [SYM + 1]
    assert tasks.mqar.reference([PAD, 5, 40, 6, 41, SEP, 6, 41, 5]) == [41, 40]
    first, last = tasks.passkey.generate(0, 30, depth=0.0), tasks.passkey.generate(0, 30, depth=1.0)
    assert first.ids[1] == SEP and tasks.passkey.distance(first.ids) == 30 - 1 - 4 - 1
    assert last.ids[-10] == SEP and tasks.passkey.distance(last.ids) == 5   # marker, 4 digits, then QRY


def test_bad_input_one_line():
    with pytest.raises(ValueError, match="did you mean 'copy'"):
        tasks.get("cpy")
    with pytest.raises(ValueError, match=r"task copy needs a length >= 4"):
        tasks.copy.generate(0, 3)
    with pytest.raises(ValueError, match=r"cannot fill block_size=6.*>=7"):
        TaskData("addition").check(6)


def test_train_refuses_bad_task_and_short_block(capsys, tmp_path):
    err = train_error(["configs/tasks/copy.py", "--task=cpy", f"--out_dir={tmp_path}"], capsys)
    assert "unknown task 'cpy'" in err
    err = train_error(["configs/tasks/passkey.py", "--block_size=8", f"--out_dir={tmp_path}"], capsys)
    assert "task passkey cannot fill block_size=8" in err
    err = train_error(["configs/rope.py", "--curriculum_iters=100", f"--out_dir={tmp_path}"], capsys)
    assert "curriculum_iters must be >= 0 and needs a task" in err
    assert not (tmp_path / "ckpt.pt").exists()


def test_a_length_curriculum_bounds_the_training_lengths():
    # from the shortest (6) to block_size (32) over 5 iterations: 6, 12, 19, 25, then 32 (6 + 26 * it // 4)
    assert [curriculum_length(it, 5, 6, 32) for it in range(7)] == [6, 12, 19, 25, 32, 32, 32]
    assert curriculum_length(0, 1, 6, 32) == 32
    data, gen = TaskData("copy"), torch.Generator().manual_seed(0)
    _, y = data.get_batch("train", 64, 24, gen, longest=10)
    last = (y != -1).long().cumsum(1).argmax(1)           # each row's last target: length - 2 (copy ends on it)
    assert last.max().item() == 8 and last.min().item() >= tasks.copy.MIN_LENGTH - 2
    _, y = data.get_batch("train", 64, 24, gen)
    assert last.max().item() < (y != -1).long().cumsum(1).argmax(1).max().item() <= 22


@pytest.mark.parametrize("name", ["copy", "mqar"])
def test_batches_targets_only_the_answers(name):
    data, gen = TaskData(name), torch.Generator().manual_seed(0)
    x, y = data.get_batch("train", 16, 24, gen)
    assert x.shape == y.shape == (16, 23) and data.vocab_size == tasks.get(name).VOCAB_SIZE
    scored = y != -1
    assert scored.any(1).all()
    last = torch.arange(23).expand(16, 23) == (scored * torch.arange(23)).argmax(1, keepdim=True)
    inner = scored & ~last              # the last answer token is a target only: x stops before it
    assert (x[:, 1:][inner[:, :-1]] == y[:, :-1][inner[:, :-1]]).all()   # elsewhere y is x shifted by one
    x2, _ = data.get_batch("train", 16, 24, torch.Generator().manual_seed(0))
    xv, _ = data.get_batch("val", 16, 24, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2) and not torch.equal(x, xv)


class Oracle(torch.nn.Module):
    """A 'model' that answers with the task's reference on what it has been fed (its own cache)."""

    def __init__(self, task, length, wrong=False):
        super().__init__()
        self.task, self.w, self.wrong = task, torch.nn.Parameter(torch.zeros(1)), wrong
        self.answer_at = [i for i, m in enumerate(task.generate(0, length).mask) if m]
        self.max_positions = None                                     # no position limit, as GPT.max_positions

    def setup_cache(self, batch, max_len):
        self.fed = [[] for _ in range(batch)]

    def clear_cache(self):
        self.fed = None

    def forward(self, idx, places=None):                              # places: the scorer's, for addition
        B, T = idx.shape
        logits = torch.zeros(B, T, self.task.VOCAB_SIZE)
        for b in range(B):
            self.fed[b] += idx[b].tolist()
            if self.wrong:
                logits[b] = torch.randn(T, self.task.VOCAB_SIZE)
            elif len(self.fed[b]) in self.answer_at:
                j = self.answer_at.index(len(self.fed[b]))
                logits[b, -1, self.task.reference(self.fed[b])[j]] = 1.0
        return logits, None


@pytest.mark.parametrize("name", NAMES)
def test_oracle_scores_100_and_random_scores_chance(name):
    task = tasks.get(name)
    assert accuracy(Oracle(task, 40), task, 40, samples=20) == (1.0, 1.0)
    torch.manual_seed(0)
    exact, token = accuracy(Oracle(task, 40, wrong=True), task, 40, samples=200)
    assert abs(token - 1 / task.VOCAB_SIZE) < 0.04 and exact < 0.6


def test_greedy_with_cache_equals_decoding_without():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, vocab_size=tasks.mqar.VOCAB_SIZE, n_layer=2, n_head=2, n_embd=32,
                          pos_encoding="alibi")).eval()
    ids, mask = examples(tasks.mqar, 30, 4)
    out = ids.clone()
    for a in mask.nonzero().squeeze(1).tolist():       # recompute the whole prefix at every answer
        out[:, a] = model(out[:, :a])[0][:, -1].argmax(-1)
    assert torch.equal(greedy(model, ids, mask), out) and model.kv_cache is None


def test_a_model_trained_on_sampled_positions_is_scored_on_them():
    """Ruoss et al.'s randomized positions: scoring_positions draws an increasing subset of [0, M) per length and
    batch (reproducibly), and greedy then feeds them explicitly: a learned table read at those rows, not 0..n-1."""
    from tasks.score import scoring_positions
    assert scoring_positions({"block_size": 32}) is None and scoring_positions(
        {"block_size": 32, "position_sampling": "pose", "max_position": 128}) is None   # PoSE: real positions
    draw = scoring_positions({"block_size": 32, "position_sampling": "randomized", "max_position": 128})
    pos = draw(30, 0)
    assert len(pos) == 30 and bool((pos.diff() > 0).all()) and int(pos.max()) < 128
    assert not torch.equal(pos, torch.arange(30))
    assert torch.equal(draw(30, 0), pos) and not torch.equal(draw(30, 8), pos)
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=128, vocab_size=tasks.mqar.VOCAB_SIZE, n_layer=2, n_head=2, n_embd=32,
                          pos_encoding="learned")).eval()
    ids, mask = examples(tasks.mqar, 30, 4)
    out = ids.clone()
    for a in mask.nonzero().squeeze(1).tolist():
        out[:, a] = model(out[:, :a], pos=pos[:a])[0][:, -1].argmax(-1)
    assert torch.equal(greedy(model, ids, mask, pos), out) and model.kv_cache is None
    assert torch.equal(greedy(model, ids, mask, torch.arange(30)), greedy(model, ids, mask))   # 0..n-1: the cache's
    assert not torch.equal(model(ids, pos=pos)[0], model(ids)[0])                             # other rows of the table


def test_effective_window_and_mrr_by_hand():
    grid = [dict(length=32, exact=1.0), dict(length=32, exact=0.9), dict(length=64, exact=0.2),
            dict(length=128, exact=0.1), dict(length=128, exact=0.9), dict(length=256, exact=0.9)]
    assert effective_window(grid) == 64          # one depth of 128 fails, so 256 does not count
    assert effective_window([dict(length=32, exact=0.0)]) == 0
    # task a: y and z tie at ranks 2 and 3, sharing (1/2 + 1/3) / 2; z did not learn b, so the MRR ranks over a alone
    common, ranks = mrr({"a": {"x": 0.9, "y": 0.5, "z": 0.5}, "b": {"x": 0.1, "y": 0.3, "z": None}})
    assert common == ["a"] and ranks == {"x": 1.0, "y": pytest.approx(5 / 12), "z": pytest.approx(5 / 12)}
    assert list(ranks)[0] == "x"       # best first
    common, ranks = mrr({"a": {"x": 0.9, "y": 0.5}, "b": {"x": 0.1, "y": 0.3}})   # both learned both: over a and b
    assert common == ["a", "b"] and ranks == {"x": pytest.approx(3 / 4), "y": pytest.approx(3 / 4)}
    assert mrr({"a": {"x": None}}) == ([], {"x": None})


def test_train_py_passes_the_curriculum_to_the_batches(tmp_path):
    """The same seed with and without --curriculum_iters trains on other batches: train.py hands the bound on."""
    from training import checkpoint
    from tests.inproc import run_train
    args = ["configs/tasks/copy.py", "--block_size=16", "--n_layer=1", "--n_head=2", "--n_embd=16", "--batch_size=4",
            "--eval_interval=3", "--eval_iters=1", "--warmup_iters=1", "--max_iters=3", "--device=cpu"]
    assert run_train([*args, f"--out_dir={tmp_path / 'a'}"]) == 0
    assert run_train([*args, "--curriculum_iters=100", f"--out_dir={tmp_path / 'b'}"]) == 0
    a, b = checkpoint.load(str(tmp_path / "a"))["model"], checkpoint.load(str(tmp_path / "b"))["model"]
    assert not all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("curriculum", [0, 5])
def test_task_run_resumes_exactly_and_records_its_task(tmp_path, curriculum):
    from training import checkpoint
    from tests.inproc import run_train
    args = ["configs/tasks/mqar.py", "--block_size=16", "--n_layer=1", "--n_head=2", "--n_embd=16", "--batch_size=4",
            "--eval_interval=3", "--eval_iters=1", "--warmup_iters=1", "--lr_decay_iters=6", "--device=cpu",
            f"--curriculum_iters={curriculum}"]   # 5: the resume lands inside the length curriculum
    # lr_decay_iters set: b's first 3 iterations are the start of a's 6, not a shortened run of their own
    assert run_train([*args, "--max_iters=6", f"--out_dir={tmp_path / 'a'}"]) == 0
    assert run_train([*args, "--max_iters=3", f"--out_dir={tmp_path / 'b'}"]) == 0
    assert run_train([*args, "--max_iters=6", f"--out_dir={tmp_path / 'b'}", "--init_from=resume"]) == 0
    a, b = checkpoint.load(str(tmp_path / "a")), checkpoint.load(str(tmp_path / "b"))
    assert a["config"]["task"] == "mqar" and a["model_args"]["vocab_size"] == tasks.mqar.VOCAB_SIZE
    assert all(torch.equal(a["model"][k], v) for k, v in b["model"].items())


def test_position_table_past_its_end_is_not_scored():
    model = GPT(GPTConfig(block_size=16, vocab_size=tasks.copy.VOCAB_SIZE, n_layer=1, n_head=2, n_embd=16,
                          pos_encoding="learned")).eval()
    assert accuracy(model, tasks.copy, 17, samples=2)[0] is not None   # reads 16 tokens: fits the table
    assert accuracy(model, tasks.copy, 18, samples=2) == (None, None)


def test_the_position_limit_is_the_models_not_the_main_encodings():
    """pos_encoding=rope with an xpos layer: the model's limit is xpos's, though rope (the main encoding) has none."""
    model = GPT(GPTConfig(block_size=16, vocab_size=tasks.copy.VOCAB_SIZE, n_layer=2, n_head=2, n_embd=16,
                          pos_encoding="rope", layer_encodings="rope,xpos")).eval()
    limit = model.max_positions
    assert model.pe.max_positions is None and limit is not None
    assert not fits(model, limit + 2) and fits(model, limit + 1)      # reads length - 1 tokens
    assert accuracy(model, tasks.copy, 17, samples=2)[0] is not None


def test_a_per_layer_schedule_is_scored_under_its_pattern(tmp_path, capsys):
    """B4: a run with layer_encodings is reported as its pattern ('rope,none'), not as its first encoding."""
    from tasks.score import score_checkpoints
    from tests.inproc import run_train
    args = ["configs/tasks/copy.py", "--block_size=16", "--n_layer=2", "--n_head=2", "--n_embd=16", "--batch_size=2",
            "--eval_interval=1", "--eval_iters=1", "--warmup_iters=0", "--max_iters=1", "--device=cpu",
            "--layer_encodings=rope,none", f"--out_dir={tmp_path}"]
    assert run_train(args) == 0
    got = score_checkpoints([str(tmp_path)], lengths=[16], samples=2)["runs"][str(tmp_path)]
    assert got["encoding"] == "rope,none"
    assert f"{tmp_path} (rope,none, copy): 16: " in capsys.readouterr().out
