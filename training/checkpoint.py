"""Checkpoints: atomic saves (a temp file, fsync, rename), and loads with weights_only=True where
every way a file can be unusable is one CheckpointError (docs/reliability.md). The one loader of
trained runs: model, ckpt = load_model(out_dir, {"window": 64}, device); tokenizer_of(ckpt)."""
import glob
import os
import pickle
import tempfile

import numpy as np
import torch

# the project folder: recorded relative paths start here
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TMP_PREFIX = ".ckpt-"

# The globals an older checkpoint's numpy RNG state pickles (an ndarray of uint32, its dtype and dtype class)
LEGACY_GLOBALS = {"numpy._core.multiarray._reconstruct": np._core.multiarray._reconstruct,
                  "numpy.core.multiarray._reconstruct": np._core.multiarray._reconstruct,   # numpy < 2
                  "numpy.ndarray": np.ndarray, "numpy.dtype": np.dtype,
                  "numpy.dtypes.UInt32DType": np.dtypes.UInt32DType}


class CheckpointError(ValueError):
    """A checkpoint that cannot be used, in one sentence."""


class CheckpointWriteError(RuntimeError):
    """The new checkpoint could not be written (disk full, quota, permissions); the old one is intact."""


def remove_partial(out_dir):
    """Delete the temp files of a save that was killed; only while holding out_dir's lock (guard.py)."""
    for tmp in glob.glob(os.path.join(glob.escape(out_dir), TMP_PREFIX + "*.tmp")):
        os.remove(tmp)


def save(obj, path):
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        if not isinstance(e, Exception):  # KeyboardInterrupt, SystemExit: as they are
            raise
        # torch reports a failed write as a RuntimeError about stream positions: say what it means
        free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize if os.path.isdir(folder) else 0
        raise CheckpointWriteError(f"could not write {path} ({type(e).__name__}: {str(e).splitlines()[0]}; "
                                   f"{free / 1e6:,.0f} MB free there); the previous checkpoint is intact") from e
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def path_in(out_dir):
    return os.path.join(out_dir, "ckpt.pt")


def load(out_dir, map_location="cpu"):
    path = path_in(out_dir)
    if not os.path.isfile(path):
        config = f"configs/{os.path.basename(os.path.normpath(out_dir)).removeprefix('out-')}.py"   # out-alibi: alibi
        config = config if os.path.isfile(os.path.join(ROOT, config)) else "configs/<encoding>.py"
        raise CheckpointError(f"no checkpoint at {path}; train one first (python train.py {config} "
                              f"--out_dir={out_dir}) or point --out_dir at a folder with ckpt.pt")
    try:
        ckpt = read(path, map_location)
    except CheckpointError:
        raise
    except Exception as e:   # PyTorch's own text (hundreds of characters) stays in the chained exception
        raise CheckpointError(f"checkpoint {path} is unreadable (truncated or corrupt?) and was left untouched; "
                              f"restore it from a copy, or train anew with --overwrite=True") from e
    missing = [k for k in ("model", "model_args", "config", "iter_num") if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}: not written by this repo's train.py")
    return ckpt


def read(path, map_location="cpu"):
    """torch.load with weights_only=True; an older checkpoint's numpy globals allowed, nothing else."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        pass  # a global outside torch's safe set: which ones (listed, not run)?
    names = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    refused = sorted(names - set(LEGACY_GLOBALS))
    if refused:
        raise CheckpointError(f"refusing to load {path}: its pickle calls {', '.join(refused)}, which could run code "
                              f"(nothing was run); a posgpt checkpoint holds only tensors, numbers, strings and "
                              f"containers, and older ones numpy RNG arrays")
    with torch.serialization.safe_globals([(obj, n) for n, obj in LEGACY_GLOBALS.items()]):
        return torch.load(path, map_location=map_location, weights_only=True)


def build_model(ckpt, overrides=None, device="cpu", strict=True):
    """The model of a loaded checkpoint in eval mode, its config from config.model_config."""
    from training.config import ConfigError, model_config
    from model import GPT
    model = GPT(model_config(ckpt["model_args"], overrides, strict))
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:  # an override changed a weight shape (n_layer, n_embd, ...)
        why = next((line.strip() for line in str(e).splitlines()[1:] if line.strip()), str(e).splitlines()[0])
        raise ConfigError(f"the checkpoint's weights do not fit the model with {overrides}: {why}; "
                          f"drop the overrides that change shapes") from None
    return model.to(device).eval()


def load_model(out_dir, overrides=None, device="cpu", strict=True):
    """(model, ckpt) of out_dir/ckpt.pt; `overrides` may change inference-time keys."""
    ckpt = load(out_dir)
    return build_model(ckpt, overrides, device, strict), ckpt


def dataset_dir(ckpt, data_dir=None):
    """data_dir/dataset of a checkpoint's run; data_dir if given (as typed), else the recorded
    one, taken from the project folder if relative (never from the working directory)."""
    cfg = ckpt["config"]
    return os.path.join(data_dir or os.path.join(ROOT, cfg.get("data_dir", "data")), cfg.get("dataset", ""))


def tokenizer_of(ckpt):
    """(encode, decode, vocab_size) of a checkpoint: the tokenizer it carries, else its dataset's
    meta.pkl, else GPT-2 BPE for a GPT-2-sized vocabulary (as in nanoGPT)."""
    from data.tokenizer import GPT2, tokenizer_from
    if "tokenizer" in ckpt:
        return tokenizer_from(ckpt["tokenizer"])
    meta = os.path.join(dataset_dir(ckpt), "meta.pkl")
    if os.path.exists(meta):
        with open(meta, "rb") as f:
            return tokenizer_from(pickle.load(f), meta)
    if ckpt["model_args"].get("vocab_size", 0) >= 50257:
        return tokenizer_from(GPT2, "no meta.pkl found, so GPT-2 as in nanoGPT")
    raise CheckpointError(f"this checkpoint carries no tokenizer and {meta} does not exist, and its "
                          f"{ckpt['model_args'].get('vocab_size')}-id vocabulary is not GPT-2's: prepare that "
                          f"dataset again (for its meta.pkl) or retrain with the current train.py")
