"""Positions sampled in training (training/sampling.py): ranges, order, chunk structure,
determinism by seed, and the errors."""
import pytest
import torch

from training.sampling import check, pose_positions, randomized_positions, sample


def test_randomized_positions_are_an_ordered_subset_of_the_range():
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(200):
        pos = randomized_positions(8, 64, g)
        assert pos.shape == (8,) and pos.dtype == torch.long
        assert (pos[1:] > pos[:-1]).all() and pos.min() >= 0 and pos.max() < 64   # strictly increasing, in [0, M)
        seen.update(pos.tolist())
    assert seen == set(range(64))                     # every position of the range gets used
    assert randomized_positions(8, 8).tolist() == list(range(8))   # M = n: the contiguous positions


def test_pose_keeps_chunks_contiguous_and_below_the_target():
    g = torch.Generator().manual_seed(1)
    reached = 0
    for _ in range(200):
        pos = pose_positions(16, 64, chunks=3, generator=g)
        steps = (pos[1:] - pos[:-1]).tolist()
        assert pos[0] == 0 and all(s >= 1 for s in steps) and pos[-1] < 64
        assert sum(s > 1 for s in steps) <= 2         # at most chunks - 1 skips; inside a chunk, step 1
        reached = max(reached, int(pos[-1]))
    assert reached > 48                               # positions far past the 16 trained tokens are seen
    assert pose_positions(16, 64, chunks=1).tolist() == list(range(16))
    assert pose_positions(16, 16, chunks=4).tolist() == list(range(16))   # no room to skip


def test_pose_two_chunks_by_hand():
    """Two chunks: positions 0..c-1, then c+u..n-1+u for one skip u in {0..target-n}."""
    skips = set()
    for seed in range(40):
        pos = pose_positions(6, 10, chunks=2, generator=torch.Generator().manual_seed(seed)).tolist()
        u = pos[-1] - 5
        cut = next((i for i in range(1, 6) if pos[i] != i), 6)
        assert pos == list(range(cut)) + [i + u for i in range(cut, 6)] and 0 <= u <= 4
        skips.add(u)
    assert skips == {0, 1, 2, 3, 4}


def test_same_seed_same_positions():
    a = sample("pose", 32, 256, 4, torch.Generator().manual_seed(7))
    b = sample("pose", 32, 256, 4, torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and sample("", 32, 256) is None


@pytest.mark.parametrize("args, message", [
    (("random", 16, 64), "position_sampling must be one of '', 'randomized', 'pose'"),
    (("randomized", 16, 8), "needs max_position >= block_size (16), got 8"),
    (("pose", 16, 64, 0), "pose_chunks must be in [1, block_size=16], got 0"),
])
def test_bad_settings_are_one_line(args, message):
    assert message in check(*args)
    assert check("pose", 16, 64, 2) is None and check("", 16, 0) is None
