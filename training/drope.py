"""DroPE's fine-tune (Gelberg, Eguchi, Akiba & Cetin 2025, "Extending the Context of Pretrained LLMs by Dropping
Their Positional Embeddings", arXiv:2512.12167; docs/extrapolation.md): a model pretrained with RoPE has its
positional encoding removed, every other weight kept, and is recalibrated by a short training at the original
context length; it is then a NoPE model (positions from the causal mask alone), evaluated past that length with
no scaling. The authors' code (SakanaAI/DroPE at 260a8bb, custom_models/attention.py) makes the rotation the
identity (cos = 1, sin = 0) and ships, for each model, a plain recalibration and one that adds RMS-normalised
queries and keys (attention_type "qk_norm_nope", cfgs/run_cfg/*_drope_qk_norm.yaml): here --qk_norm=True at the
switch (a gain per head dimension, shared by the heads, starting at 1; theirs normalises the heads together). Their
attention may also take a fixed softmax scale in place of 1/sqrt(D) (a `softmax_scale` config entry, set by none of
their shipped configs): not offered here (logn_scaling is this repo's evaluation-time temperature).

train.py --init_from=resume --drop_positions=True: the checkpoint in out_dir must use a rotary encoding (or be such
a recalibration already, which then goes on); the model built is pos_encoding=none, so the checkpoints it writes load,
evaluate and sample as any NoPE model. The recalibration starts a new AdamW (the parameters may change: a rotary
encoding's own, qk_norm's gains), as the authors' trainer does.
"""
import positional
from training.config import ConfigError


def switch(cfg, old, trained):
    """Make cfg the NoPE model of the checkpoint (model keys `old`, training config `trained`) in cfg.out_dir;
    -> the model keys that differ from the checkpoint's because of the switch (none when it was made before).
    One-line ConfigError where there is no rotation to drop."""
    was, where = old["pos_encoding"], cfg.out_dir
    changes = ()
    if was == "none" and not trained.get("drop_positions"):
        raise ConfigError(f"the checkpoint in {where} has pos_encoding=none: it has no positions to drop; resume it "
                          f"without --drop_positions")
    if was != "none":
        if not positional.rotary(positional.REGISTRY[was]):
            raise ConfigError(f"drop_positions=True removes a rotary encoding (DroPE), and the checkpoint in {where} "
                              f"has pos_encoding={was}; fine-tune it without --drop_positions")
        if old["layer_encodings"]:
            raise ConfigError(f"the checkpoint in {where} has a per-layer pattern (layer_encodings="
                              f"{old['layer_encodings']!r}); drop_positions drops one encoding of every layer")
        if cfg.pos_encoding != was:
            raise ConfigError(f"checkpoint in {where} has pos_encoding={was}, config asks for {cfg.pos_encoding}; "
                              f"use the checkpoint's value (drop_positions=True then removes it)")
        changes = ("pos_encoding",) + ("qk_norm",) * (not old["qk_norm"])   # qk_norm may be added at the switch
    cfg.pos_encoding, cfg.rope_scaling = "none", ""
    cfg.pos_settings = positional.resolve("none")
    return changes


def weights(state, model):
    """The checkpoint's state dict without its encoding's entries (pe.*), with `model`'s own where the switch adds
    them (the encoding's, qk_norm's gains): what model.load_state_dict takes strictly."""
    own = model.state_dict()
    kept = {k: v for k, v in state.items() if not k.startswith("pe.")}
    new = ("q_norm.weight", "k_norm.weight")
    added = {k: v for k, v in own.items() if k not in kept and (k.startswith("pe.") or k.endswith(new))}
    return {**kept, **added}
