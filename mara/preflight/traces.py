"""The one check before any work of a trace run (``mara.evaluate experiment=trace``) and of ``mara.bench --traces``.

Every file the run reads is read and validated before the first replay: the trace (mara/traces/schema.py: columns,
numbers, deadlines, sizes against the cluster), each learned scheduler's checkpoint (``read_trace_policy``: data
only, a trace policy, of a width the network takes and tensors of the shapes it has), and for target-loss jobs the
curve bank. Each method's trace scheduler is built once from its settings (an unknown argument names the closest,
a value of the wrong type or out of range is refused), and every window holds a job to score. A mistake is one
``ConfigError`` line naming the setting, file, row or column; the entry points print it and exit 2.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import torch

from mara.core.config import ConfigError
from mara.core.registry import import_object
from mara.curves.bank import default_bank_path, load_bank
from mara.preflight.checkpoints import _kind_of
from mara.preflight.common import _first_line
from mara.preflight.methods import _check_allocator_keys
from mara.traces.experiment import check_job_kind
from mara.traces.policy import SHIPPED_TRACE_POLICY, PriorityNet
from mara.traces.run import build_scheduler, trace_windows
from mara.traces.schema import SHIPPED_SAMPLE, Cluster, Trace, Window, load_trace, parse_cluster
from mara.traces.settings import TraceMethod, TraceRunSettings, trace_method_list
from mara.traces.target_run import check_target_loss_run
from mara.traces.throughput import known_models

#: the widest trace-policy network a checkpoint may declare (the shipped one is 32 wide; a width beyond this is a
#: file that would take the machine's memory before it could be refused)
MAX_WIDTH = 4096
TRAIN_HINT = "train one: python -m mara.train experiment=trace_mara"


@dataclass(frozen=True)
class TracePlan:
    """What the check read, for the run to use: the trace, the windows it replays, the curve bank (target-loss
    jobs; else None)."""

    trace: Trace
    windows: list[Window]
    bank: object = None


def read_trace_policy(path, where: str) -> None:
    """A trace-policy checkpoint loads as data and is one: kind ``trace_policy``, an integer width in
    [1, MAX_WIDTH], and a ``state_dict`` holding exactly the network's tensors at their shapes, finite."""
    p = Path(str(path))
    if not p.is_file():
        raise ConfigError(f"{where}: trace policy checkpoint {p} not found ({TRAIN_HINT})")
    try:
        ck = torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as exc:  # a crafted pickle, a truncated or empty file: weights_only refuses, nothing runs
        raise ConfigError(f"{where}: {p} is not a readable PyTorch checkpoint ({_first_line(exc)[:160]})") from None
    kind = ck.get("kind") if isinstance(ck, dict) else None
    if kind != "trace_policy":
        other = _kind_of(p)
        raise ConfigError(
            f"{where}: {p} is not a trace policy checkpoint ({f'it is {other}' if other else f'kind {kind!r}'}; "
            f"{TRAIN_HINT})"
        )
    hidden, sd = ck.get("hidden"), ck.get("state_dict")
    if isinstance(hidden, bool) or not isinstance(hidden, int) or not 1 <= hidden <= MAX_WIDTH:
        raise ConfigError(
            f"{where}: {p}: hidden (the network's width) must be an integer in [1, {MAX_WIDTH}], got {hidden!r}"
        )
    with torch.device("meta"):  # the shapes of a network of that width, without its memory
        want = {k: tuple(v.shape) for k, v in PriorityNet(hidden).state_dict().items()}
    have = {k: tuple(v.shape) for k, v in sd.items() if isinstance(v, torch.Tensor)} if isinstance(sd, dict) else {}
    if have != want:
        bad = sorted(set(want) ^ set(have)) or [k for k in want if want[k] != have[k]]
        raise ConfigError(
            f"{where}: {p}: its tensors do not fit a trace policy of width {hidden} (first: {bad[0]!r}, "
            f"{have.get(bad[0])} where the network has {want.get(bad[0])})"
        )
    if not all(bool(torch.isfinite(v).all()) for v in sd.values()):
        raise ConfigError(f"{where}: {p}: a weight is not finite")


def check_scheduler(m: TraceMethod, cluster: Cluster, overhead: bool) -> None:
    """Method ``m``'s trace scheduler: its arguments are the class's, of the types it declares; a learned one's
    checkpoint is read and validated; then it is built once (a value out of range is refused by its class)."""
    if m.bound is not None:  # a bound over trace windows schedules nothing
        return
    spec = m.scheduler
    where = f"method_overrides.{m.name}.trace_scheduler"
    cls = import_object(spec["_target_"])
    _check_allocator_keys(where, spec["_target_"], {k: v for k, v in spec.items() if k != "_target_"})
    params = inspect.signature(cls).parameters
    if "ckpt_path" in params and "rule" in params and spec.get("rule") is None:  # a network, not a teacher's rule
        read_trace_policy(spec.get("ckpt_path") or SHIPPED_TRACE_POLICY, f"{where}.ckpt_path")
    try:
        build_scheduler(spec, overhead, cluster.gpus_per_node)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {_first_line(exc)}") from None
    except Exception as exc:  # the class's own refusal (ValueError, TypeError), wrapped by Hydra's instantiate
        cause = exc.__cause__ or exc
        raise ConfigError(f"{where}: {_first_line(cause)}") from None


def check_trace_run(run: TraceRunSettings) -> TracePlan:
    """Everything a trace run reads, checked before any work (see the module docstring)."""
    trace, windows = trace_windows(run.trace)
    check_job_kind(run)
    for m in run.methods:
        check_scheduler(m, run.trace.cluster, run.trace.overhead)
    bank = None
    if run.trace.jobs == "target_loss":
        check_target_loss_run(run, trace)
        bank = load_bank(default_bank_path())
    return TracePlan(trace, windows, bank)


def check_bench_traces(traces, methods, sweep) -> None:
    """``mara.bench --traces``: every trace read and checked on its cluster, every method a trace scheduler built
    from its settings, every cluster size of the sweep a positive number of nodes."""
    listed = trace_method_list(list(methods), {})
    for n in sweep:  # the sweep replays the shipped sample's first jobs on n nodes of 8 GPUs
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 4096:
            raise ConfigError(f"--trace-sweep: a cluster size is a number of 8-GPU nodes in [1, 4096], got {n!r}")
        try:
            load_trace(SHIPPED_SAMPLE, parse_cluster(f"n{n}g8"), known_models=known_models())
        except ConfigError as exc:
            raise ConfigError(f"--trace-sweep {n}: {_first_line(exc)}") from None
    for path, cluster in traces:
        cl = parse_cluster(cluster)
        load_trace(path, cl, known_models=known_models())
        for m in listed:
            check_scheduler(m, cl, True)
