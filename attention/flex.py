"""FlexAttention (torch.nn.attention.flex_attention) for encodings with a score bias: the bias is computed inside
its score_mod, pe.score_bias(h, q_pos, k_pos) at each pair (its gradient flows), and hidden blocks are skipped
by its block mask (positional.base.sees). choose_kernel (attention/plan.py) takes it on CUDA, and on CPU
without gradients where asked (attention_kernel="flex"): it has no backward on CPU, and is dense uncompiled.

Whether it works for a model is decided once per device, before the first forward that would take it, by
Flex.usable: a probe runs it (with its backward on CUDA) on each of the model's biases at a small length; a
failure (FIRE's score_mod on CUDA, torch 2.11) gives one warning and SDPA for that model on that device.
"""
import types
import warnings

import torch

from positional.base import sees

PROBE_LENGTH = 128   # the CPU kernel errs below 128 queries at T = 8 mod 16 (torch 2.13, AVX2)


class Flex:
    """A model's FlexAttention: its compiled functions and, per device, whether it works for the model's
    encodings (probed at the first ask)."""

    def __init__(self, encodings=(), cpu=False):
        self.encodings = list(encodings)   # the model's encodings (the same modules wherever they move)
        self.cpu = cpu                  # taken on CPU too (without gradients, from PROBE_LENGTH queries)
        self.errors = {}                # device -> the probe's exception, or None: it works there
        self.compiled = None

    def usable(self, device):
        """Whether FlexAttention works on `device` for every encoding of the model (probed once per device)."""
        key = str(device)
        if key not in self.errors:
            self.errors[key] = probe(self, device, self.encodings)
        return self.errors[key] is None

    def functions(self, compiled=True):
        """(create_block_mask, flex_attention), compiled (the block mask built eagerly is dense) once per
        model: every model's score_mod is new to dynamo, which allows a code object 8 graphs."""
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        if not compiled:
            return create_block_mask, flex_attention
        if self.compiled is None:
            functions = (create_block_mask, flex_attention)
            self.compiled = tuple(torch.compile(own_code(f), dynamic=False) for f in functions)
        return self.compiled


def probe(flex, device, encodings):
    """None if FlexAttention runs on `device` for every encoding with a bias (forward, and backward on CUDA),
    else the first exception, said in one warning."""
    biased = [pe for pe in encodings if pe.overrides("score_bias") and not pe.overrides("attend")]
    pos = torch.arange(PROBE_LENGTH, device=device)
    grad = torch.device(device).type == "cuda"
    for pe in biased:
        H = getattr(pe, "n_head", 1)
        q = torch.randn(1, H, PROBE_LENGTH, 16, device=device, requires_grad=grad)
        ctx = types.SimpleNamespace(q_pos=pos, k_pos=pos, window=0, sinks=0, doc=None, pe=pe, flex=flex,
                                    memo={})
        try:
            with torch.inference_mode(False), torch.set_grad_enabled(grad):
                y = attention(q, q, q, ctx)
                if grad:
                    y.sum().backward()
        except Exception as e:  # the other kernels still work: SDPA for this model, with one warning
            warnings.warn(f"FlexAttention failed ({type(e).__name__}: {str(e).strip()[:200]}); "
                          f"using SDPA for this model")
            return e
    return None


def own_code(fn):
    """fn with a copy of its code object (and its keyword defaults): dynamo counts recompilations per code object."""
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def at_index(pos):
    """i -> pos[i] in FlexAttention's mods: i + pos[0] when the positions are consecutive (no table read per pair)."""
    first = pos[0]
    return (lambda i: i + first) if bool((pos.diff() == 1).all()) else (lambda i: pos[i])


def attention(q, k, v, plan, compiled=True):
    """FlexAttention over plan's positions (plan.pe's score_bias in its score_mod, plan.flex's functions), the
    block mask made once per plan (its memo). Compiled now with gradients: its backward lowers at the forward."""
    block_mask, flex = plan.flex.functions(compiled)
    qp, kp, pe, doc = at_index(plan.q_pos), at_index(plan.k_pos), plan.pe, plan.doc

    def visible(b, h, qi, ki):
        seen = sees(qp(qi), kp(ki), plan.window, plan.sinks)
        return seen if doc is None else seen & (doc[qi] == doc[ki])

    def score_mod(s, b, h, qi, ki):
        return s + pe.score_bias(h, qp(qi), kp(ki)).to(s.dtype)
    if "block_mask" not in plan.memo:   # once per plan: its layers share it
        plan.memo["block_mask"] = block_mask(visible, None, None, len(plan.q_pos), len(plan.k_pos), device=q.device)
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=torch.is_grad_enabled()):   # its backward
        return flex(q, k, v, score_mod=score_mod, block_mask=plan.memo["block_mask"])
