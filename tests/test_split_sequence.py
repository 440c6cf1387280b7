"""Positions stay global, so that a context-parallel wrapper can shard a sequence: for every encoding,
the second part of a sequence, given its own (global) positions and the first part's KV cache, gives
the whole sequence's logits, from any split point and past the training length. An encoding whose
table ends before the sequence does refuses it, whole or split, in a ValueError that says so.

tests/test_encodings.py's cache test continues a cache by implicit positions, and
tests/test_position_training.py's by explicit ones one token a call (a window's ring, which takes
no explicit positions, is refused there); here the whole second part comes in one call."""
import pytest
import torch

import positional
from tests.conftest import tiny_gpt

BLOCK, T = 32, 40   # the sequence runs past the training length, where an offset bug would show


def halves(model, idx, split):
    """The logits of idx (B, T) as two calls through one KV cache: idx[:, :split], then the rest at its positions."""
    model.setup_cache(idx.shape[0], idx.shape[1])
    try:
        first = model(idx[:, :split])[0]
        second = model(idx[:, split:], pos=torch.arange(split, idx.shape[1]))[0]
        assert model.kv_cache.length == idx.shape[1]
    finally:
        model.clear_cache()
    return torch.cat([first, second], 1)


@pytest.mark.parametrize("name", positional.REGISTRY)
@pytest.mark.parametrize("split", [1, T // 2, T - 1])
def test_the_second_part_at_its_positions_after_the_first_parts_cache_gives_the_whole(name, split):
    model = tiny_gpt(name, block_size=BLOCK)
    idx = torch.randint(0, 40, (2, T), generator=torch.Generator().manual_seed(split))
    limit = model.max_positions
    with torch.no_grad():
        if limit is not None and limit < T:            # a table of `limit` rows: refused, whole or split
            refused = rf"the {name} encoding knows {limit} positions, got a sequence reaching position \d+; crop"
            with pytest.raises(ValueError, match=refused):
                model(idx)
            with pytest.raises(ValueError, match=refused):
                halves(model, idx, split)
            return
        torch.testing.assert_close(halves(model, idx, split), model(idx)[0], rtol=1e-5, atol=1e-5)
