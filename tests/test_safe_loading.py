"""A checkpoint path or a worker's state never runs code: every loader and every path option refuses a crafted file
(its payload would create a marker file) with one line naming the path; converted shipped files load as data."""

import io
import os
import pathlib
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from mara.core.cli import run_cli
from mara.core.config import SHIPPED_CKPT_DIR, ConfigError
from mara.core.safe_load import CheckpointError, from_plain, load_checkpoint, to_plain
from tests.conftest import compose_config

REPO = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


class Payload:
    """Unpickling this object creates ``marker``: what a crafted checkpoint could run instead."""

    def __init__(self, marker):
        self.marker = pathlib.Path(marker)

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


def crafted_policy(path, marker) -> Path:
    """A file shaped like a MAT Lightning checkpoint whose pickle runs ``Payload`` when loaded without weights_only."""
    good = load_checkpoint(SHIPPED_CKPT_DIR / "mara_zoo_seed0.ckpt")
    torch.save({**good, "hyper_parameters": {**good["hyper_parameters"], "x": Payload(marker)}}, path)
    return Path(path)


def crafted_predictor(path, marker, shipped="fm_zoo.ckpt") -> Path:
    good = load_checkpoint(SHIPPED_CKPT_DIR / shipped)
    torch.save({**good, "extra": {"x": Payload(marker)}}, path)
    return Path(path)


def crafted_last_ckpt(path, marker) -> Path:
    """A resumable-looking last.ckpt whose pickle itself loads as data, but whose MAT training state is pickled bytes
    that would run ``Payload`` if unpickled (the form ``ckpt_convert`` rewrites)."""
    good = load_checkpoint(SHIPPED_CKPT_DIR / "mara_live.ckpt")
    blob = pickle.dumps({"envs": [Payload(marker)]})
    state = {**good["mat_state"], "env": {"blob": torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()}}
    torch.save({**good, "mat_state": state}, path)
    return Path(path)


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "PAYLOAD_RAN"


def test_the_crafted_files_are_real_payloads(tmp_path, marker):
    """The test files do run code when loaded the unsafe way (so the refusals below are meaningful)."""
    for make in (crafted_policy, crafted_predictor):
        torch.load(make(tmp_path / f"{make.__name__}.ckpt", marker), weights_only=False)
        assert marker.exists()
        marker.unlink()
    blob = load_checkpoint(crafted_last_ckpt(tmp_path / "last.ckpt", marker))["mat_state"]["env"]["blob"]
    assert not marker.exists()  # the outer file loads as data ...
    pickle.loads(blob.numpy().tobytes())
    assert marker.exists()  # ... its old-format state is the payload


def _one_line(exc) -> str:
    msg = str(exc)
    assert "\n" not in msg
    return msg


def test_every_loader_refuses_a_crafted_file(tmp_path, marker):
    from mara.ckpt_convert import convert
    from mara.live.job import TrainingJob
    from mara.mat.allocator import MATAllocator, read_policy_checkpoint, read_policy_meta
    from mara.predictors.fm.predictor import FlowPredictor, load_net
    from mara.predictors.qr.head import QuantileHeadPredictor, load_heads, save_ensemble

    pol = crafted_policy(tmp_path / "policy.ckpt", marker)
    fm = crafted_predictor(tmp_path / "fm.ckpt", marker)
    qr = crafted_predictor(tmp_path / "qr.ckpt", marker, shipped="qr_zoo.ckpt")
    calls = [
        lambda: MATAllocator(str(pol)),
        lambda: read_policy_checkpoint(pol),
        lambda: read_policy_meta(pol),
        lambda: load_net(fm),
        lambda: FlowPredictor.from_config(OmegaConf.create({"ckpt_path": str(fm)})),
        lambda: load_heads(qr),
        lambda: QuantileHeadPredictor.from_config(OmegaConf.create({"ckpt_path": str(qr)})),
        lambda: save_ensemble([qr], tmp_path / "ens.ckpt"),
        lambda: convert(pol, tmp_path / "conv.ckpt"),
        lambda: TrainingJob.from_bytes(pol.read_bytes()),
    ]
    for call in calls:
        with pytest.raises(CheckpointError) as exc:
            call()
        assert "not loadable as data" in _one_line(exc.value)
        assert not marker.exists()
    assert str(pol) in str(pytest.raises(CheckpointError, read_policy_checkpoint, pol).value)
    assert not (tmp_path / "ens.ckpt").exists() and not (tmp_path / "conv.ckpt").exists()


def test_old_pickled_training_state_is_never_unpickled(tmp_path, marker):
    from mara.ckpt_convert import convert
    from mara.mat.rollout import TrainingEnv
    from mara.mat.train import check_resume_checkpoint

    last = crafted_last_ckpt(tmp_path / "last.ckpt", marker)
    with pytest.raises(CheckpointError, match="pickled bytes"):
        check_resume_checkpoint(last)
    env = object.__new__(TrainingEnv)  # the restore path itself refuses, before touching any attribute
    with pytest.raises(CheckpointError, match="pickled bytes"):
        env.load_state_dict(load_checkpoint(last)["mat_state"]["env"])
    with pytest.raises(CheckpointError, match=r"cannot be converted.*pathlib.Path.touch"):
        convert(last, tmp_path / "conv.ckpt")  # the converter's unpickler knows only arrays and state classes
    assert not marker.exists() and not (tmp_path / "conv.ckpt").exists()


def test_not_a_checkpoint_and_the_wrong_kind_are_one_line(tmp_path):
    from mara.mat.allocator import read_policy_checkpoint
    from mara.predictors.fm.predictor import load_net
    from mara.predictors.qr.head import load_heads

    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(os.urandom(256))
    text = tmp_path / "text.ckpt"
    text.write_text("garbage")
    for bad in (junk, text):
        for load in (read_policy_checkpoint, load_net, load_heads):
            with pytest.raises(CheckpointError, match=rf"{re.escape(str(bad))} is not a readable PyTorch checkpoint"):
                load(bad)
    fm, qr, pol = (SHIPPED_CKPT_DIR / f for f in ("fm_zoo.ckpt", "qr_zoo.ckpt", "mara_zoo_seed0.ckpt"))
    cases = [
        (read_policy_checkpoint, fm, "is not a MAT policy checkpoint (it is an FM predictor checkpoint)"),
        (read_policy_checkpoint, qr, "is not a MAT policy checkpoint (it is a decision-head"),
        (load_net, pol, "is not an FM predictor checkpoint (it is a MAT policy checkpoint)"),
        (load_net, qr, "is not an FM predictor checkpoint (it is a decision-head"),
        (load_heads, fm, "is not a decision-head (qr) checkpoint (it is an FM predictor checkpoint)"),
    ]
    for load, path, needle in cases:
        with pytest.raises(CheckpointError) as exc:
            load(path)
        assert str(path) in _one_line(exc.value) and needle in str(exc.value)
    plain = tmp_path / "plain.ckpt"  # loads as data, but holds no policy
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": 1.0}}, plain)
    with pytest.raises(CheckpointError, match="hyper_parameters have no sim/net/rollout"):
        read_policy_checkpoint(plain)
    assert issubclass(CheckpointError, ConfigError)


def test_shipped_checkpoints_load_as_data_and_name_their_recipe():
    from mara.ckpt_convert import SHIPPED_RECIPES
    from mara.mat.allocator import read_policy_meta

    files = sorted(SHIPPED_CKPT_DIR.glob("*.ckpt"))
    assert {f.name for f in files} == set(SHIPPED_RECIPES)
    for f in files:
        ckpt = torch.load(f, map_location="cpu", weights_only=True)
        assert ckpt["recipe"] == SHIPPED_RECIPES[f.name] and ckpt["kind"] in (
            "policy",
            "fm",
            "qr",
            "lcpfn",
            "qr_ctx",
            "trace_policy",
        )
        assert "blob" not in (ckpt.get("mat_state") or {}).get("env", {})
    assert read_policy_meta(SHIPPED_CKPT_DIR / "mara_zoo_seed0.ckpt")["recipe"] == "mat=band"
    meta = read_policy_meta(SHIPPED_CKPT_DIR / "mara_live.ckpt")
    assert (meta["M"], meta["K"], meta["features"], meta["predictor"]["name"]) == (2, 4, "v1", "fm")
    assert read_policy_meta(SHIPPED_CKPT_DIR / "mara_qr_zoo_seed0.ckpt")["predictor"]["name"] == "qr"
    suite = read_policy_meta(SHIPPED_CKPT_DIR / "mara_suite_zoo_seed0.ckpt")  # one policy for any cluster
    assert (suite["sizes"], suite["recipe"], suite["decoder"]) == ("any", "mat=suite", "plackett_luce")
    assert read_policy_meta(SHIPPED_CKPT_DIR / "mara_qr_zoo_seed0.ckpt")["sizes"] == "trained"


def test_converter_keeps_weights_and_rewrites_old_state(tmp_path):
    """An old-format last.ckpt (training state pickled inside a tensor, no kind/recipe) converts: same weights, the
    state as tensors and plain values equal to what the old bytes held."""
    from mara.ckpt_convert import main
    from mara.mat.rollout import _STATE_CLASSES
    from mara.sim.workload import EpisodeBatch

    good = load_checkpoint(SHIPPED_CKPT_DIR / "mara_live.ckpt")
    state = from_plain(good["mat_state"]["env"], _STATE_CLASSES)
    blob = pickle.dumps(state)
    old = {k: v for k, v in good.items() if k not in ("kind", "recipe")}
    old["mat_state"] = {
        **good["mat_state"],
        "env": {"blob": torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()},
    }
    src = tmp_path / "old.ckpt"
    torch.save(old, src)
    assert main([str(src), "--recipe", "mat=default"]) == 0
    new = torch.load(src, weights_only=True)
    assert new["kind"] == "policy" and new["recipe"] == "mat=default"
    assert all(torch.equal(new["state_dict"][k], v) for k, v in good["state_dict"].items())
    back = from_plain(new["mat_state"]["env"], _STATE_CLASSES)
    assert isinstance(back["envs"][0]["ep"], EpisodeBatch)
    for a, b in zip(state["envs"], back["envs"]):
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(a[k], np.ndarray):
                assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), k
    junk = tmp_path / "junk.ckpt"
    junk.write_text("garbage")
    assert main([str(junk)]) == 2


def test_plain_state_round_trip_keeps_dtypes_values_and_sharing():
    from mara.mat.rollout import _STATE_CLASSES

    shared = np.arange(6, dtype=np.int8).reshape(2, 3)
    state = {
        "a": shared,
        "b": [shared, np.float64(2.5), np.array(["x", "yz"])],
        "t": (np.bool_(True), None, 3),
        "f": np.array([np.nan, 1.0], np.float32),
    }
    plain = to_plain(state, _STATE_CLASSES)
    buf = io.BytesIO()
    torch.save(plain, buf)
    back = from_plain(load_checkpoint(buf.getvalue()), _STATE_CLASSES)
    assert back["a"] is back["b"][0] and back["a"].dtype == np.int8 and np.array_equal(back["a"], shared)
    assert type(back["b"][1]) is np.float64 and back["b"][1] == 2.5 and back["b"][2].tolist() == ["x", "yz"]
    assert back["t"][0] is np.True_ and back["t"][1:] == (None, 3) and back["f"].dtype == np.float32
    with pytest.raises(TypeError):
        to_plain({"x": object()})
    with pytest.raises(ValueError, match="not one of"):
        from_plain({"__object__": "Payload", "id": 0, "fields": {}}, _STATE_CLASSES)


def test_live_job_state_from_another_worker_is_data_only(marker):
    from mara.live.job import JobSpec, TrainingJob

    state = {
        "spec": JobSpec(0, "CNN_Cifar10", 0, 4, 1e-3, source="synthetic").to_dict(),
        "model": {},
        "optimizer": {},
        "batches": {},
        "processed": Payload(marker),
    }
    buf = io.BytesIO()
    torch.save(state, buf)
    with pytest.raises(CheckpointError, match="live job state <bytes> is not loadable as data"):
        TrainingJob.from_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="live job state"):
        TrainingJob.from_bytes(b"not a state")
    assert not marker.exists()


# ------------------------------------------------------------------ entry points: one line, exit 2, nothing runs
_compose = compose_config


def _exit_line(capsys, fn, cfg) -> str:
    with pytest.raises(SystemExit) as exc:
        run_cli(fn, cfg)
    assert exc.value.code == 2
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
    assert len(err) == 1, err
    return err[0]


def test_train_policy_refuses_crafted_resume_and_predictor_files(tmp_path, marker, capsys, small_bank):
    from mara.train import train

    for ckpt, needle in (
        (crafted_last_ckpt(tmp_path / "last.ckpt", marker), "pickled bytes"),
        (crafted_policy(tmp_path / "policy.ckpt", marker), "not loadable as data"),
        (SHIPPED_CKPT_DIR / "fm_zoo.ckpt", "is not a MAT policy checkpoint"),
        (SHIPPED_CKPT_DIR / "mara_zoo_seed0.ckpt", "not a MAT training checkpoint to resume"),
    ):
        out = tmp_path / f"run_{ckpt.stem}"
        cfg = _compose(
            "train",
            "experiment=smoke",
            "stage=policy",
            f"ckpt_path={ckpt}",
            f"bank.path={small_bank.path}",
            f"paths.output_dir={out}",
        )
        line = _exit_line(capsys, train, cfg)
        assert str(ckpt) in line and needle in line, line
        assert not marker.exists() and not (out / "policy" / "checkpoints").exists()
    fm = crafted_predictor(tmp_path / "fm.ckpt", marker)  # the policy's frozen predictor
    out = tmp_path / "run_fm"
    cfg = _compose(
        "train",
        "experiment=smoke",
        "stage=policy",
        f"predictor.ckpt_path={fm}",
        f"bank.path={small_bank.path}",
        f"paths.output_dir={out}",
    )
    line = _exit_line(capsys, train, cfg)
    assert str(fm) in line and "not loadable as data" in line, line
    assert not marker.exists() and not (out / "policy" / "checkpoints").exists()


def test_live_policy_options_refuse_a_crafted_file(tmp_path, marker, capsys):
    from mara.live.run import live_main

    pol = crafted_policy(tmp_path / "policy.ckpt", marker)
    base = [
        f"paths.output_dir={tmp_path / 'live'}",
        "live.data=synthetic",
        "live.families=[CNN_Cifar10]",
        "live.time_scale=0.05",
        "sim.steps=10",
        "live.load=0.3",
        "live.root=1000",
        "live.tensorboard=false",
        "methods=[MARA,FIFO]",
    ]
    for option in (f"live.policy_ckpt={pol}", f"++method_overrides={{MARA: {{ckpt_path: {pol}}}}}"):
        line = _exit_line(capsys, live_main, _compose("live", *base, option))
        assert str(pol) in line and "not loadable as data" in line
    assert not marker.exists()


def _evaluate_cli(tmp_path, *overrides):
    common = ["eval.roots=1", "eval.episodes=1", "sim.loads=[0.04]", "eval.tensorboard=false"]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "mara.evaluate", *common, *overrides], cwd=REPO, capture_output=True, text=True, env=env
    )


def test_evaluate_path_options_refuse_a_crafted_file(tmp_path, marker, small_bank):
    """``python -m mara.evaluate`` given a crafted file as a policy, an FM or a decision-head checkpoint: nothing runs,
    one line naming the file. The run ends with an error status: 2 where a check refuses the file before any work,
    1 where the run reports its only method as failed."""
    pol = crafted_policy(tmp_path / "policy.ckpt", marker)
    fm = crafted_predictor(tmp_path / "fm.ckpt", marker)
    qr = crafted_predictor(tmp_path / "qr.ckpt", marker, shipped="qr_zoo.ckpt")
    for i, (method, option, path) in enumerate(
        [
            ("MARA", f"+method_overrides={{MARA: {{ckpt_path: {pol}}}}}", pol),
            ("Slack-FM", f"predictors.fm.ckpt_path={fm}", fm),
            ("Slack-QR", f"predictors.qr.ckpt_path={qr}", qr),
        ]
    ):
        p = _evaluate_cli(
            tmp_path, f"methods=[{method}]", option, f"bank.path={small_bank.path}", f"hydra.run.dir={tmp_path}/run{i}"
        )
        assert p.returncode in (1, 2), p.stderr[-2000:]
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("error:")]
        assert len(lines) == 1 and str(path) in lines[0] and "not loadable as data" in lines[0], p.stderr[-2000:]
        assert "Traceback" not in p.stderr and not marker.exists()


def test_package_never_unpickles_what_it_reads():
    """No ``weights_only=False`` and no ``pickle.load(s)`` anywhere in the package."""
    hits = []
    for f in (REPO / "mara").rglob("*.py"):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"weights_only\s*=\s*False|pickle\.loads?\(|cloudpickle|dill", line):
                hits.append(f"{f.relative_to(REPO)}:{n}: {line.strip()}")
    assert hits == []
