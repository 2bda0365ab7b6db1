"""Typed settings of MARA's trace policy training (``experiment=trace_mara``), parsed once at the entry point.

mara/train_settings.py reads the ``trace_mara`` block of the composed config into a frozen ``TracePolicySettings``
(every value checked there, one ``ConfigError`` line each); mara/mat/trace_train.py reads only its attributes.
A setting given no value takes the default stated here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: days of warm-up before each window when a window spec gives none: consecutive training windows (``train``)
#: and the evaluation protocol's validation windows (``val``, the protocol's day of warm-up)
WARMUP_DAYS = {"train": 0.5, "val": 1.0}


@dataclass(frozen=True)
class TraceWindowSpec:
    """``count`` windows of ``days`` days of the trace at ``path`` on ``cluster`` (``n<nodes>g<gpus>``).

    ``split="train"``: consecutive windows from ``start_day`` after the trace's first submission, ``warmup_days``
    before each; ``split="val"``: the evaluation protocol's validation windows (``start_day`` unused), exactly as
    ``mara.evaluate`` cuts them."""

    path: str
    cluster: str
    start_day: float
    days: float
    count: int
    warmup_days: float
    split: str = "train"


@dataclass(frozen=True)
class TracePolicySettings:
    """The trace policy's training: the windows it learns from (``train``) and chooses on (``val``), the estimate it
    plans on (``predictor``, its ``band``), the network width, the imitation and policy-gradient settings, and the
    seed (torch's and the sampling's)."""

    train: tuple[TraceWindowSpec, ...]
    val: tuple[TraceWindowSpec, ...]
    predictor: str
    band: str
    hidden: int
    imitation_epochs: int
    pg_rounds: int
    samples: int
    top_k: int
    seed: int = 0
    prior_quantile: float = 0.5  # before the predictor's first observations: the count covering this share of runs
    target_seed: int = 0
    declare_quantile: float = 0.9
    threads: int = 1  # torch threads (the networks are tiny: more threads only contend)
    keep: int = 256  # the teacher's first jobs whose order is imitated per decision
    lr: float = 3e-3  # imitation
    pg_lr: float = 1e-3
    windows_per_round: int = 2
