"""wandb logging that never blocks: with no credentials (or WANDB_MODE=offline) runs are
written offline under out_dir/wandb and can be uploaded later with `wandb sync`."""
import netrc
import os
from dataclasses import asdict


def has_credentials():
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def start_wandb(cfg, job_type="train", name=None):
    """Start a wandb run for config `cfg` (a Config): the encoding as a tag, runs of one
    comparison in one group. Returns the run, or None if wandb is not installed."""
    try:
        import wandb
    except ImportError:
        print("wandb: not installed (pip install wandb); not logging")
        return None
    mode = os.environ.get("WANDB_MODE") or None
    if mode is None and not has_credentials():
        mode = "offline"
        print(f"wandb: no credentials, logging offline to {cfg.out_dir}/wandb (upload later with `wandb sync`)")
    os.makedirs(cfg.out_dir, exist_ok=True)
    settings = wandb.Settings(init_timeout=60, silent=True)
    kwargs = dict(project=cfg.wandb_project, name=name or cfg.wandb_run_name or cfg.pos_encoding,
                  group=cfg.wandb_group or None, tags=[cfg.pos_encoding], config=asdict(cfg), dir=cfg.out_dir,
                  job_type=job_type, mode=mode, settings=settings)
    try:
        return wandb.init(**kwargs)
    except Exception as e:  # no network, server down: keep the run, log offline
        print(f"wandb: could not go online ({type(e).__name__}); logging offline instead")
        kwargs["mode"] = "offline"
        return wandb.init(**kwargs)
