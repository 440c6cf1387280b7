"""tasks/grid.py: the layout and answer of a small grid written out by hand, the width rule,
determinism, and a few training steps of 2-D RoPE on it."""
from tasks import grid
from tasks.common import PAD, QRY, SEP
from tests.inproc import run_train


def test_a_small_grid_by_hand():
    """Length 30: W = 6, R = (29 - 6) // 6 = 3 rows after 30 - 24 = 6 PADs, then the answer row."""
    ex = grid.generate(0, 30)
    ids = ex.ids
    assert ids[:6] == [PAD] * 6 and [ids[6 * r] for r in (1, 2, 3)] == [PAD] * 3 and ids[24] == SEP
    marker = 6 if ids[7] == QRY else 12                                          # row 0 or 1, not the last
    assert ids[marker + 1:marker + 6] == [QRY] * 5 and ids.count(QRY) == 5
    assert ids[25:] == ids[marker + 7:marker + 12] and ex.mask == [False] * 25 + [True] * 5
    fixed = [PAD, PAD, QRY, QRY, PAD, 5, 6, PAD, 7, 8, SEP, 5]      # W = 3: rows at 1, 4, 7; answer row at 10
    assert grid.reference(fixed) == [5, 6] and grid.reference(fixed[:11]) == [5, 6]


def test_width_grows_with_the_length():
    assert [grid.width(n) for n in (19, 64, 143, 144, 575, 576)] == [6, 6, 6, 12, 12, 24]
    ex = grid.generate(4, 300)                        # 12 columns, 23 rows after 300 - 24 * 12 = 12 PADs
    assert [ex.ids[12 + 12 * r] for r in range(24)] == [PAD] * 23 + [SEP] and ex.ids.count(QRY) == 11
    assert sum(ex.mask) == 11 and ex.ids[-11:] == grid.reference(ex.ids)


def test_same_seed_same_grid_and_the_mark_moves():
    assert grid.generate(5, 64) == grid.generate(5, 64)
    assert len({grid.generate(s, 64).ids.index(QRY) for s in range(30)}) > 4


def test_rope_2d_trains_on_the_grid(tmp_path):
    argv = ["configs/tasks/grid.py", "--pos_encoding=rope_2d", "--grid_width=6", "--n_layer=1", "--n_head=2",
            "--n_embd=16", "--block_size=24", "--batch_size=4", "--max_iters=3", "--lr_decay_iters=3",
            "--warmup_iters=1", "--eval_interval=3", "--eval_iters=1", "--device=cpu", f"--out_dir={tmp_path}"]
    assert run_train(argv) == 0 and (tmp_path / "ckpt.pt").exists()
