"""Every user mistake stops mara.train, mara.evaluate and mara.live before any work: exactly one line on stderr,
exit status 2, no training or evaluation started, nothing written outside the run folder.

The table runs each entry point's real ``main`` in this process (argv set, SystemExit caught, stderr captured);
the work functions are replaced by ones that fail the case if reached. A few cases also run as real subprocesses.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

import mara.evaluate
import mara.live.__main__
import mara.live.run
import mara.pipelines.paper
import mara.predictors.fm.train
import mara.train

REPO = Path(__file__).resolve().parents[1]
CKPT = REPO / "mara" / "data" / "checkpoints"
MARA_CKPT, QR_POLICY, FM_CKPT = CKPT / "mara_zoo_seed0.ckpt", CKPT / "mara_qr_zoo_seed0.ckpt", CKPT / "fm_zoo.ckpt"
MAIN = {"train": mara.train.main, "evaluate": mara.evaluate.main, "live": mara.live.__main__.main}
# what a refused run may leave in its own new run folder: Hydra's files, and the lock file of a check that runs once
# the folder is held (e.g. Clairvoyant's workers); never results, checkpoints or events
HYDRA_FILES = {".hydra", "train.log", "evaluate.log", "live.log", "__main__.log", ".run.lock"}
#: the functions that start work; reaching one fails the case
WORK = [
    (mara.predictors.fm.train, "train_predictor"),
    (mara.train, "train_policy"),
    (mara.pipelines.paper, "run_jobs"),
    (mara.evaluate, "build_episodes"),
    (mara.evaluate, "evaluate_methods"),
    (mara.evaluate, "run_prediction"),
    (mara.evaluate, "run_lofo_experiment"),
    (mara.live.run, "run_live_methods"),
    (mara.live.run, "export_bank"),
]


def ow(method, ckpt):
    """``+method_overrides`` giving ``method`` one policy checkpoint."""
    return f"+method_overrides={{{method}:{{checkpoints:[{{train_seed:0,ckpt_path:{ckpt}}}]}}}}"


# (entry point, overrides, text the one line must hold); {bad}: a file that is no checkpoint, {file}: a plain file,
# {parquet}: a file that is no Parquet bank, {missing}: a path that does not exist
CASES = [
    # keys that do not exist: Hydra's composition, one line naming the closest key
    ("train", ["sim.nodez=3"], "unknown config key 'sim.nodez' (did you mean 'sim.nodes'?)"),
    ("evaluate", ["sim.nodez=3"], "did you mean 'sim.nodes'?"),
    ("live", ["sim.nodez=3"], "did you mean 'sim.nodes'?"),
    ("evaluate", ["eval.rootz=1"], "did you mean 'eval.roots'?"),
    ("train", ["mat.total_env_stepz=5"], "did you mean 'mat.total_env_steps'?"),
    ("train", ["seeed=1"], "did you mean 'seed'?"),
    ("live", ["live.workerz=ray"], "did you mean 'live.workers'?"),
    ("train", ["predictor.nett.x=1"], "unknown config key 'predictor.nett.x'"),
    ("evaluate", ["methods=[FIFO"], "cannot read the command-line overrides"),
    ("train", ["experiment=typo_xyz"], "unknown experiment 'typo_xyz'"),
    ("evaluate", ["experiment=typo_xyz"], "unknown experiment 'typo_xyz'"),
    ("train", ["predictor=xyz"], "unknown predictor 'xyz'"),
    # method names
    ("evaluate", ["methods=[Bogus]"], "unknown method 'Bogus'"),
    ("evaluate", ["methods=[Slack-Fm]"], "did you mean 'Slack-FM'?"),
    ("train", ["methods=[FIFO,Nope]"], "unknown method 'Nope'"),
    ("live", ["methods=[FIFOO]"], "did you mean 'FIFO'?"),
    ("evaluate", ["methods=[]"], "methods is empty"),
    # a method the trace replay cannot run: a selection bound (the Clairvoyant's chosen tasks of the whole stack)
    (
        "evaluate",
        ["methods=[FIFO,Slack-Truth-chosen]", "sim.engine=replay"],
        "method Slack-Truth-chosen: chosen_by (a selection bound) runs on sim.engine=batched only",
    ),
    ("train", ["methods=[]"], "methods is empty"),
    ("live", ["methods=[]"], "methods is empty"),
    ("evaluate", ["methods=FIFO"], "methods must be a list"),
    # method_overrides: every key a setting of that method, every name a method
    (
        "evaluate",
        ["methods=[FIFO,MARA]", "+method_overrides={MARA: {ckpt_pth: mine.ckpt}}"],
        "did you mean 'ckpt_path'?",
    ),
    ("evaluate", ["methods=[FIFO]", "+method_overrides={FIFO: {bogus: 1}}"], "FIFO has no setting 'bogus'"),
    (
        "evaluate",
        ["methods=[FIFO]", "+method_overrides={FIFO: {ckpt_path: x.ckpt}}"],
        "FIFO has no setting 'ckpt_path'",
    ),
    (
        "evaluate",
        ["methods=[FIFO]", "+method_overrides={NoSuch: {x: 1}}"],
        "unknown method 'NoSuch' in method_overrides",
    ),
    ("evaluate", ["methods=[FIFO]", "+method_overrides={Slack-Fm: {predictor: fm}}"], "did you mean 'Slack-FM'?"),
    (
        "evaluate",
        ["methods=[Clairvoyant]", "+method_overrides={Clairvoyant: {time_limt_s: 1}}"],
        "did you mean 'time_limit_s'?",
    ),
    (
        "evaluate",
        ["methods=[Clairvoyant]", "+method_overrides={Clairvoyant: {workers: abc}}"],
        "method_overrides.Clairvoyant",
    ),
    (
        "evaluate",
        ["methods=[Clairvoyant]", "+method_overrides={Clairvoyant: {admission_limit: maybe}}"],
        "method_overrides.Clairvoyant.admission_limit: Value 'maybe' is not a valid bool",
    ),
    (
        "evaluate",
        ["methods=[Clairvoyant]", "+method_overrides={Clairvoyant: {workers: -1}}"],
        "workers must be an integer >= 0",
    ),
    ("evaluate", ["methods=[LARA]", "+method_overrides={LARA: {allocator: {warm_ob: 1}}}"], "did you mean 'warm_obs'?"),
    # allocator arguments of the scalar type the constructor declares (a string is not a switch, a bool not a count)
    (
        "evaluate",
        ["experiment=hetero", "methods=[Plan-QR]", "+method_overrides={Plan-QR: {allocator: {arrivals: maybe}}}"],
        "method_overrides.Plan-QR.allocator.arrivals: expected bool, got 'maybe'",
    ),
    (
        "evaluate",
        ["methods=[Plan-QR]", "+method_overrides={Plan-QR: {allocator: {samples: true}}}"],
        "method_overrides.Plan-QR.allocator.samples: expected int, got True",
    ),
    (
        "evaluate",
        ["methods=[Slack-QR]", "+method_overrides={Slack-QR: {allocator: {displace: yes please}}}"],
        "allocator.displace: expected bool",
    ),
    ("evaluate", ["methods=[MARA]", "+method_overrides={MARA: {predictor: fmm}}"], "did you mean 'fm'?"),
    ("evaluate", ["methods=[MARA]", "+method_overrides={MARA: {predictor: truth}}"], "perfect-prediction bound"),
    ("train", ["+method_overrides={FIFO: {bogus: 1}}"], "FIFO has no setting 'bogus'"),
    ("live", ["methods=[FIFO]", "+method_overrides={FIFO: {bogus: 1}}"], "FIFO has no setting 'bogus'"),
    # numbers out of range or not numbers
    ("train", ["seed=-1"], "seed must be an integer >= 0"),
    ("train", ["seed=1.5"], "seed must be an integer"),
    ("train", ["mat.total_env_steps=-5"], "mat.total_env_steps must be an integer >= 0"),
    (
        "train",
        ["experiment=smoke", "mat.total_env_steps=0", "mat.imitation.enabled=false"],
        "mat.total_env_steps must be an integer >= 1 when mat.imitation.enabled is false",
    ),
    ("train", ["mat.ppo.lr=0"], "mat.ppo.lr must be a number > 0"),
    ("train", ["mat.ppo.gamma=1.5"], "mat.ppo.gamma must be a number in [0, 1]"),
    ("train", ["mat.workload.load=[0.04,1.2]"], "mat.workload.load must be a number in [0, 1]"),
    ("train", ["mat.rollout.n_episodes=0"], "mat.rollout.n_episodes"),
    ("train", ["mat.validation.roots=[-1]"], "mat.validation.roots must be an integer >= 0"),
    ("train", ["predictor.data.batch_size=0"], "predictor.data.batch_size"),
    ("train", ["trainer.max_epochs=0"], "trainer.max_epochs"),
    ("train", ["sim.loads=[0.04,abc]"], "sim.loads must be a number, got 'abc'"),
    ("evaluate", ["experiment=prediction", "prediction.extra.QR=nope"], "prediction.extra.QR='nope': not a predictor"),
    ("evaluate", ["experiment=prediction", "+prediction.extra.FM=qr"], "FM and WLS are the benchmark's own rows"),
    (
        "evaluate",
        ["experiment=prediction", "prediction.trace_jobs.path=/nonexistent/trace.csv"],
        "prediction.trace_jobs.path=/nonexistent/trace.csv: no such file",
    ),
    (
        "evaluate",
        ["experiment=prediction", "predictors.qr_cal.recalibrate.cal_bank=/nonexistent/cal.parquet"],
        "predictors.qr_cal.recalibrate.cal_bank=/nonexistent/cal.parquet: no such file",
    ),
    ("evaluate", ["eval.roots=0"], "eval.roots must be >= 1"),
    ("evaluate", ["eval.roots=[-1]"], "eval.roots must be an integer >= 0"),
    ("evaluate", ["eval.episodes=0"], "eval.episodes"),
    ("evaluate", ["sim.loads=[1.5]"], "[0, 1]"),
    ("evaluate", ["sim.nodes=0"], "sim.nodes must be >= 1"),
    ("evaluate", ["sim.node_speed=[2,1]"], "one entry per node"),
    ("evaluate", ["sim.switch_cost=-1"], "sim.switch_cost must be >= 0"),
    ("live", ["live.load=1.5"], "live.load"),
    ("live", ["live.episodes=0"], "live.episodes"),
    ("live", ["live.time_scale=0"], "live.time_scale must be a number > 0"),
    ("live", ["live.root=-3"], "live.root must be an integer >= 0"),
    ("live", ["live.threads=0"], "live.threads"),
    # checkpoints: readable, of the right kind, fit for the run's predictor, M and K
    ("evaluate", ["methods=[FIFO,MARA]", ow("MARA", "{bad}")], "not a readable PyTorch checkpoint"),
    ("evaluate", ["methods=[MARA]", ow("MARA", "{bad}")], "not a readable PyTorch checkpoint"),
    ("evaluate", ["methods=[MARA]", ow("MARA", "{missing}")], "not found"),
    ("evaluate", ["methods=[MARA]", ow("MARA", FM_CKPT)], "it is an FM predictor checkpoint"),
    ("evaluate", ["methods=[FIFO,MARA]", "sim.nodes=3"], "trained for M=7, K=10"),
    ("evaluate", ["methods=[MARA]", "sim.max_active=5"], "trained for M=7, K=10"),
    ("evaluate", ["methods=[MARA]", ow("MARA", QR_POLICY)], "trained with predictor 'qr'"),
    ("evaluate", ["methods=[Slack-FM]", "predictors.fm.ckpt_path={bad}"], "is not an FM predictor checkpoint"),
    ("evaluate", ["methods=[Slack-QR]", "predictors.qr.ckpt_path={missing}"], "not found"),
    ("train", ["experiment=smoke", "predictor.ckpt_path={bad}"], "is not an FM predictor checkpoint"),
    ("train", ["predictor.ckpt_path=" + str(MARA_CKPT)], "it is a MAT policy checkpoint"),
    ("train", ["stage=evaluate", "+policy_ckpt={bad}"], "not a readable PyTorch checkpoint"),
    ("live", ["live.policy_ckpt={bad}"], "not a readable PyTorch checkpoint"),
    ("live", ["sim.nodes=3"], "trained for M=2, K=4"),
    # output folders
    ("evaluate", ["methods=[FIFO]", "paths.output_dir={file}/run"], "is not writable"),
    ("train", ["paths.output_dir={file}/run"], "is not writable"),
    ("live", ["methods=[FIFO]", "paths.output_dir={file}"], "is not writable"),
    ("evaluate", ["hydra.run.dir={file}/run"], "hydra.run.dir"),
    # the rest of the settings each entry point checks
    ("train", ["predictor=fm"], "predictor=qr_q"),  # the default recipe's teacher reads the decision head
    ("evaluate", ["experiment=paper"], "python -m mara.train experiment=paper"),
    ("train", ["stage=bogus"], "stage must be one of"),
    ("train", ["reward=bogus"], "reward must be 'dense' or 'sparse'"),
    ("evaluate", ["bank.path={parquet}"], "not a readable Parquet file"),
    ("live", ["live.workers=threads"], "live.workers must be process, inline or ray"),
    ("live", ["live.families=[Nope]"], "live.families: unknown family Nope"),
    # a +key addition is a key like any other: it must be a setting something reads
    ("train", ["+sim.nodez=3"], "unknown config key 'sim.nodez' in +sim.nodez=3 (did you mean 'sim.nodes'?)"),
    ("evaluate", ["+eval.rootz=1"], "did you mean 'eval.roots'?"),
    ("live", ["++live.workerz=ray"], "did you mean 'live.workers'?"),
    ("train", ["+seeed=1"], "did you mean 'seed'?"),
    # each method once: a repeated name would evaluate it again, its rows twice in results.json
    ("evaluate", ["methods=[FIFO,EDF,FIFO]"], "methods names FIFO more than once"),
    ("train", ["methods=[FIFO,FIFO]"], "methods names FIFO more than once"),
    ("live", ["methods=[EDF,EDF]"], "methods names EDF more than once"),
    # sizes beyond this machine's memory: the setting, the memory and the time named
    ("evaluate", ["eval.episodes=100000000"], "eval.episodes=100000000: 3 task sets x 4 loads x 5 roots x 100000000"),
    ("evaluate", ["eval.episodes=100000000"], "of memory (this machine has"),
    ("evaluate", ["eval.episodes=100000000"], "and drawing them"),
    ("train", ["eval.episodes=100000000"], "eval.episodes=100000000"),
    ("train", ["mat.rollout.n_episodes=100000000"], "mat.rollout.n_episodes=100000000: 100,000,000 episodes x"),
    ("train", ["mat.imitation.n_episodes=100000000"], "mat.imitation.n_episodes=100000000"),
    # every message names its setting: NaN, infinity and empty lists included
    ("evaluate", ["sim.switch_cost=nan"], "sim.switch_cost must be an integer >= 0, got nan"),
    ("evaluate", ["sim.switch_cost=inf"], "sim.switch_cost must be an integer >= 0, got inf"),
    ("evaluate", ["sim.node_speed=[1,1,1,1,1,1,nan]"], "sim.node_speed entries must be integers"),
    ("train", ["mat.ppo.lr=nan"], "mat.ppo.lr must be a finite number, got nan"),
    ("evaluate", ["eval.episodes=inf"], "eval.episodes must be an integer, got inf"),
    ("live", ["live.time_scale=nan"], "live.time_scale must be a finite number"),
    ("evaluate", ["eval.roots=[]"], "eval.roots=[] names nothing"),
    ("train", ["eval.roots=[]"], "eval.roots=[] names nothing"),
    ("evaluate", ["sim.loads=[]"], "sim.loads=[] names nothing"),
    ("evaluate", ["eval.task_sets=[]"], "eval.task_sets=[] names nothing"),
    ("train", ["mat.validation.roots=[]"], "mat.validation.roots=[] names nothing"),
    # every stage's own inputs, checked before the stage records itself (stage=policy as much as stage=all)
    ("train", ["stage=policy", "mat.init_from={bad}"], "mat.init_from: policy checkpoint"),
    ("train", ["stage=policy", "mat.init_from={missing}"], "no such policy checkpoint"),
    ("train", ["stage=policy", "ckpt_path={bad}"], "ckpt_path: policy checkpoint"),
    ("train", ["stage=policy", "ckpt_path={missing}"], "ckpt_path="),
    ("train", ["stage=policy", "ckpt_path=" + str(MARA_CKPT)], "not a MAT training checkpoint to resume"),
    ("train", ["stage=policy", "predictor.ckpt_path={bad}"], "predictor.ckpt_path: "),
    ("train", ["experiment=smoke", "stage=policy", "predictor.ckpt_path={bad}"], "is not an FM predictor checkpoint"),
    ("train", ["experiment=smoke", "stage=policy", "predictor.ckpt_path={missing}"], "not found"),
    ("train", ["stage=predictor", "predictor=fm", "predictor.ckpt_path={bad}"], "is not an FM predictor checkpoint"),
    # a multirun: every job's settings checked before the first job runs
    ("train", ["-m", "seed=0,abc"], "multirun job 1 of 2 (seed=abc): seed must be an integer, got 'abc'"),
    ("evaluate", ["-m", "methods=[FIFO]", "eval.episodes=1,2,0"], "multirun job 2 of 3 (eval.episodes=0)"),
    ("live", ["-m", "methods=[FIFO]", "live.load=0.1,2"], "multirun job 1 of 2 (live.load=2)"),
    # live mode: MARA-suite reads the decision head, which live mode does not configure (docs/live.md)
    ("live", ["methods=[MARA-suite]"], "MARA-suite reads predictor 'qr_q', which live mode does not configure"),
    ("live", ["methods=[FIFO,MARA-QR]"], "MARA-QR reads predictor 'qr_q'"),
]
#: cases that must be refused before the run folder is held or a stage records itself (no lock, no stage.json)
BEFORE_THE_FOLDER = [c for c in CASES if "stage=policy" in c[1] or "stage=predictor" in c[1]]
if importlib.util.find_spec("ray") is None:
    CASES.append(("live", ["live.workers=ray"], 'pip install -e ".[cluster]"'))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "bad.ckpt").write_text("garbage")
    (d / "plain_file").write_text("not a folder")
    (d / "corrupt.parquet").write_bytes(b"PAR1 but not really")
    return {
        "bad": d / "bad.ckpt",
        "file": d / "plain_file",
        "parquet": d / "corrupt.parquet",
        "missing": d / "missing.ckpt",
    }


def _fill(arg: str, files: dict) -> str:
    for key, path in files.items():
        arg = arg.replace("{" + key + "}", str(path))
    return arg


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("entry,args,needle", CASES, ids=[f"{e}:{' '.join(a)[:60]}" for e, a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2_before_any_work(entry, args, needle, files, tmp_path, monkeypatch, capsys):
    args = [_fill(a, files) for a in args]
    run = tmp_path / "run"
    for module, name in WORK:

        def started(*_a, _name=name, **_k):
            raise AssertionError(f"{_name} started")

        monkeypatch.setattr(module, name, started)
    if not any(a.startswith("hydra.run.dir=") for a in args):
        args = [*args, f"hydra.run.dir={run}"]
    monkeypatch.setattr(sys, "argv", [f"mara.{entry}", *args, "hydra.output_subdir=null"])
    monkeypatch.setenv("HYDRA_MAIN_MODULE", "__main__")  # conf/ found beside the entry point's file, as with python -m
    repo_before, tmp_before = set(os.listdir(REPO)), _tree(files["bad"].parent)
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as exc:
        MAIN[entry]()
    GlobalHydra.instance().clear()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert exc.value.code == 2, err
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert set(os.listdir(REPO)) == repo_before
    assert _tree(files["bad"].parent) == tmp_before  # no probe left, no folder created under a file
    assert not run.exists() or set(os.listdir(run)) <= HYDRA_FILES, sorted(os.listdir(run))
    if (entry, args) in [(e, [_fill(a, files) for a in a_]) for e, a_, _ in BEFORE_THE_FOLDER]:
        assert not run.exists() or ".run.lock" not in os.listdir(run), sorted(os.listdir(run))


def _run(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "entry,args,needle",
    [
        ("mara.train", ["sim.nodez=3"], "did you mean 'sim.nodes'?"),
        ("mara.evaluate", ["methods=[FIFO,MARA]", ow("MARA", "{bad}")], "not a readable PyTorch checkpoint"),
        ("mara.live", ["+method_overrides={FIFO: {bogus: 1}}", "methods=[FIFO]"], "FIFO has no setting 'bogus'"),
    ],
)
def test_bad_input_from_the_command_line(entry, args, needle, files, tmp_path):
    args = [_fill(a, files) for a in args]
    p = _run(entry, *args, f"hydra.run.dir={tmp_path}/run")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr[-2000:]
    assert not (tmp_path / "run").exists() or set(os.listdir(tmp_path / "run")) <= HYDRA_FILES


def test_probe_leaves_no_folder_behind(tmp_path):
    from mara.preflight import check_writable

    check_writable(tmp_path / "a" / "b", "paths.output_dir")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    check_writable(tmp_path / "kept", "paths.output_dir")
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and list((tmp_path / "kept").iterdir()) == []


def test_good_inputs_pass_the_check(tmp_path):
    """The check refuses only mistakes: the shipped configurations and a correct override pass it."""
    from hydra import compose, initialize_config_dir

    from mara.core.config import CONF_DIR
    from mara.preflight import preflight

    runs = [
        ("train", []),
        ("train", ["experiment=smoke"]),
        ("train", ["experiment=hetero"]),
        ("train", ["experiment=band"]),
        ("evaluate", []),
        ("evaluate", ["methods=[MARA,MARA-QR,Slack-QR-q]"]),
        ("evaluate", ["experiment=hetero"]),
        ("evaluate", [ow("MARA", MARA_CKPT), "methods=[MARA]"]),
        ("evaluate", ["experiment=prediction"]),
        ("evaluate", ["+method_overrides={Clairvoyant: {workers: 2, time_limit_s: 1.5}}"]),
        ("live", []),
        (
            "evaluate",
            [
                "methods=[Plan-QR]",
                "+method_overrides={Plan-QR: {allocator: {arrivals: true, samples: 2, min_gain: 1}}}",
            ],
        ),
        ("live", ["action=export_bank"]),
    ]
    for entry, extra in runs:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(entry, overrides=[f"paths.output_dir={tmp_path}/{entry}", *extra])
        preflight(cfg, entry)
    assert list(tmp_path.iterdir()) == []


def test_one_fit_check_for_loaded_policies_and_checkpoint_files():
    """The same check refuses a policy for another M/K whether given a loaded allocator (run time, live) or the
    checkpoint's contents (before any work), and accepts it on its own settings."""
    from omegaconf import OmegaConf

    from mara.core.config import ConfigError, build_allocators, load_method_cfg
    from mara.eval.policy_fit import check_policy_fit
    from mara.preflight import read_policy

    mcfg = load_method_cfg("MARA", {"ckpt_path": str(MARA_CKPT)})
    loaded = [a for _, a in build_allocators(mcfg)]
    on_file = [read_policy(MARA_CKPT)]
    for policies in (loaded, on_file):
        check_policy_fit(mcfg, policies, OmegaConf.create({"nodes": 7, "max_active": 10}))
        with pytest.raises(ConfigError, match="trained for M=7, K=10; this run has sim.nodes=3"):
            check_policy_fit(mcfg, policies, OmegaConf.create({"nodes": 3, "max_active": 10}))
        with pytest.raises(ConfigError, match="trained with predictor 'fm'"):
            check_policy_fit(load_method_cfg("MARA-WLS", {"ckpt_path": str(MARA_CKPT)}), policies)


# ------------------------------------------------------------------------------------- beyond the table's one line
def _main(entry, args, monkeypatch, capsys):
    """Run an entry point's ``main`` in this process; (exit status, non-empty stderr lines)."""
    monkeypatch.setattr(sys, "argv", [f"mara.{entry}", *args, "hydra.output_subdir=null"])
    monkeypatch.setenv("HYDRA_MAIN_MODULE", "__main__")
    GlobalHydra.instance().clear()
    try:
        MAIN[entry]()
        code = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        GlobalHydra.instance().clear()
    return code, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"rows": [', "is not a readable JSON file"),
        ("\xff\xfe", "is not a readable JSON file"),
        ("[1, 2]", "holds a JSON list"),
        ('{"rows": 5}', "rows must be a list of result rows"),
        ('{"rows": [{"no_method": 1}]}', "rows must be a list of result rows"),
        ('{"rows": [], "summary": {"FIFO": 3}}', "do not have the shape of a finished experiment=paper run"),
    ],
)
def test_report_on_a_corrupt_results_json_is_one_line(text, needle, tmp_path, capsys):
    from mara.report.__main__ import main

    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "results.json").write_bytes(text.encode("latin-1"))
    assert main([f"run={tmp_path}"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert not (tmp_path / "report.md").exists()


@pytest.fixture
def job_modules(tmp_path, monkeypatch):
    """An importable module of things a job file may wrongly name: a class whose constructor writes a file, and a
    LightningModule whose loss is NaN."""
    (tmp_path / "wrongjobs.py").write_text(
        textwrap.dedent(f"""
        import torch
        from examples.user_jobs import MLPClassifier

        class NotLightning:
            def __init__(self, **kw):
                open({str(tmp_path / "constructed")!r}, "w").write("called")

        def factory(**kw):
            open({str(tmp_path / "constructed")!r}, "w").write("called")

        class NaNLoss(MLPClassifier):
            def training_step(self, batch, batch_idx):
                return {{"loss": super().training_step(batch, batch_idx)["loss"] * float("nan")}}
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


BLOBS_DATA = "{_target_: examples.user_jobs.BlobData, n: 64, batch_size: 16}"
MLP_MODULE = "{_target_: examples.user_jobs.MLPClassifier, hidden: 8}"


@pytest.mark.parametrize(
    "module, data, needle",
    [
        (
            '{_target_: os.system, command: "touch {out}"}',
            BLOBS_DATA,
            "module._target_: 'os.system' is a builtin_function",
        ),
        (
            "{_target_: wrongjobs.NotLightning}",
            BLOBS_DATA,
            "is the class wrongjobs.NotLightning, not a LightningModule",
        ),
        ("{_target_: wrongjobs.factory}", BLOBS_DATA, "'wrongjobs.factory' is a function, not a LightningModule"),
        (MLP_MODULE, "{_target_: wrongjobs.NotLightning}", "data._target_: 'wrongjobs.NotLightning' is the class"),
        (MLP_MODULE, "{_target_: examples.user_jobs.MLPClassifier}", "not a LightningDataModule subclass"),
        (
            "{_target_: wrongjobs.NaNLoss, hidden: 8}",
            BLOBS_DATA,
            "the loss of the first batch is nan (not a finite number)",
        ),
    ],
)
def test_job_file_is_checked_before_anything_in_it_is_called(module, data, needle, job_modules, monkeypatch, capsys):
    """Every _target_ is imported and checked to be a Lightning class without calling it, for every job before the
    first job is built: nothing the file names runs (a harmless first job comes before the bad one)."""
    out = job_modules / "constructed"
    jobs = job_modules / "jobs.yaml"
    jobs.write_text(
        textwrap.dedent(f"""
        jobs:
          - {{name: fine, module: {MLP_MODULE}, data: {BLOBS_DATA}, target: {{loss: 1.0}}, deadline: {{steps: 5}}}}
          - {{name: wrong, module: {module.replace("{out}", str(out))}, data: {data}, target: {{loss: 1.0}},
              deadline: {{steps: 5}}}}
    """)
    )
    code, err = _main(
        "live", [f"jobs={jobs}", f"hydra.run.dir={job_modules / 'run'}", "jobs_methods=[EDF]"], monkeypatch, capsys
    )
    assert code == 2 and len(err) == 1 and "job 'wrong': " in err[0] and needle in err[0], err
    assert not out.exists()  # neither os.system nor a constructor ran
    assert not (job_modules / "run" / "job_outcomes.json").exists()


def _stub_training(monkeypatch, calls: list, policy_file=None):
    """mara.train's stages replaced: the policy stage writes ``policy_file`` as its best checkpoint (or fails the test
    if reached), the evaluation records the policy checkpoints it was given."""
    import shutil

    def train_policy(settings, callbacks=None):
        assert policy_file is not None, "the finished policy stage was trained again"
        best = Path(settings.output_dir) / "checkpoints" / "best.ckpt"
        best.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(policy_file, best)
        return {
            "best_ckpt": str(best),
            "output_dir": settings.output_dir,
            "last_ckpt": str(best.with_name("last.ckpt")),
        }

    def run_evaluation(settings, folder):
        calls.append(
            {m: [c["ckpt_path"] for c in o.get("checkpoints") or []] for m, o in settings.method_overrides.items()}
        )
        return {"rows": [{"method": "stub"}], "summary": {}}

    monkeypatch.setattr(mara.train, "train_policy", train_policy)
    monkeypatch.setattr(mara.train, "run_evaluation", run_evaluation)


def test_copied_run_folder_resumes_from_its_own_files(tmp_path, monkeypatch, capsys):
    """cp -a a finished run, plant another best.ckpt in the copy, rerun into the copy: the evaluation reads the copy's
    own policy (stage.json names it relative to the folder), and the log names the file it used."""
    import shutil

    from mara.core import rundir

    first = CKPT / "mara_suite_zoo_seed0.ckpt"
    other = CKPT / "mara_suite_zoo_seed1.ckpt"
    calls: list = []
    _stub_training(monkeypatch, calls, first)
    args = ["methods=[MARA-suite,FIFO]", "eval.roots=1", "eval.episodes=1"]
    code, err = _main("train", [*args, f"hydra.run.dir={tmp_path / 'a'}"], monkeypatch, capsys)
    assert code == 0, err
    recorded = json.loads((tmp_path / "a" / "policy" / rundir.STAGE_FILE).read_text())
    assert recorded["result"]["best_ckpt"] == "checkpoints/best.ckpt" and "best_ckpt" in recorded["paths"]
    shutil.copytree(tmp_path / "a", tmp_path / "b", symlinks=True)  # cp -a
    shutil.copyfile(other, tmp_path / "b" / "policy" / "checkpoints" / "best.ckpt")
    _stub_training(monkeypatch, calls)  # the policy stage is finished: reused, never trained again
    code, err = _main("train", [*args, f"hydra.run.dir={tmp_path / 'b'}"], monkeypatch, capsys)
    assert code == 0, err
    own = str(tmp_path / "b" / "policy" / "checkpoints" / "best.ckpt")
    assert calls[-1]["MARA-suite"] == [own]
    log = (tmp_path / "b" / "train.log").read_text()
    assert f"resume: policy stage finished in this run folder, reused ({tmp_path / 'b' / 'policy'}): {own}" in log


def test_recorded_path_outside_the_run_folder_is_one_line(tmp_path, monkeypatch, capsys):
    """A stage record naming a file outside its folder (an absolute path written by an older version, then copied,
    or an edited ../ path) is refused in one line before any work; nothing of the other folder is used."""
    from mara.core import rundir

    calls: list = []
    _stub_training(monkeypatch, calls, CKPT / "mara_suite_zoo_seed0.ckpt")
    args = ["methods=[MARA-suite,FIFO]", "eval.roots=1", "eval.episodes=1", f"hydra.run.dir={tmp_path / 'a'}"]
    assert _main("train", args, monkeypatch, capsys)[0] == 0
    stage = tmp_path / "a" / "policy" / rundir.STAGE_FILE
    rec = json.loads(stage.read_text())
    for elsewhere in (str(tmp_path / "elsewhere" / "best.ckpt"), "../../elsewhere/best.ckpt"):
        stage.write_text(json.dumps(dict(rec, result=dict(rec["result"], best_ckpt=elsewhere))))
        n = len(calls)
        code, err = _main("train", args, monkeypatch, capsys)
        assert code == 2 and len(err) == 1 and f"records best_ckpt={elsewhere}, outside this run folder" in err[0], err
        assert len(calls) == n  # no evaluation started


def test_multirun_checks_every_job_before_the_first_runs(tmp_path):
    """``-m seed=0,abc``: job 1's bad value is refused in one line before job 0 starts; no sweep folder is written."""
    p = _run("mara.train", "-m", "experiment=smoke", "seed=0,abc", f"hydra.sweep.dir={tmp_path}/sweep")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-2000:]
    assert "multirun job 1 of 2 (seed=abc): seed must be an integer, got 'abc'" in lines[0]
    assert not (tmp_path / "sweep").exists()
