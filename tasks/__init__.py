"""Synthetic length-generalisation tasks: one small file each, no dataset needed.

Each task module has
    generate(seed, length) -> Example(ids, mask)   exactly `length` tokens; mask = the answer tokens
    reference(ids) -> answer tokens                 computed from the question alone, so it also
                                                    answers a prefix that stops inside the answer
    VOCAB_SIZE, MIN_LENGTH
and optionally
    places(ids) -> ints, one a token                each token's place in its number (addition), for the
                                                    encodings that read it (abacus, coupling)
Same seed, same example. The answer's positions depend on the length alone (the scorer
decodes a batch in lockstep). The token scheme is in common.py.

    import tasks
    ex = tasks.get("copy").generate(seed=0, length=32)
    data = tasks.TaskData("copy")        # train.py's data source when --task is set
"""
from tasks.data import TaskData  # noqa: F401
from tasks.registry import REGISTRY, get  # noqa: F401
