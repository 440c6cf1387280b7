"""Abacus (positional/abacus.py) and position coupling (positional/coupling.py) on the addition task, whose
places (tasks/addition.py) the training loop and the scorer pass as GPT.forward(places=...): the places and
ids of a worked example by hand, the training shifts' ranges, causality by token order although coupled ids
repeat, the KV cache equal to one full forward, a training step, and greedy scoring with the places.
The registry-parametrised tests (test_encodings, test_decode, ...) cover both without places (row 0)."""
import pytest
import torch

from model import GPT
from positional.abacus import offset_rows
from positional.coupling import coupled_ids, random_starts
from tasks import TaskData, addition
from tasks.common import PAD, SEP, SYM
from tasks.score import accuracy, greedy
from tests.conftest import tiny_gpt
from tests.inproc import run_train, train_error

PLUS = addition.PLUS
# 5 + 3 = 8 in 3 bits, LSB first: a = 1 0 1, b = 1 1 0, sum = 0 0 0 1
EXAMPLE = [PAD, SYM + 1, SYM, SYM + 1, PLUS, SYM + 1, SYM + 1, SYM, SEP, SYM, SYM, SYM, SYM + 1]
PLACES = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4]      # 1 + the bit's significance; 0: PAD, '+', SEP


def test_addition_places_by_hand():
    assert addition.reference(EXAMPLE[:9]) == EXAMPLE[9:]
    assert addition.places(EXAMPLE) == PLACES
    assert addition.places(EXAMPLE[:10]) == PLACES[:10]                    # a prefix: the same places
    wrong = EXAMPLE[:9] + [PAD, PLUS, SEP, SYM]
    assert addition.places(wrong) == PLACES                                # the answer's slots keep theirs
    assert addition.places([PAD, PAD] + EXAMPLE[1:]) == [0] + PLACES       # left padding: zeros


def test_a_batch_carries_its_examples_places():
    data = TaskData("addition")
    x, _ = data.get_batch("train", 8, 32, torch.Generator().manual_seed(0))
    places = data.places(x)
    assert places.shape == x.shape
    for row, p in zip(x.tolist(), places.tolist()):
        assert p == addition.places(row)
        placed = [t for t, q in zip(row, p) if q]
        assert all(SYM <= t <= SYM + 1 for t in placed[:-1])              # bits have places...
        assert placed[-1] in (SYM, SYM + 1, PAD)      # ...and the sum's last slot, a PAD where x drops that bit
    assert TaskData("copy").places(x) is None


def test_abacus_rows_by_hand():
    places = torch.tensor([PLACES])
    assert offset_rows(places, 0).tolist() == [PLACES]
    assert offset_rows(places, 5).tolist() == [[0, 6, 7, 8, 0, 6, 7, 8, 0, 6, 7, 8, 9]]


def test_abacus_shifts_all_digits_by_one_k_in_training_and_none_in_evaluation():
    model = tiny_gpt("abacus", abacus_shift=7)
    pe, x, places = model.pe, torch.zeros(1, 13, 32), torch.tensor([PLACES])
    table = pe.table.weight
    ctx = type("Ctx", (), {"places": places})()
    torch.testing.assert_close(pe.eval().embed(x, ctx)[0], table[places[0]])
    seen = set()
    pe.train()
    for _ in range(60):
        e = pe.embed(x, ctx)[0]
        k = int(torch.argmin((table[None] - e[1]).abs().sum(-1)).item()) - 1   # a_0's row is 1 + k
        torch.testing.assert_close(e, table[offset_rows(places, k)[0]])
        seen.add(k)
    assert seen == set(range(7))                                            # k uniform in [0, abacus_shift)


def test_coupling_ids_by_hand_and_random_starts_in_range():
    places = torch.tensor([PLACES, [0, 0, 1, 0, 1, 0, 1, 2, 0, 0, 0, 0, 0]])
    gen = torch.Generator().manual_seed(0)
    starts = torch.cat([random_starts(places, 10, gen) for _ in range(400)], 1)   # (2, 400)
    assert set(starts[0].tolist()) == set(range(10 - 4)) and set(starts[1].tolist()) == set(range(10 - 2))
    ids = coupled_ids(places, torch.tensor([[3], [0]]))
    assert ids.tolist() == [[3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 7], [0, 0, 1, 0, 1, 0, 1, 2, 0, 0, 0, 0, 0]]


def test_coupling_places_sep_one_column_below_the_digits_it_adds_under_every_start():
    """SEP predicts c_0 and must find a_0, b_0: its id is theirs - 1 whatever the training start, as c_i's is
    a_{i+1}'s - 1 (the reference code's '=' next to the least significant digit's id); a fixed row for SEP would
    leave it nothing that follows the start."""
    model = tiny_gpt("coupling", coupling_rows=12)
    pe, x, places = model.pe.train(), torch.zeros(1, 13, 32), torch.tensor([PLACES])
    ctx = type("Ctx", (), {"places": places})()
    table, sep, plus = pe.table.weight, EXAMPLE.index(SEP), EXAMPLE.index(PLUS)
    seen = set()
    for _ in range(80):
        e = pe.embed(x, ctx)[0]
        rows = torch.cdist(e, table).argmin(-1).tolist()                    # each token's row of P
        assert rows[sep] == rows[1] - 1 == rows[plus + 1] - 1 == rows[sep + 1] - 1     # SEP, a_0, b_0, c_0
        assert [rows[sep + 1 + i] for i in range(2)] == [rows[2 + i] - 1 for i in range(2)]   # c_i, a_{i+1}
        assert rows[plus] == rows[0] == rows[sep]                           # '+' and PAD in SEP's column
        seen.add(rows[sep])
    assert seen == set(range(12 - 4))                                       # the start itself is uniform


@pytest.mark.parametrize("name", ["abacus", "coupling"])
def test_causal_by_token_order_though_places_repeat(name):
    model = tiny_gpt(name)
    ids, places = torch.tensor([EXAMPLE]), torch.tensor([PLACES])
    with torch.no_grad():
        full = model(ids, places=places)[0]
        later = ids.clone()
        later[0, 11] = SYM + 1 - (later[0, 11] - SYM)                       # change c_2
        changed = model(later, places=places)[0]
        earlier = ids.clone()
        earlier[0, 1] = SYM                                                # change a_0
        moved = model(earlier, places=places)[0]
    torch.testing.assert_close(changed[:, :11], full[:, :11], rtol=0, atol=0)
    assert not torch.allclose(changed[:, 11:], full[:, 11:])
    assert not torch.allclose(moved[:, 9], full[:, 9])                    # the answer reads a_0


@pytest.mark.parametrize("name", ["abacus", "coupling"])
def test_places_reach_the_embedding_and_none_means_row_zero(name):
    model = tiny_gpt(name)
    ids, places = torch.tensor([EXAMPLE]), torch.tensor([PLACES])
    with torch.no_grad():
        placed, plain = model(ids, places=places)[0], model(ids)[0]
        zeros = model(ids, places=torch.zeros_like(places))[0]
    assert not torch.allclose(placed, plain)
    torch.testing.assert_close(plain, zeros, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["abacus", "coupling"])
def test_kv_cache_matches_full_forward(name):
    model = tiny_gpt(name)
    x, _ = TaskData("addition").get_batch("val", 3, 32, torch.Generator().manual_seed(1))
    places = TaskData("addition").places(x)
    with torch.no_grad():
        full = model(x, places=places)[0]
        model.setup_cache(3, x.shape[1])
        steps = [model(x[:, :9], places=places[:, :9])[0]]
        steps += [model(x[:, t:t + 1], places=places[:, t:t + 1])[0] for t in range(9, x.shape[1])]
        model.clear_cache()
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["abacus", "coupling"])
def test_a_training_step_trains_the_table_rows_in_play(name):
    model = tiny_gpt(name, **({"abacus_shift": 3} if name == "abacus" else {})).train()
    data = TaskData("addition")
    x, y = data.get_batch("train", 8, 32, torch.Generator().manual_seed(2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = model(x, y, places=data.places(x))[1]
    loss.backward()
    used = model.pe.table.weight.grad.abs().sum(-1) > 0
    assert used[1:].any()
    if name == "abacus":                              # places <= (32 - 4) // 3 + 1 = 10, shifted by k < 3
        assert used[0] and not used[13:].any()        # row 0: the non-digits
    else:                                             # each example's rows s .. s + 10 from its own start
        assert used.sum() > (32 - 4) // 3 + 2
    opt.step()
    with torch.no_grad():
        assert model.eval()(x, y, places=data.places(x))[1] < loss


@pytest.mark.parametrize("name", ["abacus", "coupling"])
def test_greedy_scoring_reads_the_places(name):
    model = tiny_gpt(name)
    ids = torch.tensor([addition.generate(s, 13).ids for s in range(4)])
    mask = torch.tensor(addition.generate(0, 13).mask)
    places = torch.tensor([addition.places(r) for r in ids.tolist()])
    out = greedy(model, ids, mask, places=places)
    want = ids.clone()
    with torch.no_grad():
        for a in mask.nonzero().squeeze(1).tolist():                     # recomputed, no cache
            want[:, a] = model(want[:, :a], places=places[:, :a])[0][:, -1].argmax(-1)
    assert torch.equal(out, want)
    exact, token = accuracy(model, addition, 13, samples=4)
    assert 0.0 <= exact <= token <= 1.0


@pytest.mark.parametrize("name, key", [("abacus", "abacus_rows"), ("coupling", "coupling_rows")])
def test_a_number_past_the_table_is_one_line(name, key):
    model = tiny_gpt(name, **{key: 4})
    with pytest.raises(ValueError, match=f"raise --{key} above 4"):
        model(torch.tensor([EXAMPLE]), places=torch.tensor([PLACES]))


def test_train_py_passes_the_tasks_places(tmp_path, monkeypatch):
    """train.py hands each batch's places (TaskData.places) to every forward, in training and evaluation."""
    real, seen = GPT.forward, []

    def forward(self, idx, targets=None, pos=None, doc=None, places=None):
        seen.append(places is not None and torch.equal(places, TaskData("addition").places(idx)))
        return real(self, idx, targets, pos, doc, places)

    monkeypatch.setattr(GPT, "forward", forward)
    argv = ["configs/abacus.py", "--n_layer=1", "--n_embd=32", "--block_size=16", "--batch_size=4", "--max_iters=2",
            "--eval_interval=2", "--eval_iters=1", "--device=cpu", "--wandb_log=False", f"--out_dir={tmp_path}"]
    assert run_train(argv) == 0
    assert len(seen) >= 2 + 2 * 2 and all(seen)                          # 2 steps, 2 evaluations x 2 splits


@pytest.mark.parametrize("argv", [["configs/tasks/copy.py", "--pos_encoding=abacus"],
                                  ["configs/rope.py", "--pos_encoding=coupling"],
                                  ["configs/tasks/copy.py", "--pos_encoding=abacus+alibi"]])
def test_an_encoding_reading_places_without_a_task_that_has_them_is_one_line(argv, capsys, tmp_path):
    err = train_error([*argv, f"--out_dir={tmp_path}"], capsys)
    assert "reads the places of digits that a task supplies" in err and "--task=addition" in err
