"""Real CIFAR-10 / IMDB / YESNO from the offline archives in ``<repo>/../shared/data`` (skipped when absent).

The session's data folder holds the CIFAR-10 and YESNO archives (links to the shared, read-only copies,
under the names they have there) and a real IMDB slice (the first reviews of each polarity, streamed out
of the shared archive); archives are unpacked once into a temporary cache.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from mara.curves.bank import load_bank
from mara.curves.families import DOMAIN_BATCH_SIZES, FAMILY_DOMAIN
from mara.curves.generation import generate
from tasks_zoo.archives import SPECS, is_complete, locate
from tasks_zoo.registry import build_task, load_dataset, load_zoo_config

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MARA_SHARED_DATA", REPO.parent / "shared" / "data"))
ARCHIVES = {
    "cifar10": "cifar-10-python-train50k-test1k.tar.gz",
    "imdb": "aclImdb_v1_labelled.tar.gz",
    "yesno": "waves_yesno.tar.gz",
}
IMDB_PER_CLASS = 48
REAL_FAMILIES = [
    "CNN_Cifar10",
    "ResNet18_Cifar10",
    "ResNet34_Cifar10",
    "LSTM_Cifar10",
    "ViT_Cifar10_1",
    "TSFM_Audio_1",
    "TSFM_Audio_2",
    "ALSTM_Text_1",
    "ALSTM_Text_2",
]


def _imdb_slice(archive: Path, dest: Path, per_class: int) -> None:
    """Stream ``archive`` and write the first ``per_class`` training reviews of each polarity under ``dest/aclImdb``."""
    left = {"pos": per_class, "neg": per_class}
    with tarfile.open(archive, "r|gz") as tar:
        for m in tar:
            parts = m.name.split("/")
            if m.isfile() and len(parts) == 4 and parts[:2] == ["aclImdb", "train"] and left.get(parts[2], 0) > 0:
                out = dest.joinpath(*parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(m).read())
                left[parts[2]] -= 1
                if not any(left.values()):
                    return
    raise AssertionError(f"{archive}: fewer than {per_class} training reviews per polarity")


@pytest.fixture(scope="session")
def real(tmp_path_factory):
    """(data_root, cache_dir) for the real data sets; skips (with the reason printed) without ../shared/data."""
    missing = [name for name in ARCHIVES.values() if not (SHARED / name).is_file()]
    if missing:
        pytest.skip(
            f"real data archives not found in {SHARED} ({', '.join(missing)}); set MARA_SHARED_DATA to their folder"
        )
    root, cache = tmp_path_factory.mktemp("real_root"), tmp_path_factory.mktemp("real_cache")
    for key in ("cifar10", "yesno"):
        (root / ARCHIVES[key]).symlink_to(SHARED / ARCHIVES[key])
    _imdb_slice(SHARED / ARCHIVES["imdb"], root, IMDB_PER_CLASS)
    return str(root), str(cache)


def test_real_cifar10_is_the_full_training_set(real):
    ds = load_dataset("cifar10", "real", *real)
    assert ds.x.shape == (50_000, 3, 32, 32) and ds.x.dtype == torch.uint8
    assert ds.y.dtype == torch.int64 and ds.y[:5].tolist() == [6, 9, 9, 4, 1]  # official data_batch_1 order
    assert torch.bincount(ds.y).tolist() == [5000] * 10
    assert is_complete(Path(real[1]) / "cifar-10-batches-py", SPECS["cifar10"])  # unpacked into the cache


def test_real_imdb_slice(real):
    ds = load_dataset("imdb", "real", *real)
    assert ds.x.shape == (2 * IMDB_PER_CLASS, 200) and ds.x.dtype == torch.int64
    assert torch.bincount(ds.y).tolist() == [IMDB_PER_CLASS, IMDB_PER_CLASS]
    assert (ds.x[:, 0] > 1).all() and int(ds.x.max()) < 20_000  # every review starts with a known token


def test_real_yesno(real):
    ds = load_dataset("yesno", "real", *real)
    assert ds.x.shape == (60, 257, 40) and ds.x.dtype == torch.float32 and torch.isfinite(ds.x).all()
    assert ds.y.shape == (60, 8) and ds.y.dtype == torch.float32
    yes = int(ds.y.sum())
    assert set(ds.y.unique().tolist()) == {0.0, 1.0} and 0 < yes < 480


@pytest.mark.parametrize("family", REAL_FAMILIES)
def test_one_training_step_on_real_data(real, family):
    batch = min(DOMAIN_BATCH_SIZES[FAMILY_DOMAIN[family]])
    module, loader = build_task(
        family, seed=0, batch_size=batch, lr=1e-3, source="real", data_root=real[0], cache_dir=real[1]
    )
    opt = module.configure_optimizers()
    x, y = next(iter(loader))
    loss = module.training_step((x, y), 0)
    before = [p.detach().clone() for p in module.parameters()]
    opt.zero_grad()
    loss.backward()
    opt.step()
    chance = {"cross_entropy": np.log(10 if load_zoo_config(family).dataset == "cifar10" else 2), "bce": np.log(2)}
    assert (
        torch.isfinite(loss)
        and 0.3 * chance[load_zoo_config(family).loss] < float(loss) < 3 * chance[load_zoo_config(family).loss]
    )
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))
    assert torch.isfinite(module.training_step((x, y), 0))


@pytest.mark.parametrize("family", ["CNN_Cifar10", "ALSTM_Text_1", "TSFM_Audio_1"])
def test_generation_on_real_data_writes_a_real_shard(real, tmp_path, family):
    res = generate(
        [family],
        {"pool": 1},
        shard_dir=tmp_path,
        cap=3,
        source="real",
        data_root=real[0],
        cache_dir=real[1],
        quiet=True,
    )
    assert [r["status"] for r in res] == ["done"]
    bank = load_bank(tmp_path / f"{family}__real__pool__0000.parquet")
    assert bank.data_source.tolist() == ["real"] and bank.lengths.tolist() == [3] and np.isfinite(bank.ell).all()
    from tasks_zoo.registry import data_order, load_zoo_config

    assert json.loads(bank.meta[0])["data_order"] == data_order(load_zoo_config(family))  # file for the text families


def test_real_archive_unpack_killed_midway_leaves_the_cache_usable(real, tmp_path, monkeypatch):
    extract = tarfile.TarFile.extractall

    def dying(self, path, *a, **kw):
        extract(self, path, members=self.getmembers()[:5], **kw)
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(tarfile.TarFile, "extractall", dying)
    with pytest.raises(KeyboardInterrupt):
        locate("yesno", real[0], tmp_path)
    assert not (tmp_path / "waves_yesno").exists()
    monkeypatch.setattr(tarfile.TarFile, "extractall", extract)
    folder = locate("yesno", real[0], tmp_path)
    assert len(list(folder.glob("*.wav"))) == 60 and sorted(p.name for p in tmp_path.iterdir()) == ["waves_yesno"]
