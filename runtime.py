"""Where a run runs: device and dtype picking, the DDP processes, and the RNG states.

A library module (no command line): train.py uses all of it; sample, evaluate, compare and
bench use pick_device, pick_dtype and fmt_time.
"""
import os
import random
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

PTDTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(requested):
    """'auto' -> cuda, then mps, then cpu; anything else is returned as given."""
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(requested, device_type):
    """'auto' -> bfloat16 on a GPU that supports it, else float32."""
    if requested != "auto":
        return requested
    return "bfloat16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "float32"


def fmt_time(s):
    """Seconds as '4m05s' or '2h03m'."""
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


@dataclass
class Runtime:
    """One training process: its rank among `world`, its device, and the autocast it trains under."""
    ddp: bool
    rank: int
    local_rank: int
    world: int
    device: str
    device_type: str      # cuda | mps | cpu
    dtype: str            # float32 | bfloat16 | float16
    ctx: object           # autocast context for forward passes (nullcontext in float32)
    scaler: object        # torch.amp.GradScaler, active in float16 only

    @property
    def master(self):
        return self.rank == 0  # rank 0 alone prints, evaluates, logs and saves


def start_runtime(device="auto", dtype="auto", backend="auto"):
    """Join the torchrun process group when RANK is set (else one process) and pick device and dtype."""
    ddp = int(os.environ.get("RANK", -1)) != -1
    device = pick_device(device)
    rank, local_rank, world = 0, 0, 1
    if ddp:
        dist.init_process_group(backend=backend if backend != "auto" else
                                ("nccl" if device.startswith("cuda") else "gloo"))
        rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
        if device.startswith("cuda"):
            device = f"cuda:{local_rank}"
            torch.cuda.set_device(device)
    device_type = "cuda" if device.startswith("cuda") else ("mps" if device.startswith("mps") else "cpu")
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dtype = pick_dtype(dtype, device_type)
    ctx = nullcontext() if dtype == "float32" else torch.autocast(device_type=device_type, dtype=PTDTYPES[dtype])
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
    return Runtime(ddp, rank, local_rank, world, device, device_type, dtype, ctx, scaler)


def stop_runtime(rt):
    if rt.ddp:
        dist.barrier()  # rank 0 may still be saving: leave together
        dist.destroy_process_group()


def seed_all(seed):
    """Seed torch, numpy and python; return a fresh generator for the data batches."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    return torch.Generator().manual_seed(seed)


def rng_state(data_gen):
    """Every random state a run draws from, for an exact resume."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "data": data_gen.get_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state, data_gen):
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    data_gen.set_state(state["data"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
