"""Zoo data layer: a DataModule per data set, the resumable loader in the bank's order, mid-run resume of a
generation job, a family added with a LightningModule + DataModule + one YAML, and the shipped real-data curves
regenerated through ``trainer.fit(task, datamodule=dm)``."""

from __future__ import annotations

import io
import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from mara.curves import generation as gen
from mara.curves import recorder as rec
from mara.curves.bank import load_bank
from mara.curves.families import ALL_FAMILIES
from tasks_zoo import datamodules as zdm
from tasks_zoo.batching import ResumableBatches, TensorPairs, seeded_loader
from tasks_zoo.errors import ZooError
from tasks_zoo.registry import build_datamodule, build_run, load_zoo_config

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MARA_SHARED_DATA", REPO.parent / "shared" / "data"))


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_every_family_has_its_data_sets_datamodule():
    want = {
        "cifar10": zdm.Cifar10DataModule,
        "imdb": zdm.ImdbDataModule,
        "yesno": zdm.YesnoDataModule,
        "montezuma": zdm.MontezumaDataModule,
    }
    for fam in ALL_FAMILIES:
        dm = build_datamodule(fam, seed=1, batch_size=4, source="synthetic")
        assert type(dm) is want[load_zoo_config(fam).dataset]
        assert dm.data_order == load_zoo_config(fam).get("data_order", "shuffled")
    dm = build_datamodule("TSFM_Audio_1", seed=1, batch_size=4, source="synthetic")
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert isinstance(loader, StatefulDataLoader) and len(loader) == len(dm.dataset) // 4
    x, y = next(iter(loader))
    assert x.shape[0] == 4 and y.shape == (4, 8)
    with pytest.raises(ZooError, match="unknown data source 'webcam'"):
        build_datamodule("TSFM_Audio_1", seed=1, batch_size=4, source="webcam")


@pytest.mark.parametrize("n", [50, 48])  # with and without a partial last batch
def test_loader_resumes_at_every_position_in_the_same_order(n):
    ds = TensorPairs(torch.arange(n).float(), torch.arange(n))
    for shuffle in (True, False):
        straight = ResumableBatches(seeded_loader(ds, 8, 5, shuffle))
        want = [straight.next()[1].tolist() for _ in range(20)]  # 3+ epochs of 6 batches
        assert want[:6] != want[6:12] if shuffle else want[:6] == want[6:12]
        for k in (0, 1, 5, 6, 7, 12, 19):
            first = ResumableBatches(seeded_loader(ds, 8, 5, shuffle))
            got = [first.next()[1].tolist() for _ in range(k)]
            buf = io.BytesIO()
            torch.save(first.state_dict(), buf)  # the state travels as bytes (another process, another node)
            second = ResumableBatches(seeded_loader(ds, 8, 77, shuffle))
            second.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=False))
            got += [second.next()[1].tolist() for _ in range(20 - k)]
            assert got == want, (shuffle, k)


class _Killed(Exception):
    pass


@pytest.mark.parametrize("kill_after", [23, 33])  # last checkpoint mid-epoch (batch 15) / at the epoch's end (batch 30)
def test_generation_run_killed_midway_resumes_from_its_checkpoint_exactly(tmp_path, monkeypatch, kill_after):
    job = gen.Job("TSFM_Audio_1", "pool", 0, "synthetic")  # batch size 2: 30 batches per epoch of 60 clips
    ref, _ = gen.train_curve(job, gen.GenerationSettings(shard_dir=str(tmp_path / "a"), cap=70))
    assert ref["batch_size"] == 2
    settings = gen.GenerationSettings(shard_dir=str(tmp_path / "b"), cap=70, checkpoint_every=15)
    record = rec.LossRecorder.on_train_batch_end

    def dying(self, trainer, *args):
        record(self, trainer, *args)
        if len(self.losses) == kill_after:
            raise _Killed

    monkeypatch.setattr(rec.LossRecorder, "on_train_batch_end", dying)
    with pytest.raises(_Killed):
        gen.train_curve(job, settings)
    monkeypatch.setattr(rec.LossRecorder, "on_train_batch_end", record)
    ckpt = gen.partial_checkpoint(job, settings, 0)
    assert ckpt.is_file()
    resumed, why = gen.train_curve(job, settings)
    assert why is None and resumed["meta"]["resumed_from_batch"] == 15 * (kill_after // 15)
    assert resumed["losses"] == ref["losses"]  # every batch, bit for bit
    assert not ckpt.exists()  # removed once the shard's record is complete


TOY_MODULE = '''
import lightning as L
import torch
from tasks_zoo.batching import TensorPairs
from tasks_zoo.datamodules import ZooDataModule


class LinesDataModule(ZooDataModule):
    """y = 3 x - 1 + noise, 96 points (the same data for real and synthetic)."""

    @classmethod
    def real_dataset(cls, data_root, cache_dir, download):
        return cls.synthetic_dataset()

    @classmethod
    def synthetic_dataset(cls):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 1, generator=g)
        return TensorPairs(x, 3 * x - 1 + 0.1 * torch.randn(96, 1, generator=g))


class LineTask(L.LightningModule):
    def __init__(self, lr, width=4):
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(1, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)
'''

TOY_YAML = """
family: ToyLines
domain: toy
batch_sizes: [8, 16]
cap: 20
module: {_target_: toyzoo.LineTask, width: 6}
datamodule: {_target_: toyzoo.LinesDataModule}
"""


def test_a_family_added_with_a_module_a_datamodule_and_one_yaml_generates_curves(tmp_path, monkeypatch):
    (tmp_path / "toyzoo.py").write_text(textwrap.dedent(TOY_MODULE))
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "ToyLines.yaml").write_text(TOY_YAML)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MARA_ZOO_CONF", str(tmp_path / "zoo"))
    module, dm = build_run("ToyLines", seed=3, batch_size=8, lr=1e-2)
    assert type(module).__name__ == "LineTask" and module.net[0].out_features == 6
    assert type(dm).__name__ == "LinesDataModule" and len(dm.train_dataloader()) == 12
    shards = tmp_path / "shards"
    done = gen.generate(["ToyLines"], {"pool": 2, "fm_val": 1}, shard_dir=shards, quiet=True)
    assert [r["status"] for r in done] == ["done"] * 3
    bank = load_bank(gen.merge(shards, tmp_path / "toy.parquet"))
    assert sorted(bank.curve_id) == [
        "ToyLines/synthetic/fm_val/0000",
        "ToyLines/synthetic/pool/0000",
        "ToyLines/synthetic/pool/0001",
    ]
    assert set(bank.lengths) == {20} and set(bank.batch_size) <= {8, 16}
    ell = bank.ell[:, :20]
    assert np.isfinite(ell).all() and (ell[:, -5:].mean(1) < ell[:, :5].mean(1)).all()  # it learns
    again = gen.train_curve(gen.Job("ToyLines", "pool", 0, "synthetic"), gen.GenerationSettings(shard_dir=str(shards)))[
        0
    ]
    assert again["losses"] == bank.ell[list(bank.curve_id).index("ToyLines/synthetic/pool/0000"), :20].tolist()
    (tmp_path / "zoo" / "ToyLines.yaml").write_text(TOY_YAML.replace("toyzoo.LineTask", "toyzoo.Nope"))
    with pytest.raises(ZooError, match="module._target_ 'toyzoo.Nope' cannot be imported"):
        build_run("ToyLines", seed=3, batch_size=8, lr=1e-2)


def test_regenerated_real_curves_equal_the_shipped_shards(tmp_path):
    """TSFM_Audio_1 (the cheapest family; YESNO epochs of 15-60 batches, so 700 batches cross many reshuffles)
    through the DataModule + StatefulDataLoader path: the shipped real-data shard's losses, batch for batch."""
    shard = REPO / "data" / "zoo_bank" / "shards" / "TSFM_Audio_1__real__pool__0000.parquet"
    if not shard.is_file() or not (SHARED / "waves_yesno.tar.gz").is_file():
        pytest.skip(f"needs {shard.name} and {SHARED}/waves_yesno.tar.gz (set MARA_SHARED_DATA)")
    shipped = pq.read_table(shard).to_pylist()[0]
    job = gen.Job("TSFM_Audio_1", "pool", 0, "real")
    record, why = gen.train_curve(
        job,
        gen.GenerationSettings(shard_dir=str(tmp_path), data_root=str(SHARED), cache_dir=str(tmp_path / "cache")),
        json.loads(shipped["meta"]).get("attempt", 0),
    )
    assert why is None and (record["seed"], record["batch_size"]) == (shipped["seed"], shipped["batch_size"])
    got, want = np.asarray(record["losses"]), np.asarray(shipped["losses"])
    assert len(got) == len(want) == 700
    # bit for bit on the CPU kind the bank was made on (measured: max |diff| 0). On another CPU kind the first
    # batches differ in the last bits (measured on one: 1.2e-7 at batch 1, 1e-6 by batch 200) and 700 SGD steps
    # amplify that into another trajectory (0.70 by batch 700): batch for batch up to float rounding over the
    # first 200 batches, and the whole curve where the kind is the bank's
    scale = np.abs(want).max()
    assert np.abs(got - want)[:200].max() <= 1e-5 * scale
    if np.abs(got - want)[:200].max() == 0:
        assert np.abs(got - want).max() <= 1e-4 * scale
