"""Training batches of a task, with data.loader.TokenData's interface (get_batch, vocab_size, check), and the
places of a batch's tokens in their numbers where the task defines them (places).

Each example draws its length n uniformly from [MIN_LENGTH, block_size] (Ruoss et al. 2023), then its
content, from a seed of the caller's generator (even for train, odd for val: the splits share no
example, and a resume replays the same batches). The model reads the first n - 1 tokens; the targets
are the answer tokens and -1 (ignored by the loss) everywhere else, the right padding included.
"""
import torch

from tasks.common import PAD, char_meta
from tasks.registry import get


def curriculum_length(it, iters, shortest, block_size):
    """The longest training length at iteration it of a length curriculum: from the task's shortest at the first
    iteration, linearly, to block_size at iteration iters - 1 and after. Easy examples first; our schedule (for
    parity, Abbe, Cornacchia & Lotfi 2023, https://arxiv.org/abs/2306.16921, put sparse inputs first)."""
    return block_size if it >= iters - 1 else shortest + (block_size - shortest) * it // (iters - 1)


class TaskData:
    def __init__(self, name):
        self.name, self.task = name, get(name)
        self.vocab_size = self.task.VOCAB_SIZE
        self.meta = char_meta(self.vocab_size)   # the checkpoint's tokenizer: one character per id

    def check(self, block_size):
        if block_size < self.task.MIN_LENGTH:
            raise ValueError(f"task {self.name} cannot fill block_size={block_size}: its shortest sequence has "
                             f"{self.task.MIN_LENGTH} tokens; use --block_size>={self.task.MIN_LENGTH}")

    def get_batch(self, split, batch_size, block_size, generator, longest=None):
        """x: (B, block_size - 1) token ids, PAD on the right; y: (B, block_size - 1), -1 except at answers.
        longest: the longest length drawn (a curriculum's bound; None: block_size)."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be train or val, got {split!r}")
        self.check(block_size)
        seeds = torch.randint(2 ** 62, (batch_size,), generator=generator).tolist()
        lengths = torch.randint(self.task.MIN_LENGTH, (longest or block_size) + 1, (batch_size,),
                                generator=generator).tolist()
        x = torch.full((batch_size, block_size - 1), PAD, dtype=torch.long)
        y = torch.full((batch_size, block_size - 1), -1, dtype=torch.long)
        for i, (seed, n) in enumerate(zip(seeds, lengths)):
            ex = self.task.generate(2 * seed + (split == "val"), n)
            ids, answer = torch.tensor(ex.ids), torch.tensor(ex.mask)
            x[i, :n - 1] = ids[:-1]
            y[i, :n - 1] = torch.where(answer[1:], ids[1:], -1)
        return x, y

    def places(self, x):
        """(B, T) the task's places of x's tokens in their numbers (tasks/addition.py's places(), read by the
        positional encodings that use them: abacus, coupling), on x's device; None for a task without them."""
        of = getattr(self.task, "places", None)
        return None if of is None else places_of(of, x)


def places_of(of, ids):
    """(B, T) LongTensor of of(row) for each row of ids (B, T), on ids' device."""
    return torch.tensor([of(row) for row in ids.tolist()], dtype=torch.long, device=ids.device)
