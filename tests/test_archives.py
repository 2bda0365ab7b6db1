"""tasks_zoo.archives on tiny fake archives: every accepted name and layout, atomic unpack, one-line errors."""

from __future__ import annotations

import io
import subprocess
import tarfile

import pytest

from tasks_zoo import archives
from tasks_zoo.archives import PARTIAL_PREFIX, SPECS, is_complete, locate
from tasks_zoo.errors import ZooError


def _files_for(dataset: str) -> dict[str, bytes]:
    """Minimal member files (relative to the data set's top folder) that make the folder complete."""
    if dataset == "cifar10":
        return {name: b"x" for name in SPECS["cifar10"].required}
    if dataset == "imdb":
        return {"train/pos/0_9.txt": b"good", "train/neg/1_2.txt": b"bad", "test/pos/2_8.txt": b"fine"}
    return {"0_1_0_0_1_0_1_1.wav": b"RIFF", "README": b"yesno"}


def _write_archive(path, dataset: str, files: dict[str, bytes] | None = None, top: str | None = None):
    top = top or SPECS[dataset].folder
    with tarfile.open(path, "w:gz") as tar:
        for rel, data in (files if files is not None else _files_for(dataset)).items():
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _write_folder(base, dataset: str):
    folder = base / SPECS[dataset].folder
    for rel, data in _files_for(dataset).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


@pytest.mark.parametrize("dataset,name", [(d, n) for d in SPECS for n in SPECS[d].archives])
def test_every_accepted_archive_unpacks_once_into_the_cache(tmp_path, dataset, name):
    root, cache = tmp_path / "downloads", tmp_path / "cache"
    root.mkdir()
    _write_archive(root / name, dataset)
    before = sorted(p.name for p in root.iterdir())
    folder = locate(dataset, root, cache)
    assert folder == cache / SPECS[dataset].folder and is_complete(folder, SPECS[dataset])
    assert sorted(p.name for p in root.iterdir()) == before  # the archive folder is only read
    (root / name).unlink()  # second call uses the unpacked copy, not the archive
    assert locate(dataset, root, cache) == folder
    assert not [p for p in cache.iterdir() if p.name.startswith(PARTIAL_PREFIX)]


@pytest.mark.parametrize("dataset", list(SPECS))
def test_unpacked_folders_are_used_in_place(tmp_path, dataset):
    folder = _write_folder(tmp_path, dataset)
    assert locate(dataset, tmp_path, tmp_path / "cache") == folder
    assert not (tmp_path / "cache").exists()


def test_legacy_cifar_layout_still_works(tmp_path):
    folder = _write_folder(tmp_path / "cifar10", "cifar10")
    assert locate("cifar10", tmp_path, tmp_path / "cache") == folder


def test_incomplete_folder_does_not_pass_as_data(tmp_path):
    folder = _write_folder(tmp_path, "cifar10")
    (folder / "data_batch_3").unlink()
    with pytest.raises(ZooError):
        locate("cifar10", tmp_path, tmp_path / "cache")
    _write_archive(tmp_path / "cifar-10-python.tar.gz", "cifar10")
    assert locate("cifar10", tmp_path, tmp_path / "cache") == tmp_path / "cache" / "cifar-10-batches-py"


@pytest.mark.parametrize("dataset", list(SPECS))
def test_missing_data_is_one_line_naming_folder_and_archives(tmp_path, dataset):
    with pytest.raises(ZooError) as err:
        locate(dataset, tmp_path, tmp_path / "cache")
    msg = str(err.value)
    assert "\n" not in msg and str(tmp_path) in msg and SPECS[dataset].folder in msg
    assert all(name in msg for name in SPECS[dataset].archives)


def test_archive_without_the_folder_is_one_line(tmp_path):
    _write_archive(tmp_path / "waves_yesno.tar.gz", "yesno", top="something_else")
    with pytest.raises(ZooError, match="holds no complete waves_yesno/"):
        locate("yesno", tmp_path, tmp_path / "cache")
    assert not (tmp_path / "cache" / "waves_yesno").exists()
    (tmp_path / "broken.tar.gz").write_bytes(b"not a tar")
    (tmp_path / "broken.tar.gz").rename(tmp_path / "aclImdb_v1.tar.gz")
    with pytest.raises(ZooError, match="unreadable"):
        locate("imdb", tmp_path, tmp_path / "cache")


def test_unpack_killed_midway_leaves_the_cache_usable(tmp_path, monkeypatch):
    """An unpack that dies during extraction (exception here; SIGKILL leaves a partial folder of a dead pid)
    leaves nothing that passes as data; the next call unpacks cleanly and removes the dead partial."""
    root, cache = tmp_path / "root", tmp_path / "cache"
    root.mkdir()
    _write_archive(root / "waves_yesno.tar.gz", "yesno")
    real_extractall = tarfile.TarFile.extractall

    def dying_extractall(self, path, *a, **kw):
        first = self.getmembers()[:1]
        real_extractall(self, path, members=first, **kw)  # half the folder is on disk
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(tarfile.TarFile, "extractall", dying_extractall)
    with pytest.raises(KeyboardInterrupt):
        locate("yesno", root, cache)
    assert not (cache / "waves_yesno").exists()
    monkeypatch.setattr(tarfile.TarFile, "extractall", real_extractall)
    # what a SIGKILL leaves behind: a partial folder of a process that no longer runs, with data inside
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = cache / f"{PARTIAL_PREFIX}waves_yesno-{dead.pid}-abc" / "waves_yesno"
    stale.mkdir(parents=True)
    (stale / "0_0_0_0_0_0_0_0.wav").write_bytes(b"RIFF")
    folder = locate("yesno", root, cache)
    assert folder == cache / "waves_yesno" and is_complete(folder, SPECS["yesno"])
    assert sorted(p.name for p in cache.iterdir()) == ["waves_yesno"]


def test_download_is_only_tried_when_asked(tmp_path, monkeypatch):
    calls = []

    def fake_download(spec, cache_dir):
        calls.append(spec.folder)
        return _write_archive(cache_dir / "waves_yesno.tar.gz", "yesno")

    monkeypatch.setattr(archives, "download", fake_download)
    with pytest.raises(ZooError):
        locate("yesno", tmp_path, tmp_path / "cache")
    assert calls == []
    (tmp_path / "cache").mkdir()
    assert locate("yesno", tmp_path, tmp_path / "cache", download_ok=True) == tmp_path / "cache" / "waves_yesno"
    assert calls == ["waves_yesno"]
