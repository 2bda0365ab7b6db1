"""Entry points end to end on tiny configs; every config composes; config mistakes give one line."""

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mara.core.config import CONF_DIR, ConfigError, available_methods, load_method_cfg
from mara.curves.bank import BankError, write_bank
from mara.evaluate import evaluate
from tests.conftest import compose_config, run_python

REPO = Path(__file__).resolve().parents[1]


def cfg_for(name="evaluate", overrides=()):
    return compose_config(name, *overrides)


def tiny(tmp_path, bank_path, *extra, name="evaluate"):
    return cfg_for(
        name,
        [
            f"bank.path={bank_path}",
            "eval.roots=1",
            "eval.episodes=2",
            "sim.loads=[0.04]",
            f"paths.output_dir={tmp_path}",
            "eval.tensorboard=false",
            *extra,
        ],
    )


GROUPS = ["sim", "bank", "family_params", "scenario", "eval", "trainer"]


@pytest.mark.parametrize(
    "primary, keys",
    [
        ("calibrate", {"bank", "target", "seed"}),
        ("generate_curves", {"families", "counts", "workers", "data_root", "action"}),
    ],
)
def test_other_primaries_compose(primary, keys):
    assert keys <= set(cfg_for(primary).keys())


@pytest.mark.parametrize("primary", ["evaluate", "train"])
def test_every_group_option_composes(primary):
    keys = set(cfg_for(primary).keys())
    for group in GROUPS:
        if group not in keys:
            continue
        for option in sorted((CONF_DIR / group).glob("*.yaml")):
            cfg = cfg_for(primary, [f"{group}={option.stem}"])
            assert cfg.sim.nodes >= 1
    for option in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        cfg_for(primary, [f"experiment={option.stem}"])


def test_every_method_and_standalone_config_loads():
    for name in available_methods():
        cfg = load_method_cfg(name)
        assert cfg.name == name and cfg.kind in ("policy", "bound")
    expected = {"taskset": {"name", "families"}, "zoo": {"family"}, "predictor": {"name"}}
    for sub, keys in expected.items():
        for path in (CONF_DIR / sub).glob("*.yaml"):
            cfg = OmegaConf.load(path)
            assert keys <= set(cfg.keys()), f"{path}: missing {keys - set(cfg.keys())}"
    for path in (CONF_DIR / "mat").glob("*.yaml"):  # recipes may start from another (defaults): compose them
        mat = cfg_for("train", [f"mat={path.stem}"]).mat
        assert {"ppo", "net", "rollout", "total_env_steps"} <= set(mat.keys()), path


def test_evaluate_end_to_end(tmp_path, small_bank):
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO,EDF,Oracle]"))
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["schema"] == "mara.results/1"
    assert len(data["rows"]) == 3 * 3 * 2  # methods × task sets × episodes
    row = data["rows"][0]
    for key in (
        "method",
        "task_set",
        "load",
        "root",
        "train_seed",
        "episode",
        "n_tasks",
        "succeeded",
        "success_rate",
        "utilization",
        "queue_full",
        "waiting",
        "ready",
    ):
        assert key in row
    assert set(data["summary"]) == {"FIFO", "EDF", "Oracle"}
    assert "Average" in data["summary"]["FIFO"]
    assert (tmp_path / "results.md").read_text().startswith("# Evaluation")
    # every policy is below the independent-feasibility bound, episode by episode
    by = {(r["method"], r["task_set"], r["episode"]): r["succeeded"] for r in data["rows"]}
    for (m, ts, e), s in by.items():
        assert s <= by[("Oracle", ts, e)]
    assert res["summary"] == data["summary"]


def test_evaluate_stress_rule_baselines_fail(tmp_path, small_bank):
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO,EDF,Oracle]", "scenario=stress"))
    s = res["summary"]
    assert s["FIFO"]["stress"]["0"]["mean"] == 0 and s["EDF"]["stress"]["0"]["mean"] == 0
    assert s["Oracle"]["stress"]["0"]["mean"] == pytest.approx(65.0)


@pytest.mark.parametrize(
    "override, error, needle",
    [
        ("methods=[FIFO,Nope]", ConfigError, "unknown method 'Nope'; available:"),
        ("sim.loads=[1.5]", ConfigError, r"p must lie in \[0, 1\]"),
        ("sim.nodes=0", ConfigError, "sim.nodes must be >= 1"),
        ("bank.path=/nonexistent/bank.parquet", BankError, "file not found"),
        ("eval.task_sets=[ID,XYZ]", ConfigError, "unknown task set"),
        ("sim.loads=[0.04,abc]", ConfigError, "sim.loads must be a number, got 'abc'"),
        ("sim.loads=0.04", ConfigError, "sim.loads must be a list"),
        ("sim.max_active=2.5", ConfigError, "sim.max_active must be an integer"),
        ("eval.roots=[0,x]", ConfigError, "eval.roots must be an integer"),
        ("eval.episodes=many", ConfigError, "eval.episodes must be an integer"),
        ("sim.queue_capacity=-1", ConfigError, "sim.queue_capacity must be null or >= 0"),
        ("sim.node_speed=[2,1]", ConfigError, "sim.node_speed must have one entry per node"),
        ("sim.switch_cost=-1", ConfigError, "sim.switch_cost must be >= 0"),
    ],
)
def test_config_mistakes(tmp_path, small_bank, override, error, needle):
    cfg = tiny(tmp_path, small_bank.path, override)
    with pytest.raises(error, match=needle):
        evaluate(cfg)


def test_bank_lacking_family(tmp_path, linear_bank):
    with pytest.raises(BankError, match="no 'pool' curves for famil"):
        evaluate(tiny(tmp_path, linear_bank.path, "methods=[FIFO]", "family_params=paper"))


def test_bank_without_calibration(tmp_path, linear_bank):
    with pytest.raises(BankError, match="carries no calibrated family_params"):
        evaluate(tiny(tmp_path, linear_bank.path, "methods=[FIFO]"))


_run = run_python


def test_cli_evaluate_and_train_run(tmp_path, small_bank):
    common = [
        f"bank.path={small_bank.path}",
        "eval.roots=1",
        "eval.episodes=1",
        "sim.loads=[0.04]",
        "eval.tensorboard=false",
    ]
    p = _run("-m", "mara.evaluate", "methods=[FIFO,Oracle]", f"hydra.run.dir={tmp_path}/ev", *common)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "ev" / "results.json").exists()
    p = _run("-m", "mara.train", "stage=evaluate", "methods=[EDF,Oracle]", f"hydra.run.dir={tmp_path}/tr", *common)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "tr" / "evaluation" / "results.json").exists()


def test_bench_quick(tmp_path):
    out = tmp_path / "bench.json"
    p = _run("-m", "mara.bench", "--quick", "--repeats", "1", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "env-steps/s, E=8" in p.stdout and "rule protocol" in p.stdout
    rec = json.loads(out.read_text())
    for key in ("sim_env_steps_per_s", "mat_rollout_env_steps_per_s", "mat_ppo_env_steps_per_s"):
        assert rec[key] > 0
    assert rec["mat_ppo_env_steps_per_s"] < rec["mat_rollout_env_steps_per_s"]  # an iteration = rollout + updates
    assert rec["mat"]["decoder"] == "plackett_luce" and rec["quick"]


def test_bank_write_is_atomic(tmp_path, monkeypatch):
    """A write that dies half-way leaves the previous bank untouched and no partial file behind."""
    import pyarrow.parquet as pq

    from mara.curves.bank import load_bank
    from tests.conftest import linear_records

    path = write_bank(tmp_path / "x.parquet", linear_records(1, 5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet"]
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    before = path.read_bytes()

    def dies_half_way(table, where, **kw):
        Path(where).write_bytes(b"PAR1 half a file")
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(pq, "write_table", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        write_bank(path, linear_records(2, 7))
    assert path.read_bytes() == before and load_bank(path).ell.shape == (1, 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet"]


def test_train_smoke_pipeline(tmp_path, small_bank):
    """The whole pipeline (FM stage → MAT-PPO stage → evaluation) end to end on the smoke experiment."""
    p = _run("-m", "mara.train", "experiment=smoke", f"bank.path={small_bank.path}", f"hydra.run.dir={tmp_path}/run")
    assert p.returncode == 0, p.stderr[-2000:]
    run = tmp_path / "run"
    assert (run / "predictor" / "fm.ckpt").exists()
    assert (run / "policy" / "checkpoints" / "best.ckpt").exists()
    res = json.loads((run / "evaluation" / "results.json").read_text())
    assert {"MARA", "LARA", "FIFO", "Oracle"} <= set(res["summary"])
    assert any(r["method"] == "MARA" and r["train_seed"] == 0 for r in res["rows"])
    # stage=evaluate in the finished run folder finds the run's policy (and predictor) checkpoints by itself
    p = _run(
        "-m",
        "mara.train",
        "experiment=smoke",
        "stage=evaluate",
        "methods=[MARA,FIFO]",
        f"bank.path={small_bank.path}",
        f"hydra.run.dir={run}",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "using this run's policy" in p.stdout + p.stderr and "using this run's predictor" in p.stdout + p.stderr
    res = json.loads((run / "evaluation" / "results.json").read_text())
    assert set(res["summary"]) == {"MARA", "LARA", "FIFO", "Oracle", "Clairvoyant"}  # results merge by method
    assert not res["skipped"] and not res["failed"]


def test_method_configs_start_from_their_defaults(tmp_path, monkeypatch):
    """A method starting from another (defaults: [BASE, _self_]) is BASE with its own keys on top; a broken defaults
    entry is one line naming the method."""
    base, best = load_method_cfg("LARA"), load_method_cfg("LARA-best")
    assert best.allocator._target_ == base.allocator._target_ and best.name == "LARA-best"
    assert best.allocator.cold_reserve == 0 and base.allocator.cold_reserve != 0
    bad = tmp_path / "conf"
    (bad / "method").mkdir(parents=True)
    (bad / "method" / "Broken.yaml").write_text("defaults:\n  - NoSuchBase\n  - _self_\nname: Broken\nkind: policy\n")
    monkeypatch.setenv("MARA_CONF_PATH", str(bad))
    with pytest.raises(ConfigError, match=r"method 'Broken': cannot compose") as err:
        load_method_cfg("Broken")
    assert "\n" not in str(err.value)
