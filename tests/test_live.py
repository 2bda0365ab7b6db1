"""Live mode: exact preempt/resume, a tiny live episode replayed decision for decision, worker failures, entry point."""

import json
import os
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from torch.utils.data import DataLoader

from mara.allocators.rules import EDF, FIFO
from mara.core.cli import run_cli
from mara.core.config import CONF_DIR
from mara.curves.bank import load_bank, write_bank
from mara.live.driver import replay, run_live
from mara.live.job import JobSpec, TrainingJob
from mara.live.run import live_main
from mara.live.workers import (
    InlinePool,
    NodeStep,
    ProcessPool,
    node_step,
    preload_datasets,
)
from tasks_zoo.batching import ResumableBatches, TensorPairs, seeded_loader

FAM = "ALSTM_Text_1"  # cheapest to build on synthetic data (no feature extraction)
SIM = {"nodes": 2, "max_active": 2, "steps": 4, "obs_every": 2}


def spec(j, seed=11, bs=4):
    return JobSpec(job_id=j, family=FAM, seed=seed + j, batch_size=bs, lr=1e-3, source="synthetic")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class _BatchLog(L.LightningModule):
    """Records the targets of every batch Lightning feeds it (a stand-in model with one weight)."""

    def __init__(self):
        super().__init__()
        self.w, self.seen = torch.nn.Parameter(torch.zeros(())), []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch[1].tolist())
        return (self.w * batch[0].float()).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def lightning_fed_order(ds, batch_size, seed, shuffle, steps):
    """The batches a Trainer fed from the loader the shipped bank was generated with (a plain seeded DataLoader)."""
    loader = DataLoader(
        ds, batch_size=batch_size, shuffle=shuffle, drop_last=True, generator=torch.Generator().manual_seed(seed)
    )
    log = _BatchLog()
    L.Trainer(
        accelerator="cpu",
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    ).fit(log, train_dataloaders=loader)
    return log.seen


@pytest.mark.parametrize("shuffle", [True, False])
def test_batch_order_is_the_zoo_loaders_across_epochs_and_resumes(shuffle):
    ds = TensorPairs(torch.arange(50).float(), torch.arange(50))
    expected = lightning_fed_order(ds, 8, 123, shuffle, 18)  # 3 epochs of 6 full batches
    rb = ResumableBatches(seeded_loader(ds, 8, 123, shuffle=shuffle))
    got = [rb.next()[1].tolist() for _ in range(8)]
    state = rb.state_dict()
    other = ResumableBatches(seeded_loader(ds, 8, 999, shuffle=shuffle))
    other.load_state_dict(state)
    got += [other.next()[1].tolist() for _ in range(len(expected) - 8)]
    assert got == expected


def test_preempted_job_resumes_exactly_in_another_worker():
    straight = TrainingJob(spec(0))
    want = [straight.step() for _ in range(7)]
    first = TrainingJob(spec(0))
    got = [first.step() for _ in range(3)]
    blob = first.to_bytes()  # preempted: state leaves this "node"
    noise = TrainingJob(spec(1))
    [noise.step() for _ in range(2)]  # another job uses the node meanwhile (global RNG, threads touched)
    pool = ProcessPool()  # resume in a different OS process
    try:
        pool.start(spec(0), state=blob)
        got += [pool.run([0])[0] for _ in range(4)]
    finally:
        pool.close()
    assert got == want


def tiny_tasks(n=3, budget=6, cap=12, eps=(10.0, 0.0, 10.0)):
    # eps 10 > any loss: success at batch 1 once served; eps 0: never succeeds, fails at its deadline
    return [
        {
            "arrival": a,
            "budget": budget,
            "eps": e,
            "family": FAM,
            "curve_row": j,
            "cap": cap,
            "batch_size": 4,
            "lr": 1e-3,
            "recipe_row": "test",
        }
        for j, (a, e) in enumerate(zip([0, 0, 1][:n], eps))
    ]


@pytest.mark.parametrize("alloc", [FIFO, EDF])
def test_tiny_live_episode_completes_and_replay_matches_decision_for_decision(alloc, tmp_path):
    tasks = tiny_tasks(eps=(10.0, 0.0, 0.5))
    tasks[2]["budget"] = 4
    specs = [spec(j) for j in range(3)]
    preload_datasets(specs)
    live = run_live(tasks, specs, alloc(), ProcessPool(), SIM)
    assert live["worker_failures"] == []
    assert all(s in (3, 4) for s in live["status"])  # every job left: succeeded or failed
    assert live["status"][0] == 3 and live["status"][1] == 4  # eps=10 succeeds at once, eps=0 never
    steps = [t for t, _, _ in live["timeline"]]
    assert max(np.bincount(steps)) <= SIM["nodes"]  # at most M batches per step
    assert len(set((t, m) for t, m, _ in live["timeline"])) == len(live["timeline"])  # a node runs one batch per step
    assert sum(live["batches"]) == len(live["timeline"])
    # recorded curves as bank rows (data_source=live), read back through the validating loader, then replayed
    recs = [
        {
            "curve_id": f"live/{j}",
            "family": FAM,
            "split": "pool",
            "data_source": "live",
            "batch_size": 4,
            "lr": 1e-3,
            "seed": specs[j].seed,
            "losses": ls,
            "meta": {"job": j},
        }
        for j, ls in enumerate(live["losses"])
        if ls
    ]
    bank = load_bank(write_bank(tmp_path / "live.parquet", recs))
    losses = [[] for _ in tasks]
    for i in range(len(bank)):
        losses[json.loads(bank.meta[i])["job"]] = bank.ell[i, : bank.lengths[i]].tolist()
    rp = replay(tasks, losses, alloc(), SIM)
    assert rp["decisions"] == live["decisions"]
    assert rp["status"] == live["status"] and rp["succeeded"] == live["succeeded"]
    assert rp["beyond_record"] == 0


def test_replay_detects_a_different_curve():
    """The agreement check can fail: a recorded curve that crosses ε earlier changes the replayed decisions."""
    tasks = tiny_tasks(eps=(0.0, 0.0, 0.0))
    specs = [spec(j) for j in range(3)]
    live = run_live(tasks, specs, FIFO(), InlinePool(), SIM)
    assert live["succeeded"] == 0
    losses = [list(x) for x in live["losses"]]
    tasks_easy = [dict(t, eps=10.0) if j == 0 else t for j, t in enumerate(tasks)]
    rp = replay(tasks_easy, losses, FIFO(), SIM)
    assert rp["succeeded"] == 1 and rp["decisions"] != live["decisions"]


def test_a_dying_worker_fails_its_job_and_keeps_the_others():
    tasks = tiny_tasks(eps=(0.0, 0.0, 0.0))
    specs = [spec(j) for j in range(3)]
    preload_datasets(specs)
    live = run_live(tasks, specs, FIFO(), ProcessPool(crash={1: 3}), SIM)  # job 1's process exits at its 3rd batch
    assert [f["job"] for f in live["worker_failures"]] == [1]
    assert "exit" in live["worker_failures"][0]["error"]
    assert live["status"][1] == 4 and live["batches"][1] == 2  # two batches recorded before the crash
    assert live["batches"][0] == tasks[0]["budget"]  # the other jobs ran to their deadlines, results kept
    assert live["batches"][2] > 0 and all(s == 4 for s in live["status"])


# ---- heterogeneous nodes and switch costs ------------------------------------------------------
HSIM = {"nodes": 2, "max_active": 3, "steps": 6, "obs_every": 2, "node_speed": [2, 1], "switch_cost": 1}


def hetero_tasks():
    # job 0 succeeds at once; 1 and 2 never reach ε (run to their deadlines); 3 arrives at step 3 with the earliest
    # deadline, so EDF pauses job 1 for it (a resume: set-up) and later moves job 1 to the fast node (set-up again)
    return [
        {
            "arrival": a,
            "budget": b,
            "eps": e,
            "family": FAM,
            "curve_row": j,
            "cap": 16,
            "batch_size": 4,
            "lr": 1e-3,
            "recipe_row": "test",
        }
        for j, (a, b, e) in enumerate(zip([0, 0, 1, 3], [4, 8, 6, 3], [10.0, 0.0, 0.0, 10.0]))
    ]


@pytest.mark.parametrize("alloc", [EDF, FIFO])
def test_tiny_live_episode_on_fast_and_slow_nodes_with_a_switch_cost_equals_the_simulator(alloc):
    """Speeds [2, 1], switch cost 1: the live run makes the simulator's decisions, pays the same switches and
    set-up steps (each switch really reloads the job's state), runs speed-many batches per node-step, and a
    job that was paused, resumed and moved still trains exactly as an uninterrupted run of its recipe."""
    tasks = hetero_tasks()
    specs = [spec(j) for j in range(len(tasks))]
    preload_datasets(specs)
    live = run_live(tasks, specs, alloc(), ProcessPool(), HSIM)
    assert live["worker_failures"] == []
    rp = replay(tasks, live["losses"], alloc(), HSIM)
    assert rp["decisions"] == live["decisions"] and rp["status"] == live["status"] and rp["beyond_record"] == 0
    assert (rp["switches"], rp["setup_steps"]) == (live["switches"], live["setup_steps"])
    assert live["reloads"] == live["switches"] >= (2 if alloc is EDF else 1)
    assert len(live["setup_timeline"]) == live["setup_steps"] == live["switches"]  # cost 1: one set-up step per switch
    assert sum(live["batches"]) == sum(HSIM["node_speed"][m] for _, m, _ in live["timeline"])  # s batches per node-step
    assert not set(live["timeline"]) & set(live["setup_timeline"])
    assert live["stretch_s"] > 0 and live["setup_s"] >= live["reload_s"] > 0  # slow node slept; set-ups reloaded
    assert (
        live["status"][0] == 3 and live["batches"][0] == 2
    )  # one step on the fast node: 2 batches, success at its end
    moved = [j for _, _, j in live["setup_timeline"]]
    pool = InlinePool()  # the switched jobs' curves equal uninterrupted runs of their recipes
    for j in set(moved):
        pool.start(specs[j])
        assert [pool.run([j])[j] for _ in range(live["batches"][j])] == live["losses"][j]
    pool.close()


def test_node_step_stretches_batches_and_idles_in_setup():
    """The sleep factor and the set-up idle time are what ``NodeStep`` asks (arithmetic on the measured seconds)."""
    job = TrainingJob(spec(0))
    job, res = node_step(job, NodeStep(batches=2, stretch=3.0))
    assert len(res.losses) == 2 and job.processed == 2 and res.reload_s == 0.0
    assert res.sleep_s == pytest.approx(2.0 * res.compute_s)
    before = job.to_bytes()
    job2, res = node_step(job, NodeStep(batches=0, idle_s=0.2, reload=True))
    assert job2 is not job and res.losses == () and res.reload_s > 0 and job2.processed == 2
    assert res.sleep_s == pytest.approx(max(0.0, 0.2 - res.reload_s))
    assert job2.step() == TrainingJob.from_bytes(before).step()  # the reloaded job resumes exactly


def cfg_for(tmp_path, *extra):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            "live",
            overrides=[
                f"paths.output_dir={tmp_path}",
                "live.data=synthetic",
                f"live.families=[{FAM}]",
                "live.time_scale=0.05",
                "sim.steps=10",
                "live.load=0.3",
                "live.root=1000",
                "live.tensorboard=false",
                *extra,
            ],
        )


def test_entry_point_runs_fifo_edf_writes_results_and_agreement(tmp_path):
    res = live_main(cfg_for(tmp_path, "methods=[FIFO,EDF]", "live.figure=true"))
    out = json.loads((tmp_path / "live_results.json").read_text())
    assert out["schema"] == "mara.live/1" and out["data"] == "synthetic"
    for m in ("FIFO", "EDF"):
        s = out["summary"][m]
        assert s["jobs"] > 0 and s["replay"]["decisions_identical"] and s["replay"]["outcomes_identical"]
    assert (tmp_path / "live_timeline.png").stat().st_size > 0
    bank = load_bank(tmp_path / "live_curves.parquet")
    assert set(bank.data_source) == {"live"}
    assert res["summary"]["FIFO"]["batches"] == sum(
        len(x) for r in out["runs"] if r["method"] == "FIFO" for x in r["losses"]
    )


@pytest.mark.parametrize(
    "override, needle",
    [
        ("live.families=[NoSuchNet]", "unknown family NoSuchNet"),
        ("sim.nodes=0", "sim.nodes (M) must be >= 1"),
        (
            "++method_overrides={MARA: {ckpt_path: /nonexistent/best.ckpt}}",
            "policy checkpoint /nonexistent/best.ckpt not found",
        ),
        ("methods=[NoSuchMethod]", "unknown method"),
        ("sim.node_speed=[2,1,1]", "sim.node_speed must have one entry per node (sim.nodes = 2), got 3"),
        ("sim.node_speed=[2,0]", "sim.node_speed entries must be >= 1"),
        ("sim.node_speed=[2,1.5]", "must be integers"),
        ("sim.node_speed=[11,1]", "<= sim.obs_every = 10"),
        ("sim.switch_cost=-1", "sim.switch_cost must be >= 0"),
    ],
)
def test_bad_input_ends_with_one_line(tmp_path, capsys, override, needle):
    cfg = cfg_for(tmp_path, "methods=[MARA,FIFO]", override)
    with pytest.raises(SystemExit) as exc:
        run_cli(live_main, cfg)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_entry_point_on_heterogeneous_nodes_reports_switches_and_agreement(tmp_path):
    res = live_main(
        cfg_for(
            tmp_path,
            "methods=[FIFO,Slack-WLS]",
            "sim.node_speed=[2,1]",
            "sim.switch_cost=1",
            "live.workers=inline",
            "live.figure=true",
        )
    )
    for m in ("FIFO", "Slack-WLS"):
        s = res["summary"][m]
        assert s["jobs"] > 0 and s["replay"]["decisions_identical"] and s["replay"]["outcomes_identical"]
        assert (
            s["replay"]["switches"] == s["switches"] == s["reloads"] > 0
            and s["replay"]["setup_steps"] == s["setup_steps"]
        )
    md = (tmp_path / "live_results.md").read_text()
    assert "Node speeds [2, 1]" in md and "| Switches (live / replay)" in md


def test_mara_runs_live_with_the_shipped_policy_and_replays(tmp_path):
    res = live_main(cfg_for(tmp_path, "methods=[MARA]", "live.figure=false", "live.workers=inline"))
    s = res["summary"]["MARA"]
    assert s["jobs"] > 0 and s["replay"]["beyond_record"] >= 0
    assert s["replay"]["succeeded"] == sum(r["replay"]["succeeded"] for r in res["runs"])


def test_mara_checkpoint_for_other_sim_settings_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_cli(live_main, cfg_for(tmp_path, "methods=[MARA]", "sim.max_active=3"))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trained for M=2, K=4" in err[0]


def test_mara_without_any_checkpoint_is_skipped_with_a_note(tmp_path, monkeypatch):
    import mara.live.run as run

    monkeypatch.setattr(run, "SHIPPED_POLICY", tmp_path / "absent.ckpt")
    res = live_main(
        cfg_for(tmp_path, "methods=[MARA,FIFO]", "live.replay=false", "live.figure=false", "live.workers=inline")
    )
    assert list(res["summary"]) == ["FIFO"]
    assert any("MARA skipped: no policy checkpoint" in n for n in res["notes"])


def test_live_job_with_a_bank_recipe_reproduces_the_recorded_curve(tmp_path):
    """Same recipe, same data source as a zoo-bank row: the live job's losses are that row's, batch for batch
    (exactly on synthetic data recorded on this kind of CPU; otherwise, and on real data, whose features are computed
    afresh, to float32 rounding)."""
    from mara.curves.bank import default_bank_path

    bank = load_bank(default_bank_path())
    fam = FAM if bank.data_source[int(bank.rows(FAM, "pool")[0])] == "synthetic" else "TSFM_Audio_1"  # YESNO: 60 clips
    row = int(bank.rows(fam, "pool")[0])
    source = str(bank.data_source[row])
    kw = {}
    if source == "real":
        shared = Path(os.environ.get("MARA_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
        if not (shared / "waves_yesno.tar.gz").is_file():
            pytest.skip(f"the shipped bank is real and YESNO is not in {shared}; set MARA_SHARED_DATA to its folder")
        kw = {"data_root": str(shared), "cache_dir": str(tmp_path)}
    job = TrainingJob(
        JobSpec(0, fam, int(bank.seed[row]), int(bank.batch_size[row]), float(bank.lr[row]), source=source, **kw)
    )
    n = 2 * len(job.batches.loader) + 10  # past two epoch ends: each epoch is reshuffled as the bank's run was
    got = [job.step() for _ in range(n)]
    # bit for bit only where the row was recorded on the same kind of CPU: AVX2 and AVX-512 kernels round differently
    same_cpu = json.loads(bank.meta[row]).get("cpu_capability") == torch.backends.cpu.get_cpu_capability()
    if source == "synthetic" and same_cpu:
        assert got == bank.ell[row, :n].tolist()
    else:
        assert got == pytest.approx(bank.ell[row, :n].tolist(), rel=1e-5)


def test_missing_real_data_falls_back_to_synthetic_with_a_flag(tmp_path):
    res = live_main(
        cfg_for(
            tmp_path,
            "methods=[FIFO]",
            "live.data=real",
            f"live.data_root={tmp_path / 'nothing'}",
            f"live.cache_dir={tmp_path / 'cache'}",
            "live.replay=false",
            "live.figure=false",
            "live.workers=inline",
        )
    )
    assert res["data"] == "synthetic"
    assert any(n.startswith("real data unavailable") for n in res["notes"])


def test_exported_training_bank_has_the_live_runs_epsilon(tmp_path):
    """A policy for live mode trains on the ε a live run with the same settings will set (calibration_bank=auto)."""
    import pyarrow.parquet as pq

    from mara.curves.bank import shipped_bank_path
    from mara.live.episode import scaled_family_params
    from mara.live.run import calibration_bank, settings_of

    fams = ["TSFM_Audio_1", "LSTM_Cifar10", "ALSTM_Text_1"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "live",
            overrides=[f"paths.output_dir={tmp_path}", "action=export_bank", f"bank_out={tmp_path / 'b.parquet'}"],
        )
    live_main(cfg)
    table = json.loads(pq.read_metadata(tmp_path / "b.parquet").metadata[b"mara.bank"])["family_params"]
    real = load_bank(shipped_bank_path("live_real"))
    lv = settings_of(cfg).live
    assert calibration_bank(lv, fams, "real").path == real.path  # auto + real data -> the shipped real-data curves
    assert calibration_bank(lv, fams, "synthetic") is None  # synthetic jobs -> the recipe bank's own curves
    bank = load_bank(shipped_bank_path("zoo"))
    want = scaled_family_params(real, fams, 0.25, 0.70, base=bank.family_params)
    for f in fams:
        assert table[f]["eps"] == pytest.approx(want[f]["eps"]) and table[f]["budget"] == list(want[f]["budget"])
    other = scaled_family_params(bank, bank.families, 0.25, 0.70)["CNN_Cifar10"]
    assert table["CNN_Cifar10"]["eps"] == pytest.approx(other["eps"])  # families live_real lacks keep the bank's own
    # curves cut at the live cap, so a cold task's cap_remaining (its predicted remaining) is what live mode shows
    from mara.curves.families import generation_cap

    out = load_bank(tmp_path / "b.parquet")
    assert len(out) == len(bank)
    for i in (0, len(out) - 1):
        assert out.lengths[i] == min(bank.lengths[i], generation_cap(out.family[i], table))
    assert out.lengths.max() <= max(generation_cap(f, table) for f in out.families) < bank.lengths.max()


def test_a_file_order_family_trains_live_in_file_order():
    """ALSTM_Text_1 has data_order: file; a live job must see the batches its bank curve saw (not a reshuffled
    stream)."""
    job = TrainingJob(spec(0, bs=4))
    assert not job.batches.shuffle
    from tasks_zoo.registry import build_task

    _, loader = build_task(FAM, seed=11, batch_size=4, lr=1e-3)
    first = next(iter(loader))
    x, y = job.batches.next()
    assert torch.equal(x, first[0]) and torch.equal(y, first[1])
