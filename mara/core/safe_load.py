"""Load only data: every checkpoint and worker state the package reads is tensors and plain values.

``load_checkpoint`` is ``torch.load(weights_only=True)``: a file whose pickle names anything but tensors and plain
containers (dict, list, tuple, str, int, float, bool, None) is refused before any of it runs, and a file that is not a
checkpoint at all is a one-line ``CheckpointError`` naming it. ``to_plain`` / ``from_plain`` turn state that holds
numpy arrays and a few simulator objects into that form and back, exactly (dtypes, values and shared arrays kept);
the classes ``from_plain`` may rebuild are the caller's explicit allow-list, never a name read from the file.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path

import numpy as np
import torch

from mara.core import registry
from mara.core.config import ConfigError, plain_config


def checkpoint_kinds() -> dict[str, str]:
    """{the ``kind`` field of a checkpoint the package writes: what it holds}: the MAT policy (a Lightning checkpoint)
    and every registered predictor's (``registry.checkpoint`` in its conf/predictor YAML)."""
    return registry.checkpoint_kinds()


_ZIP_MAGIC = b"PK\x03\x04"


class CheckpointError(ConfigError):
    """A path given as a checkpoint that is not one the package can load (one line: the path and what it is not)."""


def _name(source) -> str:
    return "<bytes>" if isinstance(source, (bytes, bytearray, io.IOBase)) else str(source)


def load_checkpoint(source, what: str = "checkpoint", mmap: bool = False):
    """``torch.load(source, weights_only=True)`` on the CPU: tensors and plain data only, never code.

    ``source``: a path, bytes or a binary file object; ``what`` names the file in the error (``policy checkpoint``).
    ``mmap=True`` maps the tensors instead of reading them (cheap metadata reads). Any failure is one
    ``CheckpointError`` line."""
    if isinstance(source, (bytes, bytearray)):
        source = io.BytesIO(bytes(source))
    elif not isinstance(source, io.IOBase):
        path = Path(source)
        if not path.is_file():
            raise CheckpointError(f"{what} {path} not found")
        source = path
    if isinstance(source, Path):
        with open(source, "rb") as fh:
            head = fh.read(4)
    else:
        at = source.tell()
        head = source.read(4)
        source.seek(at)
    if head != _ZIP_MAGIC:  # torch.save writes a zip archive; anything else is not a checkpoint of ours
        raise CheckpointError(f"{what} {_name(source)} is not a readable PyTorch checkpoint (not a torch.save archive)")
    try:
        return torch.load(source, map_location="cpu", weights_only=True, mmap=mmap and isinstance(source, Path))
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL (\S+) was not an allowed global", str(exc))
        names = f" ({found.group(1)})" if found else ""
        raise CheckpointError(
            f"{what} {_name(source)} is not loadable as data: it holds objects other than tensors and "
            f"plain values{names}; refused unread"
        ) from None
    except Exception as exc:  # zip, storage and decoding errors alike: the bytes are not a torch file
        raise CheckpointError(
            f"{what} {_name(source)} is not a readable PyTorch checkpoint ({type(exc).__name__})"
        ) from None


def check_kind(ckpt, path, kind: str, required: tuple[str, ...]) -> dict:
    """``ckpt`` as a dict of the expected kind (its ``kind`` field if it has one, else the ``required`` keys), or a
    one-line ``CheckpointError``: "<path> is not <kind> (it is <other kind> / no <keys>)"."""
    kinds = checkpoint_kinds()
    want = kinds[kind]
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path} is not {want} (it holds a {type(ckpt).__name__}, not a dict)")
    have = ckpt.get("kind")
    if have is not None and have != kind:
        raise CheckpointError(f"{path} is not {want} (it is {kinds.get(have, repr(have))})")
    missing = [k for k in required if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path} is not {want} (no {'/'.join(missing)})")
    return ckpt


# ------------------------------------------------------------------ state as tensors and plain values
_ARRAY, _REF, _OBJECT, _NUMPY_SCALAR = "__ndarray__", "__ref__", "__object__", "__npscalar__"


def net_from(cls, entry: dict, path, what: str):
    """``cls(**entry["hparams"])`` holding ``entry["state_dict"]``, in eval mode; hyper-parameters or weights of another
    network are a one-line ``CheckpointError``: ``path`` is not ``what``."""
    try:
        net = cls(**entry["hparams"])
        net.load_state_dict(entry["state_dict"])
    except (RuntimeError, TypeError, ValueError) as exc:
        why = " ".join(str(exc).split())[:120]
        raise CheckpointError(f"{path} is not {what} ({why})") from None
    return net.eval()


def save_net(path, kind: str, net, hparams, extra=None) -> Path:
    """Write ``net``'s weights and hyper-parameters as a checkpoint of ``kind`` that loads as data (tensors and plain
    values only); a ``recipe`` in ``extra`` (the command that made it) is stored beside it. -> ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = plain_config(dict(extra or {}))
    recipe = extra.pop("recipe", None)
    blob = {"kind": kind, "state_dict": net.state_dict(), "hparams": plain_config(dict(hparams)), "extra": extra}
    torch.save({**blob, "recipe": recipe}, path)
    return path


def to_plain(obj, classes: tuple[type, ...] = ()):
    """``obj`` as tensors and plain values: numpy arrays → tensors (string arrays → nested lists), numpy scalars →
    Python numbers, instances of ``classes`` → their attributes; an array or object met twice stays one object
    (``from_plain`` restores the sharing). Anything else raises ``TypeError`` (caught when writing, not reading)."""
    memo: dict[int, int] = {}
    keep = []  # holds encoded objects alive so their ids stay unique during the walk

    def enc(o):
        if o is None or isinstance(o, (bool, int, float, str, torch.Tensor)) and not isinstance(o, np.generic):
            return o
        if isinstance(o, np.generic):
            return {_NUMPY_SCALAR: o.dtype.str, "value": o.item()}
        if isinstance(o, (np.ndarray, *classes)):
            if id(o) in memo:
                return {_REF: memo[id(o)]}
            memo[id(o)] = len(memo)
            keep.append(o)
            if isinstance(o, np.ndarray):
                if o.dtype.kind in "biufc":
                    return {_ARRAY: torch.from_numpy(np.array(o, order="C", copy=True)), "id": memo[id(o)]}
                if o.dtype.kind == "U":
                    return {_ARRAY: o.tolist(), "dtype": o.dtype.str, "shape": list(o.shape), "id": memo[id(o)]}
                raise TypeError(f"array of dtype {o.dtype} cannot be stored as plain data")
            return {_OBJECT: type(o).__name__, "id": memo[id(o)], "fields": {k: enc(v) for k, v in vars(o).items()}}
        if isinstance(o, dict):
            if not all(isinstance(k, (str, int)) for k in o):
                raise TypeError("dict keys must be str or int to be stored as plain data")
            return {k: enc(v) for k, v in o.items()}
        if isinstance(o, list):
            return [enc(v) for v in o]
        if isinstance(o, tuple):
            return tuple(enc(v) for v in o)
        raise TypeError(f"{type(o).__name__} cannot be stored as plain data")

    return enc(obj)


def from_plain(obj, classes: tuple[type, ...] = ()):
    """Inverse of ``to_plain``: only the classes in ``classes`` are rebuilt (by name, attributes set directly,
    no constructor or other code run); an unknown class name is a ``ValueError``."""
    allowed = {c.__name__: c for c in classes}
    seen: dict[int, object] = {}

    def dec(o):
        if isinstance(o, dict):
            if _REF in o:
                return seen[int(o[_REF])]
            if _NUMPY_SCALAR in o:
                return np.dtype(str(o[_NUMPY_SCALAR])).type(o["value"])
            if _ARRAY in o:
                a = o[_ARRAY]
                if isinstance(a, torch.Tensor):
                    arr = a.numpy()
                else:
                    arr = np.array(a, dtype=np.dtype(str(o["dtype"]))).reshape([int(n) for n in o["shape"]])
                seen[int(o["id"])] = arr
                return arr
            if _OBJECT in o:
                cls = allowed.get(o[_OBJECT])
                if cls is None:
                    raise ValueError(f"state names class {o[_OBJECT]!r}, not one of {sorted(allowed)}")
                inst = cls.__new__(cls)
                seen[int(o["id"])] = inst
                vars(inst).update({k: dec(v) for k, v in o["fields"].items()})
                return inst
            return {k: dec(v) for k, v in o.items()}
        if isinstance(o, list):
            return [dec(v) for v in o]
        if isinstance(o, tuple):
            return tuple(dec(v) for v in o)
        return o

    return dec(obj)


def plain_lightning_checkpoint(checkpoint: dict) -> None:
    """In place, from a LightningModule's ``on_save_checkpoint``: hyper-parameters (module's and data module's) as
    plain containers and no ``*_type`` class entry, so the file (and a ``trainer.fit(ckpt_path=...)`` resume of it)
    loads with ``weights_only=True``."""
    for key in [k for k in checkpoint if k.endswith("hyper_parameters")]:
        checkpoint[key] = plain_config(dict(checkpoint[key]))
    for key in [k for k in checkpoint if k.endswith("hparams_type")]:
        del checkpoint[key]
