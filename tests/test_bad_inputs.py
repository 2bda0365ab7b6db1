"""Every user mistake stops mara.train, mara.evaluate and mara.live before any work: exactly one line on stderr,
exit status 2, no training or evaluation started, nothing written outside the run folder.

The table runs each entry point's real ``main`` in this process (argv set, SystemExit caught, stderr captured);
the work functions are replaced by ones that fail the case if reached. A few cases also run as real subprocesses.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

import mara.evaluate
import mara.live.__main__
import mara.live.run
import mara.pipelines.paper
import mara.predictors.train
import mara.train

REPO = Path(__file__).resolve().parents[1]
CKPT = REPO / "mara" / "data" / "checkpoints"
MARA_CKPT, QR_POLICY, FM_CKPT = CKPT / "mara_zoo_seed0.ckpt", CKPT / "mara_qr_zoo_seed0.ckpt", CKPT / "fm_zoo.ckpt"
MAIN = {"train": mara.train.main, "evaluate": mara.evaluate.main, "live": mara.live.__main__.main}
# what a refused run may leave in its own new run folder: Hydra's files, and the lock file of a check that runs once
# the folder is held (e.g. Clairvoyant's workers); never results, checkpoints or events
HYDRA_FILES = {".hydra", "train.log", "evaluate.log", "live.log", "__main__.log", ".run.lock"}
#: the functions that start work; reaching one fails the case
WORK = [(mara.predictors.train, "train_predictor"), (mara.train, "train_policy"), (mara.pipelines.paper, "run_jobs"),
        (mara.evaluate, "build_episodes"), (mara.evaluate, "evaluate_methods"), (mara.evaluate, "run_prediction"),
        (mara.evaluate, "run_lofo_experiment"), (mara.live.run, "run_live_methods"), (mara.live.run, "export_bank")]


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
    ("train", ["methods=[]"], "methods is empty"),
    ("live", ["methods=[]"], "methods is empty"),
    ("evaluate", ["methods=FIFO"], "methods must be a list"),
    # method_overrides: every key a setting of that method, every name a method
    ("evaluate", ["methods=[FIFO,MARA]", "+method_overrides={MARA: {ckpt_pth: mine.ckpt}}"], "did you mean 'ckpt_path'?"),
    ("evaluate", ["methods=[FIFO]", "+method_overrides={FIFO: {bogus: 1}}"], "FIFO has no setting 'bogus'"),
    ("evaluate", ["methods=[FIFO]", "+method_overrides={FIFO: {ckpt_path: x.ckpt}}"], "FIFO has no setting 'ckpt_path'"),
    ("evaluate", ["methods=[FIFO]", "+method_overrides={NoSuch: {x: 1}}"], "unknown method 'NoSuch' in method_overrides"),
    ("evaluate", ["methods=[FIFO]", "+method_overrides={Slack-Fm: {predictor: fm}}"], "did you mean 'Slack-FM'?"),
    ("evaluate", ["methods=[Clairvoyant]", "+method_overrides={Clairvoyant: {time_limt_s: 1}}"], "did you mean 'time_limit_s'?"),
    ("evaluate", ["methods=[Clairvoyant]", "+method_overrides={Clairvoyant: {workers: abc}}"], "method_overrides.Clairvoyant"),
    ("evaluate", ["methods=[Clairvoyant]", "+method_overrides={Clairvoyant: {admission_limit: maybe}}"],
     "method_overrides.Clairvoyant.admission_limit: Value 'maybe' is not a valid bool"),
    ("evaluate", ["methods=[Clairvoyant]", "+method_overrides={Clairvoyant: {workers: -1}}"], "workers must be an integer >= 0"),
    ("evaluate", ["methods=[LARA]", "+method_overrides={LARA: {allocator: {warm_ob: 1}}}"], "did you mean 'warm_obs'?"),
    # allocator arguments of the scalar type the constructor declares (a string is not a switch, a bool not a count)
    ("evaluate", ["experiment=hetero", "methods=[Plan-QR]", "+method_overrides={Plan-QR: {allocator: {arrivals: maybe}}}"],
     "method_overrides.Plan-QR.allocator.arrivals: expected bool, got 'maybe'"),
    ("evaluate", ["methods=[Plan-QR]", "+method_overrides={Plan-QR: {allocator: {samples: true}}}"],
     "method_overrides.Plan-QR.allocator.samples: expected int, got True"),
    ("evaluate", ["methods=[Slack-QR]", "+method_overrides={Slack-QR: {allocator: {displace: yes please}}}"],
     "allocator.displace: expected bool"),
    ("evaluate", ["methods=[MARA]", "+method_overrides={MARA: {predictor: fmm}}"], "did you mean 'fm'?"),
    ("evaluate", ["methods=[MARA]", "+method_overrides={MARA: {predictor: truth}}"], "perfect-prediction bound"),
    ("train", ["+method_overrides={FIFO: {bogus: 1}}"], "FIFO has no setting 'bogus'"),
    ("live", ["methods=[FIFO]", "+method_overrides={FIFO: {bogus: 1}}"], "FIFO has no setting 'bogus'"),
    # numbers out of range or not numbers
    ("train", ["seed=-1"], "seed must be an integer >= 0"),
    ("train", ["seed=1.5"], "seed must be an integer"),
    ("train", ["mat.total_env_steps=-5"], "mat.total_env_steps must be an integer >= 0"),
    ("train", ["experiment=smoke", "mat.total_env_steps=0", "mat.imitation.enabled=false"],
     "mat.total_env_steps must be an integer >= 1 when mat.imitation.enabled is false"),
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
    ("evaluate", ["experiment=prediction", "predictors.qr_cal.recalibrate.cal_bank=/nonexistent/cal.parquet"],
     "predictors.qr_cal.recalibrate.cal_bank=/nonexistent/cal.parquet: no such file"),
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
]
if importlib.util.find_spec("ray") is None:
    CASES.append(("live", ["live.workers=ray"], 'pip install -e ".[cluster]"'))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "bad.ckpt").write_text("garbage")
    (d / "plain_file").write_text("not a folder")
    (d / "corrupt.parquet").write_bytes(b"PAR1 but not really")
    return {"bad": d / "bad.ckpt", "file": d / "plain_file", "parquet": d / "corrupt.parquet", "missing": d / "missing.ckpt"}


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


def _run(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("entry,args,needle", [
    ("mara.train", ["sim.nodez=3"], "did you mean 'sim.nodes'?"),
    ("mara.evaluate", ["methods=[FIFO,MARA]", ow("MARA", "{bad}")], "not a readable PyTorch checkpoint"),
    ("mara.live", ["+method_overrides={FIFO: {bogus: 1}}", "methods=[FIFO]"], "FIFO has no setting 'bogus'"),
])
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

    runs = [("train", []), ("train", ["experiment=smoke"]), ("train", ["experiment=hetero"]), ("train", ["experiment=band"]),
            ("evaluate", []), ("evaluate", ["methods=[MARA,MARA-QR,Slack-QR-q]"]), ("evaluate", ["experiment=hetero"]),
            ("evaluate", [ow("MARA", MARA_CKPT), "methods=[MARA]"]), ("evaluate", ["experiment=prediction"]),
            ("evaluate", ["+method_overrides={Clairvoyant: {workers: 2, time_limit_s: 1.5}}"]), ("live", []),
            ("evaluate", ["methods=[Plan-QR]", "+method_overrides={Plan-QR: {allocator: {arrivals: true, samples: 2, min_gain: 1}}}"]),
            ("live", ["action=export_bank"])]
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
