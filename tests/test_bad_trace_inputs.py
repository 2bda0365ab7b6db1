"""Every mistake on the trace paths stops before any work: the trace replay (``mara.evaluate experiment=trace``), the
trace policy's training (``mara.train experiment=trace_mara``), ``mara.bench --traces`` (and live mode's typed
settings) each give exactly one line
on stderr naming the setting, file, row or column, and exit status 2; no replay or training starts (the functions
that start it are replaced by ones that fail the case if reached) and the run folder holds no results.

Each case runs the entry point's real ``main`` in this process (argv set, SystemExit caught, stderr captured); one
case also runs as a subprocess. Inputs are tiny: the shipped sample and files of a few rows.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

import mara.bench.__main__ as bench
import mara.evaluate
import mara.live.__main__
import mara.live.run
import mara.train

REPO = Path(__file__).resolve().parents[1]
CKPT = REPO / "mara" / "data" / "checkpoints"
HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
ROW = "a,0,500,resnet50,1000,64,1,100\n"
TRACE = ["experiment=trace", "methods=[EDF]", "trace.first_jobs=40"]
#: EDF first, then MARA: a fault in MARA's checkpoint must stop the run before EDF's replay
MARA = ["experiment=trace", "methods=[EDF,MARA]", "trace.jobs=target_loss", "trace.first_jobs=40"]


def _policy(path: Path, **change) -> Path:
    ck = torch.load(CKPT / "mara_trace.ckpt", weights_only=True)
    ck.update(change)
    torch.save(ck, path)
    return path


class Payload:  # a pickle that would run code when loaded without weights_only
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_trace_inputs")
    shipped = (CKPT / "mara_trace.ckpt").read_bytes()
    (d / "truncated.ckpt").write_bytes(shipped[: len(shipped) // 2])
    (d / "empty.ckpt").write_bytes(b"")
    (d / "crafted.ckpt").write_bytes(pickle.dumps({"kind": "trace_policy", "x": Payload()}))
    _policy(d / "narrow.ckpt", hidden=16)
    _policy(d / "huge.ckpt", hidden=10**7)
    (d / "early.csv").write_text(HEADER + ROW + "b,50,500,resnet50,10,64,1,100\n")
    (d / "big.csv").write_text(HEADER + ROW + "b,99999999999999999999999,500,resnet50,10,64,1,100\n")
    (d / "long.csv").write_text(HEADER + ROW + "x" * 200_000 + ",0,500,resnet50,1000,64,1,100\n")
    (d / "latin1.csv").write_bytes((HEADER + ROW).encode() + "c\xe9,0,500,resnet50,1000,64,1,100\n".encode("latin-1"))
    (d / "garbage.csv").write_text("no,header,here\n1,2,3\n")
    day = 86400
    raw = "job_id,submission_time,duration,num_gpu\n" + "".join(f"j{i},{i * day},100,1\n" for i in range(4))
    (d / "raw.csv").write_text(raw)
    return {p.stem: p for p in d.iterdir()} | {"paper": CKPT / "mara_zoo_seed0.ckpt", "fm": CKPT / "fm_zoo.ckpt"}


def ckpt(name: str) -> str:
    return "+method_overrides={MARA:{trace_scheduler:{ckpt_path:{" + name + "}}}}"


def sched(arg: str) -> str:
    return "+method_overrides={MARA:{trace_scheduler:{" + arg + "}}}"


# (entry point, overrides, text the one line must hold); {name}: a file of the fixture
CASES = [
    # settings typed, ranged, finite
    ("evaluate", [*TRACE, "trace.rigid=no"], "trace.rigid must be true or false, got 'no'"),
    ("evaluate", [*TRACE, "trace.overhead=off"], "trace.overhead must be true or false, got 'off'"),
    ("evaluate", [*TRACE, "trace.deadline_factor=nan"], "trace.deadline_factor must be a finite number"),
    ("evaluate", [*TRACE, "trace.slot=0"], "trace.slot must be an integer in [1, 2^62]"),
    ("evaluate", [*TRACE, "trace.declare_quantile=2"], "trace.declare_quantile must be a finite number in (0, 1]"),
    ("evaluate", [*TRACE, "trace.cluster=n1g8"], "more than cluster n1g8 has (8)"),
    # methods: each once, overrides only for listed ones, trace schedulers only
    ("evaluate", [*TRACE, "methods=[EDF,EDF]"], "methods names EDF more than once"),
    ("evaluate", [*TRACE, "+method_overrides={ElasticFlow:{trace_count:none}}"], "'ElasticFlow' is not in methods"),
    ("evaluate", [*TRACE, "methods=[EDF,LARA]"], "method 'LARA' does not schedule job traces"),
    ("evaluate", ["experiment=trace_mara"], "run it as python -m mara.train experiment=trace_mara"),
    # scheduler arguments, before the first replay (EDF is listed first)
    ("evaluate", [*MARA, sched("probe:-1")], "probe must be an integer >= 0, got -1"),
    ("evaluate", [*MARA, sched("rule:edff")], "unknown trace rule 'edff'"),
    ("evaluate", [*MARA, sched("probbe:1")], "takes no argument 'probbe' (did you mean 'probe'?)"),
    ("evaluate", [*MARA, sched("reserve:abc")], "trace_scheduler.reserve: expected"),
    # the trace policy's checkpoint, read and validated before the first replay
    ("evaluate", [*MARA, ckpt("crafted")], "is not a readable PyTorch checkpoint"),
    ("evaluate", [*MARA, ckpt("truncated")], "is not a readable PyTorch checkpoint"),
    ("evaluate", [*MARA, ckpt("empty")], "is not a readable PyTorch checkpoint"),
    ("evaluate", [*MARA, ckpt("paper")], "is not a trace policy checkpoint (it is a MAT policy checkpoint"),
    ("evaluate", [*MARA, ckpt("fm")], "is not a trace policy checkpoint (it is an FM predictor checkpoint"),
    ("evaluate", [*MARA, ckpt("narrow")], "do not fit a trace policy of width 16"),
    ("evaluate", [*MARA, ckpt("huge")], "hidden (the network's width) must be an integer in [1, 4096]"),
    ("evaluate", [*MARA, ckpt("missing")], "trace policy checkpoint"),
    # windows and the trace file
    ("evaluate", [*TRACE, "trace.first_jobs=null", "trace.window_s=1", "trace.windows=2"], "holds no job to score"),
    ("evaluate", [*TRACE, "trace.path={early}"], "row 3, column deadline: job b is due at 10, before it is submitted"),
    ("evaluate", [*TRACE, "trace.path={big}"], "row 3, column submission_time: 99999999999999999999999 is beyond 2^62"),
    ("evaluate", [*TRACE, "trace.path={long}"], "long.csv: line 3: not a readable CSV row"),
    ("evaluate", [*TRACE, "trace.path={latin1}"], "latin1.csv: not UTF-8 text"),
    # live mode's settings are typed the same way
    ("live", ["live.replay=no"], "live.replay must be true or false, got 'no'"),
    ("live", ["live.tensorboard=off"], "live.tensorboard must be true or false, got 'off'"),
    # the trace policy's training: a raw-schema window has no target-loss jobs
    (
        "train",
        ["experiment=trace_mara", "trace_mara.train=[{path:{raw},cluster:n1g8,start_day:0,days:1,count:1}]"],
        "is in the raw schema; the trace policy trains on target-loss jobs",
    ),
]


def _fill(arg: str, files: dict) -> str:
    for key, path in files.items():
        arg = arg.replace("{" + key + "}", str(path))
    return arg.replace("{missing}", "/no/such/trace_policy.ckpt")


def _refuse_work(monkeypatch) -> None:
    def started(*_a, **_k):
        raise AssertionError("work started")

    monkeypatch.setattr(mara.evaluate, "run_trace_experiment", started)
    monkeypatch.setattr(mara.train, "run_trace_policy", started)
    monkeypatch.setattr(bench, "trace_rows", started)
    monkeypatch.setattr(mara.live.run, "run_live_methods", started)


@pytest.mark.parametrize("entry,args,needle", CASES, ids=[f"{e}:{' '.join(a[1:])[:70]}" for e, a, _ in CASES])
def test_bad_trace_input_is_one_line_and_exit_2_before_any_work(
    entry, args, needle, files, tmp_path, monkeypatch, capsys
):
    _refuse_work(monkeypatch)
    run = tmp_path / "run"
    argv = [_fill(a, files) for a in args] + [f"hydra.run.dir={run}", "hydra.output_subdir=null"]
    monkeypatch.setattr(sys, "argv", [f"mara.{entry}", *argv])
    monkeypatch.setenv("HYDRA_MAIN_MODULE", "__main__")
    monkeypatch.chdir(tmp_path)  # a payload that ran would leave PWNED here
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as exc:
        {"evaluate": mara.evaluate.main, "train": mara.train.main, "live": mara.live.__main__.main}[entry]()
    GlobalHydra.instance().clear()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert exc.value.code == 2, err
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert not run.exists() or not {"results.json", "results.md", "tb"} & set(os.listdir(run)), os.listdir(run)
    assert not (tmp_path / "PWNED").exists()


BENCH = [
    (["--traces", "{garbage}:n8g8"], "garbage.csv: missing column(s)"),
    (["--traces", "{missing}:n8g8"], "no such trace file"),
    (["--traces", "mara/data/traces/itp_cluster01_first300.csv:n1g8"], "more than cluster n1g8 has (8)"),
    (["--traces", "--trace-methods", "Bogus"], "--trace-methods: unknown method Bogus"),
    (["--traces", "--trace-methods", "LARA"], "method 'LARA' does not schedule job traces"),
    (["--traces", "--trace-sweep", "0"], "--trace-sweep: a cluster size is a number of 8-GPU nodes"),
    (["--traces", "--json", "{garbage}/rows.json"], "garbage.csv is not writable"),
]


@pytest.mark.parametrize("args,needle", BENCH, ids=[" ".join(a) for a, _ in BENCH])
def test_bad_bench_trace_input_is_one_line_and_exit_2_before_any_work(args, needle, files, monkeypatch, capsys):
    _refuse_work(monkeypatch)
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as exc:
        bench.main([_fill(a, files) for a in args])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert exc.value.code == 2 and len(err) == 1 and needle in err[0], err


def test_a_bad_trace_setting_from_the_command_line(tmp_path):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, "-m", "mara.evaluate", *TRACE, "trace.rigid=no", f"hydra.run.dir={tmp_path}/run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "trace.rigid must be true or false" in lines[0], p.stderr[-2000:]
    assert not (tmp_path / "run" / "results.json").exists()


def test_booleans_given_as_booleans_are_read_as_such():
    from mara.traces.settings import trace_settings

    ts = trace_settings({"rigid": True, "overhead": False})
    assert ts.rigid is True and ts.overhead is False
