"""Curve generation: job plan and recipes, resume skips finished jobs, 1 vs 2 workers agree, failures logged, merge."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch
from omegaconf import OmegaConf

from mara.curves import generation as gen
from mara.curves import training
from mara.curves.bank import load_bank
from mara.curves.families import (
    ALL_FAMILIES,
    DOMAIN_BATCH_SIZES,
    FAMILY_DOMAIN,
    ID_FAMILIES,
    LR_RANGE,
)
from tasks_zoo.errors import ZooError

FAM = "TSFM_Audio_1"  # the cheapest family


def test_plan_orders_pool_first_then_cheapest():
    jobs = gen.plan_jobs("all", {"pool": 2, "fm_val": 1, "fm_train": 1})
    splits = [j.split for j in jobs]
    assert splits == sorted(splits, key=gen.GROUP_ORDER.index)
    pool_fams = [j.family for j in jobs if j.split == "pool"][::2]
    assert pool_fams == list(gen.COST_ORDER)
    assert {j.family for j in jobs if j.split != "pool"} == set(ID_FAMILIES)
    assert len({j.curve_id for j in jobs}) == len(jobs)


def test_recipe_is_deterministic_and_in_range():
    for fam in gen.COST_ORDER:
        for i in range(5):
            job = gen.Job(fam, "pool", i, "synthetic")
            seed, bs, lr = gen.job_recipe(job)
            assert (seed, bs, lr) == gen.job_recipe(job)
            assert bs in DOMAIN_BATCH_SIZES[FAMILY_DOMAIN[fam]] and LR_RANGE[0] <= lr <= LR_RANGE[1]
    assert gen.job_recipe(gen.Job(FAM, "pool", 0, "synthetic")) != gen.job_recipe(
        gen.Job(FAM, "fm_train", 0, "synthetic")
    )


def test_request_errors_are_one_line():
    with pytest.raises(ZooError, match="unknown family Foo"):
        gen.plan_jobs(["Foo"], {"pool": 1})
    with pytest.raises(ZooError, match="unknown source"):
        gen.plan_jobs([FAM], {"pool": 1}, source="webcam")


def _losses(bank):
    return {cid: bank.ell[i, : bank.lengths[i]].tolist() for i, cid in enumerate(bank.curve_id)}


def test_resume_skips_finished_jobs_and_yields_same_bank(tmp_path):
    shards = tmp_path / "shards"
    first = gen.generate([FAM], {"pool": 3, "fm_val": 1}, shard_dir=shards, cap=5, quiet=True)
    assert [r["status"] for r in first] == ["done"] * 4
    bank_a = load_bank(gen.merge(shards, tmp_path / "a.parquet"))
    (shards / gen.Job(FAM, "pool", 1, "synthetic").shard_name).unlink()
    second = gen.generate([FAM], {"pool": 3, "fm_val": 1}, shard_dir=shards, cap=5, quiet=True)
    assert [r["job"]["index"] for r in second] == [1]
    bank_b = load_bank(gen.merge(shards, tmp_path / "b.parquet", tensorboard_dir=tmp_path / "tb"))
    assert _losses(bank_a) == _losses(bank_b) and len(bank_b) == 4
    assert set(bank_b.data_source) == {"synthetic"} and bank_b.lengths.tolist() == [5] * 4
    meta = json.loads(bank_b.meta[0])
    assert {"code_version", "torch_version", "device", "wall_time_s", "cpu_time_s", "created_at", "source"} <= set(meta)
    assert 0 < meta["cpu_time_s"] and meta["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert bank_b.bank_meta["composition"] == {FAM: {"pool": 3, "fm_val": 1}}
    assert any((tmp_path / "tb").iterdir())


def test_eta_learns_from_finished_shards(tmp_path):
    shards = tmp_path / "shards"
    gen.generate([FAM], {"pool": 2}, shard_dir=shards, cap=5, quiet=True)
    measured = gen.measured_seconds(shards, [FAM, "CNN_Cifar10"])
    assert set(measured) == {FAM} and 0 < measured[FAM] < 60
    assert gen.measured_seconds(shards, [FAM], accelerator="gpu") == {}  # CPU times never feed a GPU estimate
    todo = [gen.Job(FAM, "pool", i, "synthetic") for i in range(2, 6)]
    reporter = gen.ProgressReporter(todo, parallel=2, quiet=True, prior=measured)
    assert reporter.eta_seconds() == pytest.approx(4 * measured[FAM] / 2)


def test_two_workers_give_the_same_curves(tmp_path):
    gen.generate([FAM], {"pool": 4}, shard_dir=tmp_path / "one", cap=5, workers=1, quiet=True)
    gen.generate([FAM], {"pool": 4}, shard_dir=tmp_path / "two", cap=5, workers=2, quiet=True)
    one = load_bank(gen.merge(tmp_path / "one", tmp_path / "one.parquet"))
    two = load_bank(gen.merge(tmp_path / "two", tmp_path / "two.parquet"))
    assert _losses(one) == _losses(two)
    assert one.seed.tolist() == two.seed.tolist() and one.batch_size.tolist() == two.batch_size.tolist()


def test_torchrun_rank_takes_its_share(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(gen, "run_job", lambda job, s, d=None: {"job": asdict(job), "status": "done", "seconds": 0.0})
    res = gen.generate([FAM], {"pool": 7}, shard_dir=tmp_path, cap=5, quiet=True)
    assert [r["job"]["index"] for r in res] == [1, 4]


def test_non_finite_run_is_logged_and_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(
        training,
        "train_curve",
        lambda job, s, attempt=0, dev=None: (None, f"non-finite loss nan at batch {attempt + 2}"),
    )
    settings = gen.GenerationSettings(shard_dir=str(tmp_path), cap=5, max_attempts=2)
    res = gen.run_job(gen.Job(FAM, "pool", 0, "synthetic"), settings)
    assert res["status"] == "failed" and not list(tmp_path.glob("*.parquet"))
    lines = [json.loads(x) for x in (tmp_path / "failures.jsonl").read_text().splitlines()]
    assert [x["attempt"] for x in lines] == [0, 1] and "non-finite" in lines[0]["reason"]


def test_recorder_stops_on_non_finite():
    from mara.curves.recorder import LossRecorder

    class T:
        should_stop = False

    import torch

    rec, trainer = LossRecorder(), T()
    rec.on_train_batch_end(trainer, None, {"loss": torch.tensor(1.0)}, None, 0)
    rec.on_train_batch_end(trainer, None, {"loss": torch.tensor(math.nan)}, None, 1)
    assert trainer.should_stop and "batch 2" in rec.failure and len(rec.losses) == 2


def test_entry_point_prints_one_line_on_config_mistake(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mara.generate_curves",
            "families=[Nope]",
            f"out_dir={tmp_path}",
            f"hydra.run.dir={tmp_path}/h",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert lines == ["error: unknown family Nope (known: " + ", ".join(ALL_FAMILIES) + ")"]


def test_missing_real_data_stops_before_training_with_one_line(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mara.generate_curves",
            "families=[CNN_Cifar10,TSFM_Audio_1]",
            "source=real",
            f"data_root={tmp_path}/empty",
            f"cache_dir={tmp_path}/cache",
            f"out_dir={tmp_path}",
            f"hydra.run.dir={tmp_path}/h",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: CIFAR-10 not found: ") and f"{tmp_path}/empty" in lines[0]
    assert "cifar-10-python.tar.gz" in lines[0] and "cifar-10-batches-py/" in lines[0]
    assert not list(tmp_path.glob("shards/*.parquet"))


def _gen_cfg(tmp_path, **kw):
    from mara.core.config import CONF_DIR

    cfg = OmegaConf.load(CONF_DIR / "generate_curves.yaml")
    cfg.pop("hydra")
    cfg.merge_with(
        {
            "families": [FAM],
            "counts": {"pool": 2, "fm_val": 1, "fm_train": 0},
            "cap": 5,
            "out_dir": str(tmp_path),
            "tensorboard_dir": None,
            "calibrate": False,
            "quiet": True,
            "source": "synthetic",
            **kw,
        }
    )
    return cfg


def test_ship_refuses_an_incomplete_plan_and_installs_a_complete_one(tmp_path, monkeypatch):
    from mara import generate_curves as entry
    from mara.curves import bank as bank_mod

    dest = tmp_path / "pkg" / "zoo.parquet"
    dest.parent.mkdir()
    monkeypatch.setattr(bank_mod, "shipped_bank_path", lambda name: dest)
    monkeypatch.setattr(entry, "shipped_bank_path", lambda name: dest)  # where action=ship looks it up
    gen.generate([FAM], {"pool": 1}, shard_dir=tmp_path / "shards", cap=5, quiet=True)
    with pytest.raises(ZooError, match="2 of the requested curves are not generated yet"):
        entry.run(_gen_cfg(tmp_path, action="ship"))
    assert not dest.exists() and not (tmp_path / "zoo.parquet").exists()
    entry.run(_gen_cfg(tmp_path, action="generate"))
    entry.run(_gen_cfg(tmp_path, action="ship"))
    shipped = load_bank(dest)
    assert len(shipped) == 3 and _losses(shipped) == _losses(load_bank(tmp_path / "zoo.parquet"))
    assert (tmp_path / "curves_by_family.png").stat().st_size > 0  # the bank's curve plot sits beside it
    with pytest.raises(ZooError, match="over the 0.001 MiB"):
        entry.install_bank(tmp_path / "zoo.parquet", max_mib=0.001)


def test_merge_takes_only_the_plans_shards(tmp_path):
    """A real-data bank never picks up stand-in shards lying in the same folder (and vice versa)."""
    from mara import generate_curves as entry

    gen.generate([FAM], {"pool": 2}, shard_dir=tmp_path / "shards", cap=5, quiet=True)  # synthetic shards
    stray = gen.Job(FAM, "pool", 0, "real")
    (tmp_path / "shards" / stray.shard_name).write_bytes(
        (tmp_path / "shards" / gen.Job(FAM, "pool", 0, "synthetic").shard_name).read_bytes()
    )
    entry.run(_gen_cfg(tmp_path, action="merge", counts={"pool": 2}))
    assert len(load_bank(tmp_path / "zoo.parquet")) == 2
    from mara.curves.bank import BankError

    with pytest.raises(BankError, match="duplicate curve_id"):  # every shard of the folder: the stray copy's id repeats
        load_bank(gen.merge(tmp_path / "shards", tmp_path / "all.parquet"))


def test_bank_grid_plot_lays_out_every_family(small_bank, tmp_path):
    import matplotlib.image as mpimg

    png = gen.plot_bank_grid(small_bank.path, tmp_path / "grid.png")
    img = mpimg.imread(png)
    n = len(small_bank.families)
    assert img.shape[1] == int(3.4 * min(5, n) * 110) and img.shape[0] == int(2.8 * -(-n // 5) * 110)


def test_status_counts_shards_and_their_recorded_cost(tmp_path, capsys):
    """action=status: done / planned per family and split, compute = (wall − recorded pause) × threads from each
    shard's meta, missing curves estimated at the family's mean so far."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mara import generate_curves as entry
    from mara.curves.plan_status import curve_cost_s, plan_status, shard_meta

    shards = tmp_path / "shards"
    gen.generate([FAM], {"pool": 2}, shard_dir=shards, cap=5, quiet=True)
    jobs = gen.plan_jobs([FAM], {"pool": 3, "fm_val": 2, "fm_train": 0}, "synthetic")
    paths = [shards / gen.Job(FAM, "pool", i, "synthetic").shard_name for i in range(2)]
    # record a pause in the first shard's meta, as for a worker stopped while the machine ran something else
    t = pq.read_table(paths[0])
    meta = json.loads(t.column("meta")[0].as_py()) | {"wall_time_s": 100.0, "paused_s": 60.0, "threads": 2}
    meta.pop("cpu_time_s")  # an older shard: cost from its wall time
    col = pa.array([json.dumps(meta)], type=t.schema.field("meta").type)
    pq.write_table(t.set_column(t.schema.get_field_index("meta"), t.schema.field("meta"), col), paths[0])
    second = shard_meta(paths[1])
    assert curve_cost_s(shard_meta(paths[0])) == pytest.approx(80.0)  # (100 − 60) × 2
    rows = plan_status(jobs, shards, {FAM: 999.0})
    assert [(r["split"], r["done"], r["planned"]) for r in rows] == [("pool", 2, 3), ("fm_val", 0, 2)]
    assert (
        curve_cost_s(second) == second["cpu_time_s"]
        and curve_cost_s(second | {"cpu_time_s": None}) == second["wall_time_s"]
    )
    mean = (80.0 + float(second["cpu_time_s"])) / 2
    assert rows[0]["spent_s"] == pytest.approx(80.0 + float(second["cpu_time_s"]))
    assert rows[0]["remaining_s"] == pytest.approx(mean) and rows[1]["remaining_s"] == pytest.approx(2 * mean)
    assert plan_status(jobs, tmp_path / "empty", {FAM: 10.0})[1]["remaining_s"] == 20.0  # no shard yet: the guess
    entry.run(_gen_cfg(tmp_path, action="status", counts={"pool": 3, "fm_val": 2, "fm_train": 0}, workers=2))
    out = capsys.readouterr().out
    assert f"| {FAM} | pool | synthetic | 2 / 3 |" in out and "2 of 5 curves finished" in out and "on 2 workers" in out
