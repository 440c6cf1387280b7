"""Two guards that keep an unattended training run from losing work (docs/reliability.md).
lock_out_dir: one training process per out_dir, an flock on out_dir/train.lock that the kernel drops
when the process dies (the file stays: deleting it would let two processes lock two files).
StopSignal: SIGINT and SIGTERM are recorded, so that the loop saves and exits with 128 + signum."""
import os
import signal
import threading

try:
    import fcntl
except ImportError:  # Windows: no flock; training runs unguarded there
    fcntl = None


def lock_out_dir(out_dir):
    """Hold out_dir/train.lock for this process -> its descriptor (os.close releases it); None without flock."""
    if fcntl is None:
        return None
    os.makedirs(out_dir or ".", exist_ok=True)
    fd = os.open(os.path.join(out_dir, "train.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ValueError(f"{out_dir} is in use by another training process (pid {holder}); "
                         f"wait for it to finish or give this run another --out_dir") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


class StopSignal:
    """`with StopSignal() as stop:` ... `if stop.signum: save, then exit with 128 + stop.signum`;
    a second Ctrl-C stops at once (KeyboardInterrupt)."""

    def __init__(self):
        self.signum, self.previous = None, {}

    def _handle(self, signum, frame):
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: stop now
        self.signum = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():   # Python's signals reach the main thread only
            self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, h in self.previous.items():
            signal.signal(s, h)
