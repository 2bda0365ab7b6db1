"""The curve bank: one Parquet file, one row per training run (docs/banks.md).

Shapes: ``R`` rows (curves), ``N`` = longest curve. Derived views are computed once, vectorised:
``ell [R, N]`` per-batch losses, ``L [R, N]`` cumulative-average loss, ``C [R, N]`` cumulative loss
sum, ``S [R, N]`` processed samples; entries past a curve's length are NaN (``lengths [R]``).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mara.core.config import SHIPPED_BANKS_DIR

SCHEMA_VERSION = "1"
SPLITS = ("fm_train", "fm_val", "pool", "cal")  # cal: band calibration only (families the FM never trained on)
DATA_SOURCES = ("real", "synthetic", "parametric", "live")  # live: recorded by mara.live

ARROW_SCHEMA = pa.schema(
    [
        ("curve_id", pa.string()),
        ("family", pa.string()),
        ("split", pa.string()),
        ("data_source", pa.string()),
        ("batch_size", pa.int32()),
        ("lr", pa.float64()),
        ("seed", pa.int64()),
        ("losses", pa.list_(pa.float32())),
        ("meta", pa.string()),
    ]
)
REQUIRED_COLUMNS = tuple(ARROW_SCHEMA.names)

#: file-level metadata keys (JSON-encoded values) besides the schema version
META_SCHEMA_VERSION = b"mara.schema_version"
META_BANK = b"mara.bank"  # JSON: {"family_params": {...}, "generator": ..., ...}


class BankError(ValueError):
    """A curve bank that cannot be used; the message names the file and, where known, the row."""


def records_to_table(records: Iterable[Mapping]) -> pa.Table:
    """Build an Arrow table in the bank schema from dict records (``losses`` any float sequence)."""
    cols: dict[str, list] = {name: [] for name in REQUIRED_COLUMNS}
    for rec in records:
        for name in REQUIRED_COLUMNS:
            value = rec[name]
            if name == "losses":
                value = np.asarray(value, dtype=np.float32).tolist()
            elif name == "meta" and not isinstance(value, str):
                value = json.dumps(value, sort_keys=True)
            cols[name].append(value)
    return pa.table(cols, schema=ARROW_SCHEMA)


def write_bank(
    path: str | os.PathLike, records: Iterable[Mapping] | pa.Table, bank_meta: Mapping | None = None
) -> Path:
    """Write a bank atomically (temp file + rename); ``bank_meta`` goes to the file metadata."""
    path = Path(path)
    table = records if isinstance(records, pa.Table) else records_to_table(records)
    table = table.select(list(REQUIRED_COLUMNS)).cast(ARROW_SCHEMA)
    meta = {
        META_SCHEMA_VERSION: SCHEMA_VERSION.encode(),
        META_BANK: json.dumps(dict(bank_meta or {}), sort_keys=True).encode(),
    }
    table = table.replace_schema_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_bank_meta(path: str | os.PathLike) -> dict:
    """The bank-level metadata dict (``family_params``, generator info) without loading the rows."""
    path = Path(path)
    if not path.exists():
        raise BankError(f"curve bank {path}: file not found")
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise BankError(f"curve bank {path}: not a readable Parquet file ({exc.__class__.__name__}: {exc})") from None
    return _decode_meta(path, schema.metadata or {})


def _decode_meta(path: Path, raw: Mapping[bytes, bytes]) -> dict:
    version = raw.get(META_SCHEMA_VERSION)
    if version is None:
        raise BankError(
            f"curve bank {path}: missing '{META_SCHEMA_VERSION.decode()}' in file metadata (not a MARA bank?)"
        )
    if version.decode() != SCHEMA_VERSION:
        raise BankError(f"curve bank {path}: schema version {version.decode()!r}, this code reads {SCHEMA_VERSION!r}")
    try:
        return json.loads(raw.get(META_BANK, b"{}").decode() or "{}")
    except json.JSONDecodeError as exc:
        raise BankError(f"curve bank {path}: file metadata '{META_BANK.decode()}' is not JSON ({exc})") from None


@dataclass
class CurveBank:
    """A validated curve bank with derived views (see module docstring for shapes)."""

    path: Path
    curve_id: np.ndarray  # [R] str
    family: np.ndarray  # [R] str
    split: np.ndarray  # [R] str
    data_source: np.ndarray  # [R] str
    batch_size: np.ndarray  # [R] int64
    lr: np.ndarray  # [R] float64
    seed: np.ndarray  # [R] int64
    lengths: np.ndarray  # [R] int64
    ell: np.ndarray  # [R, N] float64 per-batch loss, NaN-padded
    meta: list[str]
    bank_meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.ell.shape[1]
        steps = np.arange(1, n + 1, dtype=np.float64)
        self.C = np.cumsum(np.nan_to_num(self.ell, nan=0.0), axis=1)  # cumulative loss per batch
        self.L = self.C / steps  # cumulative-average loss
        pad = steps[None, :] > self.lengths[:, None]
        self.L[pad] = np.nan
        self.C[pad] = np.nan
        # processed samples S_i = i * batch_size, and C in sample units (C = S * L)
        self.S = steps[None, :] * self.batch_size[:, None].astype(np.float64)
        self.S[pad] = np.nan
        self.C_samples = self.S * self.L

    def __len__(self) -> int:
        return len(self.curve_id)

    @property
    def families(self) -> list[str]:
        return sorted(set(self.family.tolist()))

    @property
    def family_params(self) -> dict | None:
        """Calibrated per-family ε/budget table stored with the bank, if any."""
        return self.bank_meta.get("family_params")

    def rows(self, family: str | None = None, split: str | None = None) -> np.ndarray:
        """Row indices matching a family and/or split (sorted)."""
        mask = np.ones(len(self), dtype=bool)
        if family is not None:
            mask &= self.family == family
        if split is not None:
            mask &= self.split == split
        return np.flatnonzero(mask)

    def first_crossing(self, rows: np.ndarray, eps: np.ndarray) -> np.ndarray:
        """Batches needed to reach cumulative-average loss ≤ eps for each (row, eps); a large sentinel if never.

        rows [B] int, eps [B] float -> [B] int64 (>= 1; ``NEVER`` when the curve never crosses within its length).
        """
        L = self.L[rows]  # [B, N]
        hit = L <= np.asarray(eps, dtype=np.float64)[:, None]
        any_hit = hit.any(axis=1)
        first = hit.argmax(axis=1) + 1
        return np.where(any_hit, first, NEVER).astype(np.int64)

    def require_families(self, families: Iterable[str], split: str = "pool", context: str = "") -> None:
        """Fail with one clear line if any family lacks curves in ``split``."""
        missing = [f for f in families if len(self.rows(f, split)) == 0]
        if missing:
            have = ", ".join(self.families) or "none"
            where = f" (needed by {context})" if context else ""
            raise BankError(
                f"curve bank {self.path}: no '{split}' curves for famil{'y' if len(missing) == 1 else 'ies'} "
                f"{', '.join(missing)}{where}; the bank has: {have}"
            )


NEVER = np.iinfo(np.int32).max  # "never crosses" sentinel for batch counts


def load_bank(path: str | os.PathLike) -> CurveBank:
    """Read and validate a bank; raises BankError naming the file and the offending row."""
    path = Path(path)
    bank_meta = read_bank_meta(path)
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise BankError(f"curve bank {path}: cannot read rows ({exc.__class__.__name__}: {exc})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise BankError(f"curve bank {path}: missing required column(s) {', '.join(missing)}")
    if table.num_rows == 0:
        raise BankError(f"curve bank {path}: has no rows")
    cols = {name: table.column(name).to_pylist() for name in REQUIRED_COLUMNS if name != "losses"}
    losses = table.column("losses").to_pylist()
    seen: dict[str, int] = {}
    for i in range(table.num_rows):
        cid = cols["curve_id"][i]
        where = f"curve bank {path}, row {i} (curve_id={cid!r})"
        if cid is None or cid == "":
            raise BankError(f"{where}: empty curve_id")
        if cid in seen:
            raise BankError(f"{where}: duplicate curve_id (first at row {seen[cid]})")
        seen[cid] = i
        if cols["split"][i] not in SPLITS:
            raise BankError(f"{where}: unknown split {cols['split'][i]!r} (known: {', '.join(SPLITS)})")
        if cols["data_source"][i] not in DATA_SOURCES:
            raise BankError(
                f"{where}: unknown data_source {cols['data_source'][i]!r} (known: {', '.join(DATA_SOURCES)})"
            )
        if not cols["family"][i]:
            raise BankError(f"{where}: empty family")
        bs = cols["batch_size"][i]
        if bs is None or bs < 1:
            raise BankError(f"{where}: batch_size must be >= 1, got {bs}")
        lr = cols["lr"][i]
        if lr is None or not math.isfinite(lr) or lr <= 0:
            raise BankError(f"{where}: lr must be a positive finite number, got {lr}")
        row_losses = losses[i]
        if not row_losses:
            raise BankError(f"{where}: empty losses")
        arr = np.asarray(row_losses, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            bad = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise BankError(f"{where}: non-finite loss at batch {bad + 1}")
        if np.any(arr < 0):
            raise BankError(f"{where}: negative loss at batch {int(np.flatnonzero(arr < 0)[0]) + 1}")
    lengths = np.array([len(x) for x in losses], dtype=np.int64)
    ell = np.full((len(losses), int(lengths.max())), np.nan, dtype=np.float64)
    for i, row_losses in enumerate(losses):
        ell[i, : lengths[i]] = row_losses
    return CurveBank(
        path=path,
        curve_id=np.array(cols["curve_id"], dtype=object).astype(str),
        family=np.array(cols["family"], dtype=object).astype(str),
        split=np.array(cols["split"], dtype=object).astype(str),
        data_source=np.array(cols["data_source"], dtype=object).astype(str),
        batch_size=np.array(cols["batch_size"], dtype=np.int64),
        lr=np.array(cols["lr"], dtype=np.float64),
        seed=np.array(cols["seed"], dtype=np.int64),
        lengths=lengths,
        ell=ell,
        meta=list(cols["meta"]),
        bank_meta=bank_meta,
    )


def merge_tables(paths: Iterable[str | os.PathLike]) -> pa.Table:
    """Concatenate shard files (each in the bank schema) into one table, rejecting duplicate ids."""
    tables = []
    for p in paths:
        t = pq.read_table(p).select(list(REQUIRED_COLUMNS)).cast(ARROW_SCHEMA)
        tables.append(t.replace_schema_metadata(None))
    if not tables:
        return ARROW_SCHEMA.empty_table()
    merged = pa.concat_tables(tables)
    ids = merged.column("curve_id").to_pylist()
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise BankError(f"merging shards: duplicate curve_id {dup!r}")
    return merged


def default_bank_path() -> Path:
    """The bank the package ships (the task-zoo bank once present, else the interim parametric bank)."""
    zoo = SHIPPED_BANKS_DIR / "zoo.parquet"
    return zoo if zoo.exists() else SHIPPED_BANKS_DIR / "parametric.parquet"


def stand_in_note(path: str | os.PathLike) -> str | None:
    """The one line that says the interim parametric bank stands in for the absent task-zoo bank, when ``path`` is
    :func:`default_bank_path`'s fallback; None for any other bank. Curves drawn from it are synthetic: a reader of
    the results must know."""
    zoo, parametric = SHIPPED_BANKS_DIR / "zoo.parquet", SHIPPED_BANKS_DIR / "parametric.parquet"
    if zoo.exists() or Path(path).resolve() != parametric.resolve():
        return None
    return (
        f"the real curve bank {zoo} is absent: curves are drawn from the parametric bank {parametric} (synthetic "
        "curves; numbers differ from the real bank's)"
    )


def shipped_bank_path(name_or_path: str | os.PathLike) -> Path:
    """A bare name (no '/', no suffix) means a bank shipped in the package; anything else is a path."""
    s = str(name_or_path)
    if "/" not in s and not s.endswith(".parquet"):
        return SHIPPED_BANKS_DIR / f"{s}.parquet"
    return Path(s)
