"""wandb logging that never blocks: with no credentials (or WANDB_MODE=offline) a run is written
offline under out_dir/wandb, and one line names the folder to upload later with `wandb sync`."""
import netrc
import os
from dataclasses import asdict


def start_wandb(cfg, job_type="train", name=None, run_id=None):
    """A wandb run for Config `cfg`, tagged with its encoding, in cfg.wandb_group; run_id (a resumed
    run's, kept in its checkpoint) continues that run. None if wandb is not installed."""
    try:
        import wandb
    except ImportError:
        print("wandb: not installed (pip install wandb); not logging")
        return None
    mode, why = os.environ.get("WANDB_MODE") or None, None
    try:
        signed_in = bool(os.environ.get("WANDB_API_KEY")) or netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        signed_in = False
    if mode is None and not signed_in:
        mode, why = "offline", "no credentials"
    os.makedirs(cfg.out_dir, exist_ok=True)
    kwargs = dict(project=cfg.wandb_project, name=name or cfg.wandb_run_name or cfg.pos_encoding,
                  group=cfg.wandb_group or None, tags=[cfg.pos_encoding], config=asdict(cfg), dir=cfg.out_dir,
                  job_type=job_type, mode=mode, settings=wandb.Settings(init_timeout=60, silent=True), id=run_id,
                  resume="allow" if run_id else None)
    try:
        run = wandb.init(**kwargs)
    except Exception as e:  # no network, server down: keep the run, log offline
        why, kwargs["mode"] = f"could not go online ({type(e).__name__})", "offline"
        run = wandb.init(**kwargs)
    if kwargs["mode"] == "offline":
        sync_dir = getattr(run.settings, "sync_dir", None) or os.path.dirname(run.dir)   # out_dir/wandb/offline-run-*
        print(f"wandb: {why or 'WANDB_MODE=offline'}, logging offline; upload later with: wandb sync {sync_dir}")
    return run
