"""Run logging a person can follow: one line per message (terminal and the run's plain log file), throttled
progress lines with an ETA, and no Lightning advertising.

Under ``@hydra.main`` the root logger already writes to the terminal and to ``<run>/<job>.log``; outside it
(worker processes, tests) :func:`setup_logging` adds a terminal handler and, if asked, a log file.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

log = logging.getLogger("mara")

_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class _DropAdvertising(logging.Filter):
    """Lightning's "💡 Tip: ... try installing ..." lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).lstrip().startswith("💡 Tip")


def setup_logging(log_file: str | Path | None = None) -> None:
    """Every message once: Lightning's loggers hand their records to the root logger (no handler of their own),
    the root logger has one terminal handler (and ``log_file``), and the advertising tips are dropped."""
    root = logging.getLogger()
    if not root.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(h)
    if root.level == logging.NOTSET or root.level > logging.INFO:
        root.setLevel(logging.INFO)
    if log_file is not None:
        path = str(Path(log_file).resolve())
        if not any(isinstance(h, logging.FileHandler) and h.baseFilename == path for h in root.handlers):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fh = logging.FileHandler(path)
            fh.setFormatter(logging.Formatter(_FORMAT))
            root.addHandler(fh)
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            lg.removeHandler(h)
        lg.propagate = True
    for h in root.handlers:
        if not any(isinstance(f, _DropAdvertising) for f in h.filters):
            h.addFilter(_DropAdvertising())


def fmt_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


class Progress:
    """Progress of one piece of work: ``update(fraction)`` logs a line with elapsed time and ETA at the start,
    at the end and at most every ``every_s`` seconds in between (the caller calls it often)."""

    def __init__(self, what: str, every_s: float = 20.0, logger: logging.Logger | None = None, clock=time.monotonic):
        self.what, self.every_s, self.log, self.clock = what, every_s, logger or log, clock
        self.t0 = clock()
        self.last = None

    def eta(self, fraction: float) -> float | None:
        if fraction <= 0:
            return None
        return (self.clock() - self.t0) * (1 - fraction) / fraction

    def update(self, fraction: float, detail: str = "") -> bool:
        now = self.clock()
        fraction = min(max(float(fraction), 0.0), 1.0)
        if self.last is not None and fraction < 1.0 and now - self.last < self.every_s:
            return False
        self.last = now
        eta = self.eta(fraction)
        self.log.info(
            f"{self.what}: {100 * fraction:5.1f}%{' ' + detail if detail else ''} · elapsed "
            f"{fmt_seconds(now - self.t0)}"
            + (f" · ETA {fmt_seconds(eta)}" if eta is not None and fraction < 1.0 else "")
        )
        return True


def flat_hparams(d: dict, prefix: str = "") -> dict:
    """Nested config → flat {a/b: scalar} for TensorBoard's HParams view (lists and None become strings)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat_hparams(v, key + "/"))
        elif isinstance(v, (bool, int, float, str)):
            out[key] = v
        else:
            out[key] = str(v)
    return out


def log_hparams(tb_dir: str | Path, hparams: dict, metrics: dict) -> None:
    """One HParams entry (``<tb_dir>/hparams``): the run's hyper-parameters and its final metrics."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # tensorboard missing: nothing to log
        return
    metrics = {f"hparams/{k}": float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and v == v}
    if not metrics:
        return
    with SummaryWriter(log_dir=str(tb_dir)) as w:
        w.add_hparams(flat_hparams(hparams), metrics, run_name="hparams")
