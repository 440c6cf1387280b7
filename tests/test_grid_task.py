"""tasks/grid.py: the layout and answer of a small grid written out by hand, the width rule,
determinism, and a few training steps of 2-D RoPE on it."""
from tasks import grid
from tasks.common import PAD, QRY, SEP
from tests.inproc import run_train


def test_a_small_grid_by_hand():
    """Length 30: W = 8, R = (29 - 8) // 8 = 2 rows after 30 - 24 = 6 PADs, then the answer row."""
    ex = grid.generate(0, 30)
    ids = ex.ids
    assert ids[:6] == [PAD] * 6 and {ids[6], ids[14]} == {PAD, QRY} and ids[22] == SEP
    marked = 6 if ids[6] == QRY else 14
    assert ids[23:] == ids[marked + 1:marked + 8] and ex.mask == [False] * 23 + [True] * 7
    fixed = [PAD, PAD, 3, 4, 5, PAD, 6, 7, QRY, 8, 9, PAD, 10, 11, SEP, 8]    # W = 3: rows 5, 8, 11; answer row 14
    assert grid.reference(fixed) == [8, 9] and grid.reference(fixed[:15]) == [8, 9]


def test_width_grows_with_the_length():
    assert [grid.width(n) for n in (17, 64, 255, 256, 1023, 1024)] == [8, 8, 8, 16, 16, 32]
    ex = grid.generate(4, 300)                        # 16 columns, 17 rows after 300 - 18 * 16 = 12 PADs
    assert [ex.ids[12 + 16 * r] in (PAD, QRY) for r in range(17)] == [True] * 17 and ex.ids[12 + 16 * 17] == SEP
    assert sum(ex.mask) == 15 and ex.ids[-15:] == grid.reference(ex.ids)


def test_same_seed_same_grid_and_the_mark_moves():
    assert grid.generate(5, 64) == grid.generate(5, 64)
    assert len({grid.generate(s, 64).ids.index(QRY) for s in range(30)}) > 4


def test_rope_2d_trains_on_the_grid(tmp_path):
    argv = ["configs/tasks/grid.py", "--pos_encoding=rope_2d", "--grid_width=8", "--n_layer=1", "--n_head=2",
            "--n_embd=16", "--block_size=24", "--batch_size=4", "--max_iters=3", "--lr_decay_iters=3",
            "--warmup_iters=1", "--eval_interval=3", "--eval_iters=1", "--device=cpu", f"--out_dir={tmp_path}"]
    assert run_train(argv) == 0 and (tmp_path / "ckpt.pt").exists()
