"""Saving and loading checkpoints without ever leaving a half-written ckpt.pt.

save() writes to a temporary file in the same folder, flushes and fsyncs it, then
renames it over the target: a crash at any moment leaves either the old or the new
checkpoint on disk, never a mix. load() turns every way a file can be unusable into
one sentence (CheckpointError) and never modifies the file.
"""
import glob
import os
import tempfile

import torch


TMP_PREFIX = ".ckpt-"


class CheckpointError(ValueError):
    pass


class CheckpointWriteError(RuntimeError):
    """The new checkpoint could not be written (disk full, quota, permissions); the old one is intact."""


def remove_partial(out_dir):
    """Delete half-written temporary files left by a process killed while saving.
    Only safe while holding out_dir's lock (guard.OutDirLock): nobody else is saving."""
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
        raise CheckpointError(f"no checkpoint at {path}; train one first (python train.py configs/rope.py "
                              f"--out_dir={out_dir}) or point --out_dir at a folder with ckpt.pt")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is unreadable (truncated or corrupt?): {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}; it was left untouched") from e
    missing = [k for k in ("model", "model_args", "config", "iter_num") if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}: not written by this repo's train.py")
    return ckpt
