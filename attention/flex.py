"""FlexAttention (torch.nn.attention.flex_attention) for encodings with a score bias: the bias is computed inside
its score_mod, pe.score_bias(h, q_pos, k_pos) at each pair (its gradient flows), and hidden blocks are skipped
by its block mask (positional.base.sees); and for encodings forming their own logits that give a flex form
(OwnLogits.flex_form: queries, keys and values, and a bias read from small tables, FoX's, Shaw's, DeBERTa's).
choose_kernel (attention/plan.py) takes it on CUDA, and on CPU without gradients where asked
(attention_kernel="flex"): it has no backward on CPU, and is dense uncompiled. Compiled with dynamic shapes:
one compile per family of lengths (tests/test_flex_own.py counts them), not one per evaluation length.

Whether it works for a model is decided once per device, before the first forward that would take it, by
Flex.usable: a probe runs it (with its backward on CUDA) on each of the model's biases at a small length; a
failure (FIRE's score_mod on CUDA, torch 2.11) gives one warning and SDPA for that model on that device.
"""
import types
import warnings
from dataclasses import dataclass

import torch
import torch._functorch.config   # not imported by `import torch`: the backward-lowering switch below reads it

from positional.base import Ctx, sees

PROBE_LENGTH = 128   # the CPU kernel errs below 128 queries at T = 8 mod 16 (torch 2.13, AVX2)


class Flex:
    """A model's FlexAttention: its compiled functions and, per device, whether it works for the model's
    encodings (probed at the first ask)."""

    def __init__(self, encodings=(), cpu=False, n_head=1, n_embd=16):
        self.encodings = list(encodings)   # the model's encodings (the same modules wherever they move)
        self.cpu = cpu                  # taken on CPU too (without gradients, from PROBE_LENGTH queries)
        self.n_head, self.n_embd = n_head, n_embd   # the model's shape: the probe's inputs for flex forms
        self.errors = {}                # device -> the probe's exception, or None: it works there
        self.compiled = {}              # dynamic (bool) -> the compiled functions
        self.static = None              # the exception that made it compile per length instead, or None

    @classmethod
    def of(cls, cfg, encodings):
        """A model's (GPTConfig cfg): taken on CPU too where attention_kernel is "flex"."""
        return cls(encodings, cfg.attention_kernel == "flex", cfg.n_head, cfg.n_embd)

    def usable(self, device):
        """Whether FlexAttention works on `device` for every encoding of the model (probed once per device)."""
        key = str(device)
        if key not in self.errors:
            self.errors[key] = probe(self, device, self.encodings)
        return self.errors[key] is None

    def functions(self, compiled=True, dynamic=True):
        """(create_block_mask, flex_attention), compiled (the block mask built eagerly is dense) once per
        model: every model's score_mod is new to dynamo, which allows a code object 8 graphs. Dynamic shapes:
        a new length reuses the graphs of its family (torch 2.13 CPU: one more compile from 128 to 160 tokens,
        then none at 200), where a static compile makes one per evaluation length."""
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        if not compiled:
            return create_block_mask, flex_attention
        if dynamic not in self.compiled:
            functions = (create_block_mask, flex_attention)
            self.compiled[dynamic] = tuple(torch.compile(own_code(f), dynamic=dynamic) for f in functions)
        return self.compiled[dynamic]


@dataclass(frozen=True, eq=False)
class ProbeCtx(Ctx):
    """The probe's forward: its positions, the encoding and the model's FlexAttention (as a plan has them)."""
    pe: object = None
    flex: Flex = None


def probe(flex, device, encodings):
    """None if FlexAttention runs on `device` for every encoding with a bias or a flex form (forward, and
    backward on CUDA), else the first exception, said in one warning."""
    taken = [pe for pe in encodings if pe.overrides("score_bias") and not pe.overrides("attend") or pe.flex_formed]
    pos = torch.arange(PROBE_LENGTH, device=device)
    grad = torch.device(device).type == "cuda"
    for pe in taken:
        H, D = (flex.n_head, flex.n_embd // flex.n_head) if pe.flex_formed else (getattr(pe, "n_head", 1), 16)
        q = torch.randn(1, H, PROBE_LENGTH, D, device=device, requires_grad=grad)
        ctx = ProbeCtx(pos, pos, causal=True, n_positions=PROBE_LENGTH, pe=pe, flex=flex)
        try:
            with torch.inference_mode(False), torch.set_grad_enabled(grad):
                pe.read_input(torch.randn(1, PROBE_LENGTH, flex.n_embd, device=device), ctx, 0)
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
    if not bool((pos.diff() == 1).all()):
        return lambda i: pos[i]
    if int(pos[0]) == 0:   # no load: a read of pos[0] failed to build for dynamic lengths on CPU (torch 2.13)
        return lambda i: i
    first = pos[0]
    return lambda i: i + first


def attention(q, k, v, plan, layer=0, compiled=True):
    """FlexAttention over plan's positions (plan.pe's score_bias in its score_mod, or its flex form for `layer`;
    plan.flex's functions), the block mask made once per plan (its memo). Compiled now with gradients: its
    backward lowers at the forward."""
    block_mask = plan.flex.functions(compiled)[0]
    qp, kp, pe, doc = at_index(plan.q_pos), at_index(plan.k_pos), plan.pe, plan.doc

    def visible(b, h, qi, ki):
        seen = sees(qp(qi), kp(ki), plan.window, plan.sinks)
        return seen if doc is None else seen & (doc[qi] == doc[ki])

    scale, bias = None, lambda b, h, qi, ki: pe.score_bias(h, qp(qi), kp(ki))
    if pe.flex_formed:   # logits qa_i . ka_j + bias, the scale in qa
        q, k, v, form = pe.flex_form(q, k, v, plan, layer)
        scale, bias = 1.0, None if form is None else (lambda b, h, qi, ki: form(b, h, qi, ki, qp, kp))

    def score_mod(s, b, h, qi, ki):
        return s + bias(b, h, qi, ki).to(s.dtype)
    if "block_mask" not in plan.memo:   # once per plan: its layers share it
        plan.memo["block_mask"] = block_mask(visible, None, None, len(plan.q_pos), len(plan.k_pos), device=q.device)

    def run(dynamic):
        with torch._functorch.config.patch(force_non_lazy_backward_lowering=torch.is_grad_enabled()):   # backward
            return plan.flex.functions(compiled, dynamic)[1](q, k, v, score_mod=score_mod if bias else None,
                                                              block_mask=plan.memo["block_mask"], scale=scale)
    if not compiled or plan.flex.static is not None:
        return run(False)
    try:
        return run(True)
    except torch._inductor.exc.InductorError as e:   # CPU, torch 2.13: a window's mask failed to build for dynamic
        plan.flex.static = e                         # lengths (cur_qSplitSize undeclared); per length from now on
        return run(False)
