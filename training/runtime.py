"""Where a training run runs: its torchrun processes (DDP or FSDP2), device, dtype and autocast, and
the random states an exact resume restores."""
import os
import random
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from training.cli import autocast, pick_device, pick_dtype


@dataclass
class Runtime:
    """One training process: its rank among `world`, its device, and the autocast it trains under."""
    ddp: bool             # one of torchrun's processes (the model replicated by DDP, or sharded: fsdp)
    rank: int
    local_rank: int
    world: int
    device: str
    device_type: str      # cuda | mps | cpu
    dtype: str            # float32 | bfloat16 | float16
    ctx: object           # autocast context for forward passes (nullcontext in float32)
    scaler: object        # torch.amp.GradScaler, active in float16 only
    fsdp: bool = False    # the model sharded by FSDP2 (training/sharding.py) rather than replicated

    @property
    def master(self):
        return self.rank == 0  # rank 0 alone prints, evaluates, logs and saves


def start_runtime(device="auto", dtype="auto", backend="auto", parallel="ddp"):
    """Join the torchrun process group when RANK is set (else one process) and pick device and dtype.
    parallel: how torchrun's processes share the model, 'ddp' (a copy each) or 'fsdp' (sharded)."""
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
    device_type = device.split(":")[0]
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dtype = pick_dtype(dtype, device_type)
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
    return Runtime(ddp, rank, local_rank, world, device, device_type, dtype, autocast(device_type, dtype), scaler,
                   fsdp=ddp and parallel == "fsdp")


def stop_runtime(rt):
    if rt.ddp:
        dist.barrier()  # rank 0 may still be saving: leave together
        # gloo's worker thread frees each finished collective after the caller has its result, and freeing one
        # that holds a Python tensor takes the GIL; freeing the group joins that thread while holding the GIL.
        # So a group freed right after its last collective could deadlock (1 of 12 DDP runs hung so, stuck in
        # ~ProcessGroupGloo). Sleeping releases the GIL: the thread finishes its frees first.
        time.sleep(0.2)
        dist.destroy_process_group()


def seed_all(seed):
    """Seed torch, numpy and python; return a fresh generator for the data batches."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    return torch.Generator().manual_seed(seed)


def rng_state(data_gen):
    """Every random state a run draws from, as plain tensors, tuples and numbers (numpy's key
    array as a tensor), so that weights_only loading reads it."""
    kind, keys, *rest = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), *rest),
            "python": random.getstate(), "data": data_gen.get_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state, data_gen):
    """Restore rng_state's states (also an older checkpoint's, with numpy's keys as an ndarray)."""
    kind, keys, *rest = state["numpy"]
    torch.set_rng_state(state["torch"])
    np.random.set_state((kind, np.asarray(keys, dtype=np.int64).astype(np.uint32), *rest))
    random.setstate(state["python"])
    data_gen.set_state(state["data"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
