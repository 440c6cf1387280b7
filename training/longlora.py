"""LongLoRA's fine-tune (Chen et al., ICLR 2024, arXiv:2309.12307; docs/extrapolation.md): at the longer
length, S²-Attn in training (the model key s2_group, positional/base.py shifted_groups; full attention at
evaluation and generation) and LoRA (Hu et al., ICLR 2022, arXiv:2106.09685) on the chosen linear layers,
each frozen W (out, in) adapted by a trained low-rank update:

    y = W x + (alpha / r) B A x,    A (r, in) random (nn.Linear's init), B (out, r) zeros: it starts as W x

plus LongLoRA's "+": the embeddings, the normalisation layers and the encoding's own parameters (position
embeddings and bias tables) train too; every other weight is frozen. A checkpoint holds the merged weights
W + (alpha / r) B A under "model", a plain GPT that sample.py, evaluate.py and compare.py load as any
other, and under "lora" what an exact resume needs: the settings, the frozen W and A, B of each layer.
Written here (a few dozen lines) rather than with HF peft: peft adds a dependency and wraps modules by name for
the same few lines, and its merge and save would still need this repo's checkpoint format.
"""
import math

import torch
from torch import nn

TARGETS = {"qkv": ("attn.c_attn",), "proj": ("attn.c_proj",), "mlp": ("mlp.c_fc", "mlp.c_proj")}   # lora_targets


class LoRALinear(nn.Module):
    """base(x) + (alpha / r) B A x, with base (an nn.Linear) frozen."""

    def __init__(self, base: nn.Linear, rank, alpha):
        super().__init__()
        self.base, self.scale = base.requires_grad_(False), alpha / rank
        w = base.weight
        self.A = nn.Parameter(torch.empty(rank, base.in_features, dtype=w.dtype, device=w.device))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=w.dtype, device=w.device))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))

    def forward(self, x):
        return self.base(x) + (x @ self.A.T) @ self.B.T * self.scale          # (B, T, out), never (out, in)

    def merged(self):
        """W + (alpha / r) B A: (out, in)."""
        return self.base.weight + self.scale * (self.B @ self.A)


def targets_problem(targets):
    """A sentence if lora_targets names no layer or an unknown one, else None."""
    names = [t for t in targets.split(",") if t]
    if not names or any(t not in TARGETS for t in names):
        return f"lora_targets must be a comma list of {', '.join(TARGETS)}, got {targets!r}"
    return None


def settings(cfg):
    return dict(lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_targets=cfg.lora_targets)


def adapt(model, cfg, state=None):
    """Freeze `model`, put a LoRALinear on each of cfg.lora_targets and make the embeddings, norms and
    encodings trainable; then load `state` (a checkpoint's "lora", to resume). Returns the trained parameters."""
    model.requires_grad_(False)
    suffixes = tuple(s for t in cfg.lora_targets.split(",") if t for s in TARGETS[t])
    for name in [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.endswith(suffixes)]:
        parent, _, child = name.rpartition(".")
        lora = LoRALinear(model.get_submodule(name), cfg.lora_rank, cfg.lora_alpha)
        setattr(model.get_submodule(parent), child, lora)
    encodings = list(model.encodings.values())
    for m in model.modules():
        if isinstance(m, (nn.Embedding, nn.LayerNorm, nn.RMSNorm)) or m in encodings:
            m.requires_grad_(True)
    if state is not None:
        changed = [f"{k}={v!r}" for k, v in state["settings"].items() if settings(cfg)[k] != v]
        if changed:
            raise ValueError(f"the checkpoint's LoRA adapters have {', '.join(changed)}; resume with those values "
                             f"or start the fine-tune over in a new --out_dir")
        for name, weights in state["weights"].items():
            model.get_submodule(name).load_state_dict(weights)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def checkpoint_state(model, cfg):
    """{"model": the state dict of the plain GPT (adapters merged)}, and with adapters "lora": {settings,
    trained_params, weights: {layer: its LoRALinear's state (W, A, B)}} for an exact resume."""
    state, adapters = model.state_dict(), {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}
    if not adapters:
        return {"model": state}
    for name, m in adapters.items():
        for key in ("A", "B", "base.weight", "base.bias"):
            state.pop(f"{name}.{key}", None)
        state[f"{name}.weight"] = m.merged().detach()
        if m.base.bias is not None:
            state[f"{name}.bias"] = m.base.bias.detach()
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    weights = {n: m.state_dict() for n, m in adapters.items()}
    return {"model": state, "lora": {"settings": settings(cfg), "weights": weights, "trained_params": trained}}
