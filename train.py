"""Train a GPT with the positional encoding of your choice.

    python train.py configs/rope.py                          # one process, CPU or one GPU
    python train.py configs/alibi.py --max_iters=500 --n_layer=2
    torchrun --standalone --nproc_per_node=4 train.py configs/rope.py   # DDP

A flat script in the manner of nanoGPT's train.py. Nothing here depends on which
encoding is trained: that lives in positional/.

Exit status: 0 done; 2 bad input (one line, before anything is written); 1 a non-finite
loss or weights, or a checkpoint the disk refused (the last good checkpoint is kept); 130/143 stopped by SIGINT/SIGTERM
after saving the step it reached (resume with --init_from=resume). One process per
out_dir (guard.py); ckpt.pt is replaced atomically (checkpoint.py).
"""
import json
import math
import os
import random
import shlex
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

import checkpoint
import positional
from cli import fail, fmt_time, pick_device, pick_dtype
from config import ConfigError, describe, load_config, upgrade_model_args
from data.loader import TokenData, ensure_prepared
from data.tokenizer import tokenizer_entry
from guard import OutDirLock, StopSignal
from model import GPT, GPTConfig
from wandb_util import start_wandb

# model keys a resumed run must keep (an encoding's settings are compared when its weights do not fit)
SHAPE_KEYS = ("n_layer", "n_head", "n_embd", "bias", "vocab_size", "pos_encoding", "attention")


def rng_state(data_gen):
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "data": data_gen.get_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state, data_gen):
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    data_gen.set_state(state["data"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def lr_at(it, cfg):
    """Linear warmup, then cosine decay to min_lr at lr_decay_iters (nanoGPT's schedule)."""
    decay_iters = cfg.lr_decay_iters or cfg.max_iters
    if not cfg.decay_lr:
        return cfg.learning_rate
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if it >= decay_iters:
        return cfg.min_lr
    ratio = (it - cfg.warmup_iters) / max(1, decay_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)


def resume_hint(argv):
    args = [a for a in argv if not a.startswith("--init_from=")]
    return shlex.join(["python", "train.py", *args, "--init_from=resume"])


def setup(cfg):
    """Everything a user can get wrong is checked here, before any training starts."""
    torch.manual_seed(cfg.seed)  # the model's initial weights depend on the seed alone
    ckpt, path = None, checkpoint.path_in(cfg.out_dir)
    if cfg.init_from == "resume":
        ckpt = checkpoint.load(cfg.out_dir)
        if "optimizer" not in ckpt:
            raise checkpoint.CheckpointError(f"checkpoint {path} has no optimizer state, so it cannot be resumed "
                                             f"exactly; it can still be sampled from (sample.py)")
        for k in SHAPE_KEYS:
            have, want = ckpt["model_args"].get(k), getattr(cfg, k)
            if k != "vocab_size" and have != want:
                raise ConfigError(f"checkpoint in {cfg.out_dir} has {k}={have}, config asks for {want}; "
                                  f"use the checkpoint's value or a new --out_dir")
        # fine-tuning at a longer block_size: settings meaning "the training length" keep the old one
        cfg.pos_settings = positional.pin_lengths(cfg.pos_settings, ckpt["model_args"]["block_size"])
    ensure_prepared(cfg.data_dir, cfg.dataset)
    data = TokenData(os.path.join(cfg.data_dir, cfg.dataset))
    data.check(cfg.block_size)
    cfg.vocab_size = data.vocab_size or 50304  # nanoGPT's padded GPT-2 vocabulary when there is no meta.pkl
    if ckpt is not None and ckpt["model_args"]["vocab_size"] != cfg.vocab_size:
        raise ConfigError(f"checkpoint has vocab_size={ckpt['model_args']['vocab_size']}, dataset "
                          f"{cfg.dataset!r} has {cfg.vocab_size}; resume on the data it was trained on")
    model = GPT(GPTConfig(**cfg.model_args()))
    if ckpt is not None:
        try:
            model.load_state_dict(ckpt["model"])
        except RuntimeError as e:
            why = next((line.strip() for line in str(e).splitlines()[1:] if line.strip()), str(e))
            old = upgrade_model_args(ckpt["model_args"])["pos_settings"]
            changed = [f"{k} {old[k]!r} -> {v!r}" for k, v in cfg.pos_settings.items() if k in old and old[k] != v]
            hint = f" (settings changed since the checkpoint: {', '.join(changed)})" if changed else ""
            raise ConfigError(f"checkpoint weights do not fit the configured model: {why}{hint}")
    if cfg.init_from == "scratch" and not cfg.eval_only and not cfg.overwrite and os.path.exists(path):
        raise ConfigError(f"{path} already exists and a scratch run would overwrite it; resume it with "
                          f"--init_from=resume, start over with --overwrite=True, or use another --out_dir")
    return ckpt, data, model


def main(argv):
    lock = None
    try:
        cfg = load_config(argv)
        ckpt, data, model = setup(cfg)
        if int(os.environ.get("RANK", 0)) == 0 and not cfg.eval_only:  # rank 0 alone writes out_dir
            lock = OutDirLock(cfg.out_dir).acquire()
            checkpoint.remove_partial(cfg.out_dir)  # tmp files of a save that was killed
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        if lock:
            lock.release()
        fail(e)
    try:
        with StopSignal() as stop:
            code = train(argv, cfg, ckpt, data, model, stop)
    except checkpoint.CheckpointWriteError as e:  # disk full, quota: stop, the last checkpoint stays
        print(f"error: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:  # a second Ctrl-C: no save, but ckpt.pt is whole (atomic saves)
        print(f"error: stopped at once by a second Ctrl-C; {checkpoint.path_in(cfg.out_dir)} holds the last "
              f"save, if any", file=sys.stderr)
        code = 130
    finally:
        if lock:
            lock.release()
    if code:
        sys.exit(code)


def train(argv, cfg, ckpt, data, model, stop):
    """The training loop; returns the process exit code (0 done, 1 non-finite, 128+signal stopped)."""

    # ---- processes and devices -------------------------------------------------------
    ddp = int(os.environ.get("RANK", -1)) != -1
    device = pick_device(cfg.device)
    rank, local_rank, world = 0, 0, 1
    if ddp:
        backend = cfg.backend if cfg.backend != "auto" else ("nccl" if device.startswith("cuda") else "gloo")
        init_process_group(backend=backend)
        rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
        if device.startswith("cuda"):
            device = f"cuda:{local_rank}"
            torch.cuda.set_device(device)
    master = rank == 0
    device_type = "cuda" if device.startswith("cuda") else ("mps" if device.startswith("mps") else "cpu")
    dtype = pick_dtype(cfg.dtype, device_type)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    ctx = nullcontext() if dtype == "float32" else torch.autocast(device_type=device_type, dtype=ptdtype)
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
    torch.manual_seed(cfg.seed + rank)
    np.random.seed(cfg.seed + rank)
    random.seed(cfg.seed + rank)
    data_gen = torch.Generator().manual_seed(cfg.seed + rank)
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    tokens_per_iter = cfg.gradient_accumulation_steps * world * cfg.batch_size * cfg.block_size
    if master:
        os.makedirs(cfg.out_dir, exist_ok=True)
        print(f"config ({'resumed from ' + cfg.out_dir if ckpt else 'from scratch'}):\n{describe(cfg)}")
        print(f"{model.pe.name}: {model.get_num_params() / 1e6:.2f}M parameters, {tokens_per_iter:,} tokens/iter, "
              f"device {device}, {dtype}, {world} process(es)")

    model.to(device)
    optimizer = model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2), device_type)
    iter_num, best_val, skipped, last_saved = 0, float("inf"), 0, None
    if ckpt is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
        iter_num, best_val = ckpt["iter_num"], ckpt.get("best_val_loss", best_val)
        skipped, last_saved = ckpt.get("nonfinite_skipped", 0), iter_num
        if ckpt.get("rng") and ckpt["config"].get("seed") == cfg.seed and world == 1:
            set_rng_state(ckpt["rng"], data_gen)
        ckpt = None  # free memory
    raw_model = model
    if cfg.compile:
        model = torch.compile(model)
    eval_model = model  # evaluation runs on rank 0 alone, outside DDP
    if ddp:  # the encodings' buffers are tables computed from the config: nothing to broadcast
        model = DDP(model, device_ids=[local_rank] if device_type == "cuda" else None, broadcast_buffers=False)

    def batch(split, gen):
        x, y = data.get_batch(split, cfg.batch_size, cfg.block_size, gen)
        if device_type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x.to(device), y.to(device)

    @torch.no_grad()
    def estimate_loss():
        """Mean loss over eval_iters batches per split; the same batches at every evaluation."""
        out = {}
        eval_model.eval()
        for split in ("train", "val"):
            gen = torch.Generator().manual_seed(cfg.seed + 10_000)
            losses = torch.zeros(cfg.eval_iters)
            for k in range(cfg.eval_iters):
                x, y = batch(split, gen)
                with ctx:
                    losses[k] = eval_model(x, y)[1].item()
            out[split] = losses.mean().item()
        eval_model.train()
        return out

    def finite_weights():
        """Checked before every save, so that NaNs never replace the last good checkpoint. DDP keeps
        the weights identical on every rank, so all ranks reach the same answer without talking."""
        return all(torch.isfinite(p).all() for p in raw_model.parameters())

    def save(val_loss):
        """Checkpoint the state at the top of iteration iter_num."""
        checkpoint.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                         "model_args": cfg.model_args(), "config": asdict(cfg), "iter_num": iter_num,
                         "best_val_loss": best_val, "val_loss": val_loss, "rng": rng_state(data_gen),
                         "nonfinite_skipped": skipped, "tokenizer": tokenizer_entry(data.meta)},
                        checkpoint.path_in(cfg.out_dir))
        nonlocal last_saved
        last_saved = iter_num

    def stop_nonfinite(what, at):
        if master:
            kept = (f"the last good checkpoint (iter {last_saved}) is untouched" if last_saved is not None
                    else "no checkpoint was written")
            print(f"error: {what} at iter {at}; stopped without saving: {kept}. Lower --learning_rate, "
                  f"check --grad_clip, or pass --on_nonfinite=skip to skip such steps", file=sys.stderr)
        return 1

    run = start_wandb(cfg) if cfg.wandb_log and master else None
    # a machine-readable log next to the checkpoint (compare.py reads it); appended on resume
    append = cfg.init_from == "resume" or cfg.eval_only
    log_file = open(os.path.join(cfg.out_dir, "log.jsonl"), "a" if append else "w") if master else None

    def log_row(**row):
        if log_file:
            log_file.write(json.dumps(dict(row, elapsed=round(time.time() - t_start, 3))) + "\n")
            log_file.flush()

    # ---- the loop ------------------------------------------------------------------
    t_start, t_last, it_start, code = time.time(), time.time(), iter_num, 0
    log_row(event="start", iter=iter_num, params=raw_model.get_num_params(), tokens_per_iter=tokens_per_iter)
    while True:
        lr = lr_at(iter_num, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        at_eval = iter_num % cfg.eval_interval == 0 or iter_num >= cfg.max_iters
        if at_eval and iter_num > it_start and not finite_weights():
            code = stop_nonfinite("the weights are not finite", iter_num)
            break
        if at_eval and master:
            losses = estimate_loss()
            best_val = min(best_val, losses["val"])
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            log_row(event="eval", iter=iter_num, tokens=iter_num * tokens_per_iter, train_loss=losses["train"],
                    val_loss=losses["val"], lr=lr)
            if run:
                run.log({"iter": iter_num, "train/loss": losses["train"], "val/loss": losses["val"], "lr": lr,
                         "tokens": iter_num * tokens_per_iter}, step=iter_num)
            if iter_num > it_start and not cfg.eval_only:
                save(losses["val"])
        if iter_num >= cfg.max_iters or cfg.eval_only:
            break

        loss_sum = torch.zeros((), device=device)
        for micro in range(cfg.gradient_accumulation_steps):
            if ddp:  # sync gradients on the last micro step only
                model.require_backward_grad_sync = micro == cfg.gradient_accumulation_steps - 1
            x, y = batch("train", data_gen)
            with ctx:
                _, loss = model(x, y)
                loss = loss / cfg.gradient_accumulation_steps
            scaler.scale(loss).backward()
            loss_sum += loss.detach()
        # One host sync per step: a non-finite loss must be caught before it reaches the weights.
        # Under DDP the ranks agree on it (and on a stop signal) with one small all-reduce.
        bad, signum = not torch.isfinite(loss_sum).item(), stop.signum or 0
        if ddp:  # a signal that reached one rank stops them all
            flags = torch.tensor([bad, signum], dtype=torch.float32, device=device)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            bad, signum = bool(flags[0]), int(flags[1])
        if bad and cfg.on_nonfinite == "stop":
            code = stop_nonfinite(f"the training loss is {loss_sum.item()}", iter_num + 1)
            break
        if bad:  # skip: drop this step's gradients, count it, move on
            skipped += 1
            if master:
                print(f"iter {iter_num + 1}: loss {loss_sum.item()}, step skipped ({skipped} so far)")
        else:
            if cfg.grad_clip:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        iter_num += 1

        if iter_num % cfg.log_interval == 0 and master:
            now = time.time()
            dt = (now - t_last) / cfg.log_interval
            t_last = now
            lossf = loss_sum.item()
            left = (now - t_start) / (iter_num - it_start) * (cfg.max_iters - iter_num)
            print(f"iter {iter_num}/{cfg.max_iters}: loss {lossf:.4f}, lr {lr:.2e}, {dt * 1000:.0f} ms/it, "
                  f"{tokens_per_iter / dt:,.0f} tok/s, {fmt_time(left)} left")
            log_row(event="train", iter=iter_num, tokens=iter_num * tokens_per_iter, loss=lossf, lr=lr,
                    tokens_per_sec=tokens_per_iter / dt)
            if run:
                run.log({"iter": iter_num, "train/loss_step": lossf, "lr": lr, "tokens_per_sec": tokens_per_iter / dt},
                        step=iter_num)

        if signum and iter_num < cfg.max_iters:  # SIGINT/SIGTERM: save this step, for an exact resume
            # (in the last step, the run simply finishes: its final evaluation and save come next)
            code = 128 + signum  # the shell's convention: 130 SIGINT, 143 SIGTERM
            if not finite_weights():
                code = stop_nonfinite("the weights are not finite", iter_num)
            elif master:
                save(None)
                print(f"stopped by {signal.Signals(signum).name} at iter {iter_num}: saved "
                      f"{checkpoint.path_in(cfg.out_dir)}; resume with:\n  {resume_hint(argv)}", flush=True)
            break

    if master and not code:
        print(f"done: {iter_num} iterations in {fmt_time(time.time() - t_start)}, best val loss {best_val:.4f}; "
              f"checkpoint in {checkpoint.path_in(cfg.out_dir)}"
              + (f"; {skipped} step(s) skipped for a non-finite loss" if skipped else ""))
        log_row(event="done", iter=iter_num)
    if log_file:
        log_file.close()
    if run:
        run.summary["best_val_loss"] = best_val
        run.summary["nonfinite_skipped"] = skipped
        run.finish(exit_code=code)
    if ddp:
        dist.barrier()  # rank 0 may still be saving: leave together
        destroy_process_group()
    return code


if __name__ == "__main__":
    main(sys.argv[1:])
