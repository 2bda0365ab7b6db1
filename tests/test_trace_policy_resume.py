"""The trace policy's run folder: a killed training resumes exactly (tensor for tensor), a finished one is reused
only with the settings it was made with, and products of other settings or of unknown origin are refused in one line
before any work."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import mara.mat.trace_train as tt
from mara.core.config import ConfigError
from mara.train import train
from tests.conftest import compose_config
from tests.test_traces_mara import itp_like_traces  # noqa: F401  (fixture: the recipe's traces, small)

ROOT = Path(__file__).resolve().parents[1]
WINDOW = "{path:data_cache/itp-traces/elasticflow/cluster04.csv,cluster:n8g8,start_day:0,days:1,warmup_days:0.5"
TINY = [
    "experiment=trace_mara",
    f"trace_mara.train=[{WINDOW},count:2}}]",
    f"trace_mara.val=[{WINDOW},count:1}}]",
    "trace_mara.hidden=4",
    "trace_mara.imitation_epochs=1",
    "trace_mara.pg_rounds=3",
    "trace_mara.samples=2",
    "trace_mara.windows_per_round=1",
    "trace_mara.top_k=4",
    "trace_mara.keep=16",
]


def cfg(out, *extra):
    return compose_config("train", *TINY, f"paths.output_dir={out}", *extra)


def tensors(path) -> dict:
    ck = torch.load(path, weights_only=True)
    flat = {f"net.{k}": v for k, v in ck["state_dict"].items()}
    for k, v in (ck.get("optimizer") or {}).get("state", {}).items():
        flat.update({f"opt.{k}.{n}": t for n, t in v.items()})
    return flat


def same(a, b) -> bool:
    ta, tb = tensors(a), tensors(b)
    return ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def test_a_training_killed_in_a_policy_gradient_round_resumes_exactly(itp_like_traces, monkeypatch):  # noqa: F811
    whole, cut = itp_like_traces / "whole", itp_like_traces / "cut"
    train(cfg(whole))
    real, calls = tt.pg_gradient, []

    def killed_in_round_two(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process stops in the middle of round 2
        return real(*args)

    monkeypatch.setattr(tt, "pg_gradient", killed_in_round_two)
    with pytest.raises(KeyboardInterrupt):
        train(cfg(cut))
    assert json.loads((cut / "state.json").read_text())["pg_rounds_done"] == 1
    monkeypatch.setattr(tt, "pg_gradient", real)
    train(cfg(cut))  # resumes from round 1's network, optimizer state and sampling stream
    for name in ("pg_last.ckpt", "mara_trace.ckpt", "imitation.ckpt"):
        assert same(whole / name, cut / name), name
    a, b = (json.loads((f / "state.json").read_text()) for f in (whole, cut))
    assert a["val_pg"] == b["val_pg"] and len(a["val_pg"]) == 3
    assert np.isfinite(a["val_imitation"])


def test_a_finished_folder_is_reused_with_its_settings_and_refused_with_others(itp_like_traces):  # noqa: F811
    out = itp_like_traces / "run"
    first = train(cfg(out))
    shipped = (out / "mara_trace.ckpt").read_bytes()
    assert train(cfg(out))["ckpt"] == first["ckpt"] and (out / "mara_trace.ckpt").read_bytes() == shipped
    other_windows = f"trace_mara.train=[{WINDOW},count:1}}]"
    for change, words in (("trace_mara.hidden=8", "hidden: 4 → 8"), (other_windows, "train.0.count: 2 → 1")):
        with pytest.raises(ConfigError, match=words) as err:
            train(cfg(out, change))
        assert "\n" not in str(err.value) and "fresh=true" in str(err.value)
    assert (out / "mara_trace.ckpt").read_bytes() == shipped  # nothing reused under the new labels
    train(cfg(out, "trace_mara.hidden=8", "fresh=true"))  # fresh=true: starts over, the old products set aside
    assert torch.load(out / "mara_trace.ckpt", weights_only=True)["hidden"] == 8
    assert list((out / "superseded").glob("*/mara_trace.ckpt"))


def test_products_of_unknown_settings_or_a_crafted_checkpoint_are_refused_in_one_line(itp_like_traces):  # noqa: F811
    out = itp_like_traces / "run"
    out.mkdir()
    torch.save({"kind": "trace_policy", "state_dict": {"x": np.arange(3)}}, out / "imitation.ckpt")  # numpy: not data
    with pytest.raises(ConfigError, match="no record of the settings"):
        train(cfg(out))
    train(cfg(itp_like_traces / "done"))
    planted = itp_like_traces / "done" / "imitation.ckpt"
    planted.write_bytes((out / "imitation.ckpt").read_bytes())
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")  # this tree's mara, run in the traces' folder
    p = subprocess.run(
        [sys.executable, "-m", "mara.train", *TINY, f"hydra.run.dir={itp_like_traces / 'done'}"],
        cwd=itp_like_traces,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-2000:]
    assert "imitation.ckpt is not loadable as data" in p.stderr and "Traceback" not in p.stderr
