"""Find a real data set under ``data_root``: its unpacked folder, or an archive unpacked once into a cache folder.

A data set (``SPECS``) unpacks to one top folder (``cifar-10-batches-py``, ``aclImdb``, ``waves_yesno``).
``locate`` looks, in order, for

1. the unpacked folder in ``data_root`` (also under the legacy sub-folder, e.g. ``data_root/cifar10/``)
   or in ``cache_dir`` (where earlier unpacks went);
2. an accepted archive in ``data_root`` (the official name or the name in ``../shared/data``), which it
   unpacks into ``cache_dir`` (``data_root`` may be read-only);
3. with ``download=True``, the official archive from its URL (saved into ``cache_dir``, then unpacked).

Unpacking is atomic: the archive is extracted into a hidden ``cache_dir/.partial-<folder>-<pid>-*`` folder
and its top folder is renamed into place only once extraction finished, so a killed unpack leaves a
partial folder that never passes as data (and is removed by the next unpack). A folder counts as data
only if its ``required`` entries exist.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tasks_zoo.errors import ZooError

PARTIAL_PREFIX = ".partial-"


@dataclass(frozen=True)
class DataSpec:
    """One data set: its top folder, what must be in it, the archives that hold it, where it lives online."""

    title: str
    folder: str
    required: tuple[str, ...]
    archives: tuple[str, ...]
    legacy_parents: tuple[str, ...] = ()
    url: str | None = None
    glob: str | None = None  # at least one file matching this pattern must exist too


SPECS: dict[str, DataSpec] = {
    "cifar10": DataSpec(
        "CIFAR-10",
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)) + ("batches.meta",),
        ("cifar-10-python.tar.gz", "cifar-10-python-train50k-test1k.tar.gz"),
        legacy_parents=("cifar10",),
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    ),
    "imdb": DataSpec(
        "IMDB",
        "aclImdb",
        ("train/pos", "train/neg"),
        ("aclImdb_v1.tar.gz", "aclImdb_v1_labelled.tar.gz"),
        url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
    ),
    "yesno": DataSpec(
        "YESNO",
        "waves_yesno",
        (),
        ("waves_yesno.tar.gz",),
        url="https://www.openslr.org/resources/1/waves_yesno.tar.gz",
        glob="*.wav",
    ),
}


def is_complete(folder: Path, spec: DataSpec) -> bool:
    """Does ``folder`` hold the data set (every required entry, and a file matching ``spec.glob``)?"""
    if not folder.is_dir() or not all((folder / r).exists() for r in spec.required):
        return False
    return spec.glob is None or any(folder.glob(spec.glob))


def candidate_folders(spec: DataSpec, data_root: Path, cache_dir: Path) -> list[Path]:
    """Where an unpacked copy may sit, in the order they are tried."""
    out = []
    for base in dict.fromkeys([data_root, cache_dir]):
        out.append(base / spec.folder)
        out.extend(base / parent / spec.folder for parent in spec.legacy_parents)
    return out


def find_archive(spec: DataSpec, data_root: Path) -> Path | None:
    """The first accepted archive present in ``data_root``."""
    for name in spec.archives:
        if (data_root / name).is_file():
            return data_root / name
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_partials(cache_dir: Path, folder: str) -> None:
    """Delete partial unpacks of ``folder`` left by processes that no longer run."""
    for p in cache_dir.glob(f"{PARTIAL_PREFIX}{folder}-*"):
        try:
            pid = int(p.name[len(PARTIAL_PREFIX) + len(folder) + 1 :].split("-")[0])
        except ValueError:
            pid = -1
        if pid <= 0 or not _pid_alive(pid) or pid == os.getpid():
            shutil.rmtree(p, ignore_errors=True)


def unpack(archive: Path, spec: DataSpec, cache_dir: Path) -> Path:
    """Extract ``archive`` and move its ``spec.folder`` to ``cache_dir/spec.folder`` in one rename; returns it."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    dest = cache_dir / spec.folder
    remove_stale_partials(cache_dir, spec.folder)
    tmp = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{spec.folder}-{os.getpid()}-", dir=cache_dir))
    try:
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ZooError(f"{spec.title} archive {archive} is unreadable ({exc.__class__.__name__}: {exc})") from None
        got = tmp / spec.folder
        if not is_complete(got, spec):
            raise ZooError(f"{spec.title} archive {archive} holds no complete {spec.folder}/ folder")
        try:
            os.rename(got, dest)
        except OSError:
            if not is_complete(dest, spec):  # another process finished first, or a stale non-data folder is in the way
                raise ZooError(
                    f"cannot unpack {archive} into {dest}: the path exists but holds no complete {spec.title}; "
                    f"remove it"
                ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def download(spec: DataSpec, cache_dir: Path) -> Path:
    """Fetch the official archive into ``cache_dir`` (CIFAR-10 via torchvision, with its md5; others via urllib)."""
    if spec.url is None:
        raise ZooError(f"{spec.title} has no download URL")
    cache_dir.mkdir(parents=True, exist_ok=True)
    name = spec.url.rsplit("/", 1)[1]
    target = cache_dir / name
    if target.is_file():
        return target
    try:
        part = cache_dir / f"{PARTIAL_PREFIX}{name}-{os.getpid()}"
        if spec.folder == "cifar-10-batches-py":
            from torchvision.datasets.utils import download_url

            download_url(spec.url, str(cache_dir), part.name, md5="c58f30108f718f92721af3b95e74349a")
        else:
            import urllib.request

            urllib.request.urlretrieve(spec.url, part)
        os.replace(part, target)  # concurrent downloads (e.g. torchrun ranks) each write their own file
    except Exception as exc:
        raise ZooError(
            f"could not download {spec.title} from {spec.url} ({exc.__class__.__name__}); "
            f"put {' or '.join(spec.archives)} into the data folder instead"
        ) from None
    return target


def locate(dataset: str, data_root, cache_dir, download_ok: bool = False) -> Path:
    """The unpacked top folder of ``dataset`` (``SPECS`` key), unpacking or downloading once if needed."""
    spec = SPECS[dataset]
    data_root, cache_dir = Path(data_root), Path(cache_dir)
    for folder in candidate_folders(spec, data_root, cache_dir):
        if is_complete(folder, spec):
            return folder
    archive = find_archive(spec, data_root) or find_archive(spec, cache_dir)
    if archive is None and download_ok:
        archive = download(spec, cache_dir)
    if archive is None:
        raise ZooError(
            f"{spec.title} not found: {data_root} holds neither {spec.folder}/ nor an archive "
            f"({' or '.join(spec.archives)}); put one there, set data_root=<folder that has it>, "
            f"download=true where the network allows, or source=synthetic"
        )
    return unpack(archive, spec, cache_dir)
