"""The static decode step compiled ahead of time (AOTInductor; issue #22): `generate(..., compile=AheadOfTime)`.

torch.compile's step pays dynamo's frame and guard evaluation on every token (~100-150 us of a ~550 us step on the
2-core Xeon, docs/speed.md). Here the step is exported once (torch.export) and compiled into a package whose C++
runner is called directly: no frame, no guards. The package's copies of the weights are not used: the model's
parameters and the cache's buffers (keys, values, slot positions, what encodings keep: KVCache.state) are handed
to it by pointer (user-managed constants) at each generation's first step, so every model of the same
configuration and cache shape, in one process, runs the same compiled code, and the cache it writes is the
Decoder's own (the eager prefill and reset see it). Runners stay loaded for the process (RUNNERS).

The step attends to all of the cache's slots (one shape; slots not written yet hold a position after every query,
which the causal mask hides). A step that cannot be exported falls back to torch.compile's, with one warning.
"""
import os
import tempfile
import warnings

import torch

RUNNERS = {}   # (configuration, constants' shapes, input shapes) -> [runner, the AheadOfTime whose tensors it holds]


class Step(torch.nn.Module):
    """decode_step over the model's own cache (model.kv_cache), n_slots fixed: what is exported."""

    def __init__(self, model, n_slots):
        super().__init__()
        self.m, self.n_slots = model, n_slots

    def forward(self, idx, pos):
        from generate import decode_step
        return decode_step(self.m, idx, pos, self.m.kv_cache, self.n_slots)


def constants(model):
    """{name in the exported step: tensor} of every parameter and buffer, the cache's included (shared ones twice)."""
    named = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))
    return {"m." + name: t for name, t in named}


def compile_step(model, n_slots, idx, pos):
    """The runner of a package compiled for this step's shapes (minutes on a 2-core CPU)."""
    with torch.no_grad(), warnings.catch_warnings():
        # the cache's per-call attributes (this call's slots) are set by every step before use: not state
        warnings.filterwarnings("ignore", message="The tensor attribute .* was assigned during export")
        warnings.filterwarnings("ignore", category=FutureWarning)
        program = torch.export.export(Step(model, n_slots), (idx, pos), strict=False)
        with tempfile.TemporaryDirectory() as folder:   # the runner keeps the loaded library; the file can go
            path = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(folder, "step.pt2"))
            return torch._inductor.aoti_load_package(path)


class AheadOfTime:
    """A drop-in for decode_step (model, idx, pos, cache, n_slots) -> logits by the compiled package, one instance
    per generation: its first step finds (or compiles) the package and hands it this model's and cache's tensors."""

    def __init__(self):
        self.fallback, self.entry, self.consts = None, None, None

    def __call__(self, model, idx, pos, cache, n_slots):
        if self.fallback is not None:
            return self.fallback(model, idx, pos, cache, n_slots)
        if self.entry is None:
            assert model.kv_cache is cache and n_slots == cache.size, "the exported step reads the model's whole cache"
            consts = constants(model)
            key = (repr(model.config), tuple((k, tuple(t.shape), t.dtype, t.device) for k, t in consts.items()),
                   tuple(idx.shape), n_slots)
            if key not in RUNNERS:
                try:
                    RUNNERS[key] = [compile_step(model, n_slots, idx, pos), None]
                except Exception as e:  # the other steps still work: torch.compile's for this generation
                    from generate import compiled_step
                    warnings.warn(f"the ahead-of-time step failed ({type(e).__name__}: {str(e)[:200]}); "
                                  "using torch.compile's")
                    self.fallback = compiled_step(repr(model.config), dynamic=False)
                    return self.fallback(model, idx, pos, cache, n_slots)
            self.entry = RUNNERS[key]
            self.consts = {k: consts[k] for k in self.entry[0].get_constant_fqns()}
        runner, owner = self.entry
        if owner is not self:  # another generation's tensors were loaded last: hand it ours (pointers, no copy)
            runner.load_constants(self.consts, check_full_update=True, user_managed=True)
            self.entry[1] = self
        return runner(idx, pos)
