"""Positions sampled in training (a trainer option): block_size tokens at positions spread over a
longer range, so that longer evaluations (positions 0..n-1) use positions the model has seen.

- randomized (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
  Generalization of Transformers", https://arxiv.org/abs/2305.16843): a sequence of n
  tokens takes an ordered random subset of [0, M) as its positions, M >> n:

      pos = sort(sample_without_replacement({0, ..., M - 1}, n))

- pose (Zhu et al. 2024, "PoSE: Efficient Context Window Extension of LLMs via
  Positional Skip-wise Training", https://arxiv.org/abs/2309.10400, section 3): the n
  positions are cut into `chunks` contiguous chunks at random points; chunk i keeps its
  consecutive positions shifted by a skip u_i, with 0 = u_0 <= u_1 <= ... drawn uniformly
  so that the last position stays below the target length L_t:

      u_i ~ U{u_(i-1), ..., L_t - n},   pos[chunk i] = arange(start_i, end_i) + u_i
"""
import torch

METHODS = ("", "randomized", "pose")


def check(method, n, max_position, chunks=2):
    """One line saying why (method, n tokens, range M or target L_t, chunks) cannot work, or None."""
    if method not in METHODS:
        return f"position_sampling must be one of {', '.join(repr(m) for m in METHODS)}, got {method!r}"
    if method and max_position < n:
        return (f"position_sampling={method} needs max_position >= block_size ({n}), got {max_position}; "
                f"e.g. --max_position={4 * n}")
    if method == "pose" and not 1 <= chunks <= n:
        return f"pose_chunks must be in [1, block_size={n}], got {chunks}"
    return None


def for_evaluation(method, n, max_position, generator=None):
    """(n,) positions a model trained with `method` is evaluated on, or None (0..n-1): a randomized model on
    sampled positions, as it was trained (Ruoss et al.'s evaluation samples them too; their code adds the noisy
    encodings at every call); PoSE's are the real positions of the longer input it was trained to reach."""
    return randomized_positions(n, max_position, generator) if method == "randomized" and n <= max_position else None


def randomized_positions(n, max_position, generator=None):
    """(n,) increasing positions: a uniform random n-subset of [0, max_position), sorted."""
    return torch.randperm(max_position, generator=generator)[:n].sort().values


def pose_positions(n, target, chunks=2, generator=None):
    """(n,) positions: `chunks` contiguous chunks of random lengths (>= 1 each), chunk i
    shifted by a skip u_i, 0 = u_0 <= u_1 <= ... <= target - n, so the last is < target."""
    cuts = (torch.randperm(n - 1, generator=generator)[:chunks - 1] + 1).sort().values   # chunk starts after 0
    bounds = [0, *cuts.tolist(), n]
    skips = [0]
    for _ in range(chunks - 1):
        skips.append(int(torch.randint(skips[-1], target - n + 1, (1,), generator=generator)))
    return torch.arange(n) + torch.tensor(skips).repeat_interleave(torch.tensor(bounds).diff())   # chunk i: + u_i


def sample(method, n, max_position, chunks=2, generator=None):
    """(n,) training positions of `method`, or None for contiguous 0..n-1."""
    if not method:
        return None
    if method == "randomized":
        return randomized_positions(n, max_position, generator)
    return pose_positions(n, max_position, chunks, generator)
