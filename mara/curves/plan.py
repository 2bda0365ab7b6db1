"""The generation plan: which (family, split, index, data source) runs a bank holds, in which order, and each run's
recipe (seed, batch size, lr), a pure function of the job and its attempt, so every curve is reproducible on its own."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from mara.curves.bank import SPLITS
from mara.curves.families import (
    ALL_FAMILIES,
    DOMAIN_BATCH_SIZES,
    FAMILY_DOMAIN,
    ID_FAMILIES,
    LR_RANGE,
    generation_cap,
)
from tasks_zoo.errors import ZooError

#: cheapest first (seconds per curve at the default cap, 1 CPU thread, measured; see tasks_zoo/README.md)
COST_ORDER = (
    "TSFM_Audio_1",
    "TSFM_Audio_2",
    "ALSTM_Text_1",
    "LSTM_Cifar10",
    "CNN_Cifar10",
    "RLExpertConfig",
    "ViT_Cifar10_1",
    "ALSTM_Text_2",
    "ResNet18_Cifar10",
    "ResNet34_Cifar10",
)
#: rough uncontended seconds per curve, used for the ETA when a family has no finished shard to learn from
COST_GUESS_S = dict(zip(COST_ORDER, (10, 16, 25, 35, 45, 90, 150, 170, 130, 240)))
GROUP_ORDER = ("pool", "fm_val", "fm_train", "cal")
SOURCES = ("real", "synthetic")


@dataclass(frozen=True)
class Job:
    """One training run: a family's ``index``-th curve of ``split`` on data ``source``."""

    family: str
    split: str
    index: int
    source: str

    @property
    def curve_id(self) -> str:
        return f"{self.family}/{self.source}/{self.split}/{self.index:04d}"

    @property
    def shard_name(self) -> str:
        return self.curve_id.replace("/", "__") + ".parquet"


def derive_seed(*parts) -> int:
    """Stable 31-bit seed from the parts' text (sha256)."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _user_config(family: str):
    """The zoo config of a family that is not one of the paper's ten (added with a YAML, tasks_zoo/README.md)."""
    from tasks_zoo.configs import load_zoo_config

    return load_zoo_config(family)


def batch_size_choices(family: str) -> tuple[int, ...]:
    """A family's batch-size set: its domain's (A.2), or a user family's ``batch_sizes`` (else its domain's)."""
    if family in FAMILY_DOMAIN:
        return DOMAIN_BATCH_SIZES[FAMILY_DOMAIN[family]]
    cfg = _user_config(family)
    if "batch_sizes" in cfg:
        return tuple(int(b) for b in cfg.batch_sizes)
    if cfg.get("domain") in DOMAIN_BATCH_SIZES:
        return DOMAIN_BATCH_SIZES[cfg.domain]
    raise ZooError(f"zoo family {family}: give batch_sizes or a domain ({', '.join(DOMAIN_BATCH_SIZES)}) in its config")


def in_distribution(family: str) -> bool:
    """Does the family take part in the FM data set (fm_val / fm_train curves)? Paper: the ID families; a user
    family unless its config says ``ood: true``."""
    if family in ALL_FAMILIES:
        return family in ID_FAMILIES
    return not bool(_user_config(family).get("ood", False))


def family_cap(family: str) -> int:
    """Batches per curve: twice the largest budget (A.2); a user family's ``cap`` from its config."""
    if family in ALL_FAMILIES:
        return generation_cap(family)
    cfg = _user_config(family)
    if "cap" not in cfg:
        raise ZooError(f"zoo family {family}: its config needs a cap (batches per curve), or run with cap=N")
    return int(cfg.cap)


def job_recipe(job: Job, attempt: int = 0) -> tuple[int, int, float]:
    """(seed, batch_size, lr): batch size uniform over the domain's set, lr log-uniform on LR_RANGE (A.2)."""
    seed = derive_seed(job.family, job.split, job.index, attempt)
    rng = np.random.default_rng(seed)
    choices = batch_size_choices(job.family)
    batch_size = int(choices[int(rng.integers(len(choices)))])
    lr = float(math.exp(rng.uniform(math.log(LR_RANGE[0]), math.log(LR_RANGE[1]))))
    return seed, batch_size, lr


def check_request(families, counts: dict, source: str, source_overrides: dict | None = None) -> list[str]:
    """Validate families / counts / sources; returns the family list. Raises ZooError (one line)."""
    if families in (None, "all", ["all"]):
        families = list(ALL_FAMILIES)
    if isinstance(families, str):
        families = [f.strip() for f in families.split(",") if f.strip()]
    families = list(families)
    from tasks_zoo.configs import known_families

    known = list(ALL_FAMILIES) + [f for f in known_families() if f not in ALL_FAMILIES]  # + families added by a YAML
    unknown = [f for f in families if f not in known]
    if unknown:
        raise ZooError(
            f"unknown famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} (known: {', '.join(known)})"
        )
    bad_splits = [s for s in counts if s not in SPLITS]
    if bad_splits:
        raise ZooError(f"unknown split(s) {', '.join(bad_splits)} in counts (known: {', '.join(SPLITS)})")
    for s in [source, *(source_overrides or {}).values()]:
        if s not in SOURCES:
            raise ZooError(f"unknown source {s!r} (use one of: {', '.join(SOURCES)})")
    bad_over = [f for f in (source_overrides or {}) if f not in known]
    if bad_over:
        raise ZooError(
            f"source_overrides names unknown famil{'y' if len(bad_over) == 1 else 'ies'} {', '.join(bad_over)}"
        )
    return families


def plan_jobs(families, counts: dict, source: str = "synthetic", source_overrides: dict | None = None) -> list[Job]:
    """All jobs, usable-bank-first: pool of every family, then fm_val, then fm_train; cheapest family first in each."""
    families = check_request(families, counts, source, source_overrides)
    ordered = sorted(families, key=lambda f: COST_ORDER.index(f) if f in COST_ORDER else len(COST_ORDER))
    jobs = []
    for split in GROUP_ORDER:
        for fam in ordered:
            if split in ("fm_val", "fm_train") and not in_distribution(fam):
                continue  # the FM dataset holds ID families only (A.2); pool and cal curves exist for every family
            src = (source_overrides or {}).get(fam, source)
            jobs.extend(Job(fam, split, i, src) for i in range(int(counts.get(split, 0))))
    return jobs
