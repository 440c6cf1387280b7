"""Train a GPT with the positional encoding of your choice (docs/training.md).

    python train.py configs/rope.py                          # one process, CPU or one GPU
    python train.py configs/alibi.py --max_iters=500 --n_layer=2
    torchrun --standalone --nproc_per_node=4 train.py configs/rope.py   # DDP
    torchrun --standalone --nproc_per_node=4 train.py configs/rope.py --parallel=fsdp   # FSDP2: sharded
    python train.py --help                                   # every key, its default and meaning

Config files and --key=value overrides apply in order; a shorter --max_iters moves lr_decay_iters
and warmup_iters with it unless they are set too. Exit status (docs/reliability.md): 0 done; 2 bad
input; 1 a non-finite loss or weights, or a refused checkpoint write (the last good checkpoint is
kept); 130/143 stopped by SIGINT/SIGTERM after saving (resume with --init_from=resume).
"""
import glob
import math
import os
import shlex
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import positional
from data.loader import TokenData, ensure_prepared
from data.tokenizer import bits_per_byte, tokenizer_entry
from model import GPT, GPTConfig
from training import sampling as position_sampling
from tasks import TaskData
from tasks.data import curriculum_length
from training import checkpoint, copy_rows, cpu_threads, drope, longlora, mastery, sharding
from training.cli import fail, fmt_time, help_text
from training.config import ConfigError, gather, load_config, upgrade_model_args
from training.guard import StopSignal, lock_out_dir
from training.runlog import RunLog
from training.runtime import rng_state, seed_all, set_rng_state, start_runtime, stop_runtime

ROOT = os.path.dirname(os.path.abspath(__file__))
USAGE = "python train.py [CONFIG_FILE] [--key=value ...]"
# model keys a resumed run must keep (an encoding's settings are compared when its weights do not fit)
SHAPE_KEYS = ("n_layer", "n_head", "n_embd", "bias", "pos_encoding", "attention", "qk_norm", "ssmax", "layer_encodings")


@dataclass
class Progress:
    """Where the run stands: the top of iteration iter_num. Saved in and restored from the checkpoint."""
    iter_num: int = 0
    best_val: float = math.inf
    skipped: int = 0                # steps skipped for a non-finite loss (--on_nonfinite=skip)
    last_saved: int | None = None   # the iteration of the last checkpoint this run wrote or resumed from
    mastery: dict | None = None     # --stop_at_mastery's last check (training/mastery.py)
    wandb_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])   # its wandb run's; a resume continues it


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


def load_run(cfg):
    """(checkpoint or None, data, model): everything a user can get wrong is checked here, before anything
    is written."""
    torch.manual_seed(cfg.seed)  # the model's initial weights depend on the seed alone
    ckpt, path, dropped = None, checkpoint.path_in(cfg.out_dir), ()   # dropped: what DroPE's switch changes
    if cfg.init_from == "resume":
        ckpt = checkpoint.load(cfg.out_dir)
        if "optimizer" not in ckpt:
            raise checkpoint.CheckpointError(f"checkpoint {path} has no optimizer state, so it cannot be resumed "
                                             f"exactly; it can still be sampled from (sample.py)")
        old = upgrade_model_args(ckpt["model_args"])
        dropped = drope.switch(cfg, old, ckpt["config"]) if cfg.drop_positions else ()   # cfg: now NoPE
        for k in SHAPE_KEYS:
            if old[k] != getattr(cfg, k) and k not in dropped:
                raise ConfigError(f"checkpoint in {cfg.out_dir} has {k}={old[k]}, config asks for {getattr(cfg, k)}; "
                                  f"use the checkpoint's value or a new --out_dir")
        # fine-tuning at a longer block_size: settings meaning "the training length" keep the old one
        cfg.pos_settings = positional.pin_lengths(cfg.pos_settings, old["block_size"])
    if cfg.task:  # a synthetic task (tasks/): generated batches, loss on the answer tokens only
        data = TaskData(cfg.task)
    else:
        ensure_prepared(cfg.data_dir, cfg.dataset)
        data = TokenData(os.path.join(cfg.data_dir, cfg.dataset))
    data.check(cfg.block_size)
    if cfg.documents != "stream":   # aligned and masked rows need the dataset's document boundaries
        data.document_starts("train", cfg.block_size)
    cfg.vocab_size = data.vocab_size or 50304  # nanoGPT's padded GPT-2 vocabulary when there is no meta.pkl
    if ckpt is not None and old["vocab_size"] != cfg.vocab_size:
        raise ConfigError(f"checkpoint has vocab_size={old['vocab_size']}, dataset {cfg.dataset!r} has "
                          f"{cfg.vocab_size}; resume on the data it was trained on")
    model = GPT(GPTConfig(**cfg.model_args()))
    if cfg.parallel == "fsdp" and sharding.problem(model):
        raise ConfigError(sharding.problem(model))
    if ckpt is not None:
        try:
            model.load_state_dict(drope.weights(ckpt["model"], model) if dropped else ckpt["model"])
        except RuntimeError as e:
            why = next((line.strip() for line in str(e).splitlines()[1:] if line.strip()), str(e))
            changed = [f"{k} {old['pos_settings'][k]!r} -> {v!r}" for k, v in cfg.pos_settings.items()
                       if old["pos_settings"].get(k, v) != v]
            hint = f" (settings changed since the checkpoint: {', '.join(changed)})" if changed else ""
            raise ConfigError(f"checkpoint weights do not fit the configured model: {why}{hint}")
    if cfg.finetune_method:  # LongLoRA: adapters on the frozen checkpoint, or the adapters it was saved with
        longlora.adapt(model, cfg, ckpt.get("lora"))
    if cfg.init_from == "scratch" and not cfg.eval_only and not cfg.overwrite and os.path.exists(path):
        raise ConfigError(f"{path} already exists and a scratch run would overwrite it; resume it with "
                          f"--init_from=resume, start over with --overwrite=True, or use another --out_dir")
    return ckpt, data, model


def usage():
    """The usage line and the config files train.py takes (not compare.py's, not the shared bases)."""
    configs = []
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)):
        try:
            if os.path.basename(path) != "base.py":
                gather([path])   # a config of compare.py has keys train.py does not take
                configs.append(os.path.relpath(path, ROOT))
        except ConfigError:
            pass
    return f"usage: {USAGE}   (--help: every key)\nconfigs: {' '.join(configs)}"


def main(argv):
    if {"-h", "--help"} & set(argv):
        print(help_text(__doc__, USAGE, {}, [], training=True))
        return
    if not argv:
        print(usage(), file=sys.stderr)
        sys.exit(2)
    lock, master = None, int(os.environ.get("RANK", 0)) == 0
    try:
        cfg = load_config(argv, say=print if master else None)
        ckpt, data, model = load_run(cfg)
        if ckpt is not None and ckpt["iter_num"] >= cfg.max_iters and not cfg.eval_only:
            if master:
                decay = (f" (the learning rate stays at min_lr past lr_decay_iters={cfg.lr_decay_iters}; raise it "
                         f"too for a new decay)" if cfg.decay_lr and cfg.lr_decay_iters else "")
                print(f"{checkpoint.path_in(cfg.out_dir)} is already at iteration {ckpt['iter_num']}, and max_iters "
                      f"is {cfg.max_iters}: nothing to train. To train longer, resume with --max_iters=N for some "
                      f"N > {ckpt['iter_num']}{decay}")
            return
        if mastery.reached_before(ckpt, cfg) is not None and not cfg.eval_only:
            if master:
                print(f"{checkpoint.path_in(cfg.out_dir)} reached stop_at_mastery={cfg.stop_at_mastery} at iteration "
                      f"{mastery.reached_before(ckpt, cfg)}: nothing to train (a higher bar trains on)")
            return
        if master and not cfg.eval_only:  # rank 0 alone writes out_dir
            lock = lock_out_dir(cfg.out_dir)
            checkpoint.remove_partial(cfg.out_dir)  # tmp files of a save that was killed
    except (ValueError, FileNotFoundError, RuntimeError) as e:
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
        if lock is not None:
            os.close(lock)   # releases the flock
    if code:
        # Under torchrun the launcher SIGTERMs the ranks still alive once one exits non-zero: this
        # rank is already on its way out with `code`, which a late SIGTERM must not turn into -15.
        if "RANK" in os.environ:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.exit(code)


def say_start(cfg, resumed, model, rt, tokens_per_iter):
    """The run's resolved config, its size and where it runs; and a note when other work keeps this CPU busy."""
    config = "\n".join(f"  {k} = {v!r}" for k, v in asdict(cfg).items())
    print(f"config ({'resumed from ' + cfg.out_dir if resumed else 'from scratch'}):\n{config}")
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"{model.pos_name}: {model.get_num_params() / 1e6:.2f}M parameters ({trained:,} trained), "
          f"{tokens_per_iter:,} tokens/iter, device {rt.device}, {rt.dtype}, {rt.world} process(es)")
    # a machine other work keeps busy trains slower: said once (under DDP the ranks are each other's work)
    busy = cpu_threads.busy_note() if rt.device_type == "cpu" and not rt.ddp else None
    if busy:
        print(busy)


def say_iter(it, it_start, t_last, loss, lr, tokens_per_iter, cfg, log):
    """The loop's progress line and log record, every log_interval iterations; -> now (the next line's start)."""
    now = time.time()
    dt = (now - t_last) / cfg.log_interval
    left = (now - log.t_start) / (it - it_start) * (cfg.max_iters - it)
    print(f"iter {it}/{cfg.max_iters}: loss {loss:.4f}, lr {lr:.2e}, {dt * 1000:.0f} ms/it, "
          f"{tokens_per_iter / dt:,.0f} tok/s, {fmt_time(left)} left")
    log("train", iter=it, tokens=it * tokens_per_iter, loss=loss, lr=lr, tokens_per_sec=tokens_per_iter / dt)
    return now


def train(argv, cfg, ckpt, data, model, stop):
    """Set-up, then the loop. Returns the process exit code (0 done, 1 non-finite, 128+signal stopped)."""
    rt = start_runtime(cfg.device, cfg.dtype, cfg.backend, cfg.parallel)
    data_gen = seed_all(cfg.seed + rt.rank)  # the batches' own generator, saved for an exact resume
    tokens_per_iter = cfg.gradient_accumulation_steps * rt.world * cfg.batch_size * cfg.block_size
    if rt.master:
        os.makedirs(cfg.out_dir, exist_ok=True)
        say_start(cfg, ckpt is not None, model, rt, tokens_per_iter)
    raw_model = model.to(rt.device)
    if rt.fsdp:  # sharded in place, before the optimizer sees its parameters (every rank loaded the same weights)
        sharding.shard(model, rt)
        if rt.master:
            print(sharding.held(model, rt))
    optimizer = model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2), rt.device_type)
    st = restore(ckpt, model, optimizer, data_gen, cfg, rt) if ckpt is not None else Progress()
    ckpt = None  # free memory
    if cfg.compile:
        model = torch.compile(model)
    eval_model = model  # evaluation runs on rank 0 alone, outside DDP (under FSDP on every rank, as the loop says)
    if rt.ddp and not rt.fsdp:  # the encodings' buffers are tables computed from the config: nothing to broadcast
        model = DDP(model, device_ids=[rt.local_rank] if rt.device_type == "cuda" else None, broadcast_buffers=False)
    log = RunLog(cfg, rt.master, st.wandb_id)
    it_start, t_last, code = st.iter_num, time.time(), 0
    log("start", iter=st.iter_num, params=raw_model.get_num_params(), tokens_per_iter=tokens_per_iter)
    while True:
        lr = lr_at(st.iter_num, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        at_eval = st.iter_num % cfg.eval_interval == 0 or st.iter_num >= cfg.max_iters
        if at_eval and st.iter_num > it_start and not finite(raw_model, rt):
            code = stop_nonfinite("the weights are not finite", st.iter_num, st, rt)
            break
        if at_eval and (rt.master or rt.fsdp):   # a sharded model's forward needs every rank
            losses = estimate_loss(eval_model, data, cfg, rt)
            st.best_val = min(st.best_val, losses["val"])
        if at_eval and rt.master:
            bpb = f", val bits/byte {losses['val_bpb']:.4f}" if losses["val_bpb"] else ""
            print(f"step {st.iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}{bpb}")
            log("eval", iter=st.iter_num, tokens=st.iter_num * tokens_per_iter, train_loss=losses["train"],
                val_loss=losses["val"], lr=lr, val_bpb=losses["val_bpb"])
        reached = at_eval and st.iter_num > it_start and mastery.check(raw_model, cfg, st, rt, log)
        if at_eval and st.iter_num > it_start and not cfg.eval_only:  # every rank: save gathers their RNG states
            save(cfg, raw_model, optimizer, st, data, data_gen, rt, losses["val"] if rt.master else None)
        if st.iter_num >= cfg.max_iters or cfg.eval_only or reached:
            break

        loss, bad, signum = step(model, optimizer, data, data_gen, cfg, rt, stop, st.iter_num)
        if bad and cfg.on_nonfinite == "stop":
            code = stop_nonfinite(f"the training loss is {loss}", st.iter_num + 1, st, rt)
            break
        if bad:  # skip: this step's gradients were dropped; count it and move on
            st.skipped += 1
            if rt.master:
                print(f"iter {st.iter_num + 1}: loss {loss}, step skipped ({st.skipped} so far)")
        st.iter_num += 1

        if st.iter_num % cfg.log_interval == 0 and rt.master:
            t_last = say_iter(st.iter_num, it_start, t_last, loss, lr, tokens_per_iter, cfg, log)

        if signum and st.iter_num < cfg.max_iters:  # SIGINT/SIGTERM: save this step, for an exact resume
            code = 128 + signum  # (in the last step the run simply finishes); 130 SIGINT, 143 SIGTERM
            if not finite(raw_model, rt):
                code = stop_nonfinite("the weights are not finite", st.iter_num, st, rt)
            else:
                save(cfg, raw_model, optimizer, st, data, data_gen, rt, None)
                say_stopped(signum, st, cfg, argv, rt)
            break

    if rt.master and not code:
        print(f"done: {st.iter_num} iterations in {fmt_time(time.time() - log.t_start)}, best val loss "
              f"{st.best_val:.4f}; checkpoint in {checkpoint.path_in(cfg.out_dir)}"
              + (f"; {st.skipped} step(s) skipped for a non-finite loss" if st.skipped else ""))
        log("done", iter=st.iter_num)
    log.close(code, st.best_val, st.skipped)
    stop_runtime(rt)
    return code


def restore(ckpt, model, optimizer, data_gen, cfg, rt):
    """Load the optimizer and, for an exact resume, the random states; return where the run stands."""
    same = ("lora" in ckpt) == bool(cfg.finetune_method) and ckpt["model_args"].get("pos_encoding") == cfg.pos_encoding
    if same:   # else other parameters train now (LoRA's, or DroPE's switch: drope.py): a new optimizer
        if rt.fsdp:   # every rank read the whole state: each keeps its shard
            sharding.load_optimizer(model, optimizer, ckpt["optimizer"])
        else:
            optimizer.load_state_dict(ckpt["optimizer"])
    rngs = ckpt.get("rng") or []
    rngs = [rngs] if isinstance(rngs, dict) else rngs   # one dict: written before every rank's states were kept
    if ckpt["config"].get("seed") == cfg.seed and len(rngs) == rt.world:   # else the batches differ anyway
        set_rng_state(rngs[rt.rank], data_gen)
    st = Progress(ckpt["iter_num"], ckpt.get("best_val_loss", math.inf), ckpt.get("nonfinite_skipped", 0),
                  last_saved=ckpt["iter_num"])
    st.wandb_id = ckpt.get("wandb_id") or st.wandb_id
    st.mastery = ckpt.get(mastery.MASTERY_KEY)
    return st


# ---- the pieces of one iteration ------------------------------------------------------------

def batch(data, split, gen, cfg, rt, it=None):
    """A batch on the run's device: inputs and targets (B, T), and with documents=masked each
    token's position in its document and its document's index in the row (B, T) (data/loader.py).
    it: the training iteration, for a task's length curriculum (None: evaluation, every length)."""
    kw = {} if cfg.documents == "stream" else {"documents": cfg.documents}
    if cfg.curriculum_iters and it is not None:
        kw["longest"] = curriculum_length(it, cfg.curriculum_iters, data.task.MIN_LENGTH, cfg.block_size)
    tensors = data.get_batch(split, cfg.batch_size, cfg.block_size, gen, **kw)
    if cfg.copy_rows and it is not None:   # training batches only: evaluation scores the corpus as it is
        span = (cfg.copy_min, cfg.copy_max)
        tensors = copy_rows.mix_copies(*tensors, cfg.copy_rows, span, cfg.vocab_size, gen)
    cuda = rt.device_type == "cuda"   # from pinned memory, the copy overlaps the compute
    return tuple((t.pin_memory() if cuda else t).to(rt.device, non_blocking=cuda) for t in tensors)


def forward_loss(model, x, y, pos=None, rows=(), places=None):
    """The batch's mean loss. With documents=masked, rows = (positions, document ids), (B, T) each:
    one forward per row, its positions restarting at each document, attention kept inside each.
    places: (B, T) a task's places of the tokens in their numbers (TaskData.places), or None."""
    if not rows:
        return model(x, y, pos, **({} if places is None else {"places": places}))[1]
    return sum(model(x[i:i + 1], y[i:i + 1], pos=p, doc=d)[1] for i, (p, d) in enumerate(zip(*rows))) / len(x)


def step(model, optimizer, data, data_gen, cfg, rt, stop, it):
    """One optimizer step over gradient_accumulation_steps micro-batches -> (loss, bad, signum): whether the
    loss is non-finite on any rank (then the weights stay as they were), and any rank's signal (0: none)."""
    n = cfg.gradient_accumulation_steps
    loss_sum = torch.zeros((), device=rt.device)
    for micro in range(n):
        if rt.ddp and not rt.fsdp:  # sync gradients on the last micro step only (FSDP reduce-scatters at each
            # micro step, so that no rank ever holds a whole gradient)
            model.require_backward_grad_sync = micro == n - 1
        x, y, *rows = batch(data, "train", data_gen, cfg, rt, it)
        places = data.places(x) if isinstance(data, TaskData) else None   # (B, T), or None: the task has none
        pos = position_sampling.sample(cfg.position_sampling, x.shape[1], cfg.max_position or cfg.block_size,
                                       cfg.pose_chunks, data_gen)   # (T,) on the host, or None: contiguous
        with rt.ctx:
            loss = forward_loss(model, x, y, pos, rows, places) / n
        rt.scaler.scale(loss).backward()
        loss_sum += loss.detach()
    # One host sync per step: a non-finite loss must be caught before it reaches the weights;
    # under DDP the ranks agree on it, and on a stop signal, with one small all-reduce.
    lossf = loss_sum.item()
    bad, signum = not math.isfinite(lossf), stop.signum or 0
    if rt.ddp:
        flags = torch.tensor([bad, signum], dtype=torch.float32, device=rt.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        bad, signum = bool(flags[0]), int(flags[1])
    if not bad:
        if cfg.grad_clip:
            rt.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        rt.scaler.step(optimizer)
        rt.scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return lossf, bad, signum


@torch.no_grad()
def estimate_loss(model, data, cfg, rt):
    """Mean loss over the same eval_iters batches per split at every evaluation, and the val
    loss in bits per byte (val_bpb; None for a task or a tokenizer that cannot say)."""
    out = {}
    model.eval()
    for split in ("train", "val"):
        gen = torch.Generator().manual_seed(cfg.seed + 10_000)
        losses = torch.zeros(cfg.eval_iters)
        for k in range(cfg.eval_iters):
            x, y, *rows = batch(data, split, gen, cfg, rt)
            places = data.places(x) if isinstance(data, TaskData) else None
            pos = position_sampling.for_evaluation(cfg.position_sampling,
                                                   x.shape[1],
                                                   cfg.max_position or cfg.block_size,
                                                   gen)   # None: contiguous
            with rt.ctx:
                losses[k] = forward_loss(model, x, y, pos, rows, places).item()
        out[split] = losses.mean().item()
    model.train()
    out["val_bpb"] = bits_per_byte(out["val"], data.bytes_per_token("val") if isinstance(data, TokenData) else None)
    return out


def finite(model, rt):
    """Checked before every save, so that NaNs never replace the last good checkpoint: the same answer on every
    rank (under DDP each holds the same weights; under FSDP its shard, and the ranks agree by an all-reduce)."""
    ok = all(torch.isfinite(sharding.local(p)).all() for p in model.parameters())
    return sharding.everywhere(ok, rt) if rt.fsdp else ok


def save(cfg, model, optimizer, st, data, data_gen, rt, val_loss):
    """Checkpoint the top of iteration st.iter_num. Every rank calls it: rank 0 writes every rank's RNG states."""
    rngs = [rng_state(data_gen)]
    if rt.ddp:
        rngs = [None] * rt.world if rt.master else None
        dist.gather_object(rng_state(data_gen), rngs, dst=0)
    state = sharding.full_state(model, optimizer) if rt.fsdp else None   # every rank gives its shards to rank 0
    if rt.master and not rt.fsdp:
        state = {**longlora.checkpoint_state(model, cfg), "optimizer": optimizer.state_dict()}
    if rt.master:
        checkpoint.save({**state, "model_args": cfg.model_args(), "config": asdict(cfg), "iter_num": st.iter_num,
                         "best_val_loss": st.best_val, "val_loss": val_loss, "rng": rngs, "wandb_id": st.wandb_id,
                         "nonfinite_skipped": st.skipped, "tokenizer": tokenizer_entry(data.meta),
                         mastery.MASTERY_KEY: st.mastery},
                        checkpoint.path_in(cfg.out_dir))
    st.last_saved = st.iter_num


def say_stopped(signum, st, cfg, argv, rt):
    if rt.master:
        resume = shlex.join(["python", "train.py", *(a for a in argv if not a.startswith("--init_from=")),
                             "--init_from=resume"])
        print(f"stopped by {signal.Signals(signum).name} at iter {st.iter_num}: saved "
              f"{checkpoint.path_in(cfg.out_dir)}; resume with:\n  {resume}", flush=True)


def stop_nonfinite(what, at, st, rt):
    """Say why the run stops without saving; return exit code 1."""
    if rt.master:
        kept = (f"the last good checkpoint (iter {st.last_saved}) is untouched" if st.last_saved is not None
                else "no checkpoint was written")
        print(f"error: {what} at iter {at}; stopped without saving: {kept}. Lower --learning_rate, "
              f"check --grad_clip, or pass --on_nonfinite=skip to skip such steps", file=sys.stderr)
    return 1


if __name__ == "__main__":
    main(sys.argv[1:])
