"""Live mode on Ray (``live.workers=ray``): a local Ray cluster declaring GPUs runs a multi-job episode through the
live entry on CPUs; one job's actor is killed mid-run (``ray.kill``), and the run must go on: the killed job fails with
its last checkpoint written out, and every other job's results are those of the same run in one process with that
job's worker dying at the same batch. Bad Ray settings are refused in one line before any job starts.

The cluster lives in a temporary folder, listens on the loopback address only, and is shut down by the fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import compose_config

from mara.core.cli import run_cli
from mara.live.job import TrainingJob
from mara.live.ray_pool import RayPool
from mara.live.run import live_main

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[1]
FAM = "ALSTM_Text_1"  # cheapest to build on synthetic data (no feature extraction)
GPUS = 4  # declared by the local cluster: one per admitted job (sim.max_active), as in the paper's one GPU per task


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster: 2 CPUs, ``GPUS`` declared GPUs (none needed: the jobs run on CPU), no dashboard, a small
    object store, its files under a fresh temporary folder; shut down (and the folder removed) after the tests."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must stay under 108 characters
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *([old] if old else [])])  # actors import this checkout
    try:
        ray.init(
            num_cpus=2,
            num_gpus=GPUS,
            include_dashboard=False,
            object_store_memory=80 * 1024**2,
            _temp_dir=temp,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
        )
        yield ray
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
        shutil.rmtree(temp, ignore_errors=True)


def cfg_for(tmp_path, *extra):
    return compose_config(
        "live",
        f"paths.output_dir={tmp_path}",
        "live.data=synthetic",
        f"live.families=[{FAM}]",
        "live.time_scale=0.05",
        "sim.steps=10",
        "sim.obs_every=2",
        "live.load=0.3",
        "live.root=1000",
        "live.tensorboard=false",
        "live.figure=false",
        "methods=[FIFO]",
        *extra,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "case, needle",
    [
        ("unreachable", "no Ray cluster answers at 127.0.0.1:"),
        ("gpus", "live.ray.gpus_per_job=1: up to sim.max_active=4 admitted jobs"),
        ("job file gpus", "live.ray.gpus_per_job=1: up to sim.max_active=4 admitted jobs"),
        ("not installed", 'needs Ray, which is not installed: pip install -e ".[cluster]"'),
    ],
)
def test_bad_ray_settings_are_refused_by_the_entry_in_one_line_before_any_job(
    case, needle, tmp_path, capsys, monkeypatch
):
    if ray.is_initialized():
        pytest.skip("a Ray cluster of another test is running in this process")
    args = ["live.workers=ray"]
    if case == "unreachable":
        args.append(f"live.ray.address=127.0.0.1:{free_port()}")
    elif case.endswith("gpus"):  # a local cluster declaring 1 GPU for up to 4 admitted jobs of 1 GPU each
        args += ["live.ray.num_gpus=1", "live.ray.gpus_per_job=1", "live.ray.cpus_per_job=0.1"]
        args += [f"jobs={REPO / 'examples' / 'jobs.yaml'}"] if case.startswith("job file") else []
    else:
        monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where Ray is not installed
    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        run_cli(live_main, cfg_for(tmp_path, *args))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err, err
    assert time.perf_counter() - t0 < 20  # the address check waits 5 s at most
    assert not ray.is_initialized() and not list(tmp_path.iterdir())  # no cluster started, nothing written


@pytest.mark.slow  # a Ray cluster's start and one actor per job: about a minute on two busy cores
def test_a_killed_ray_actor_fails_its_job_keeps_its_checkpoint_and_the_other_jobs(ray_cluster, tmp_path, monkeypatch):
    killed = {}
    work = RayPool.work

    def work_then_kill(pool, orders):
        """Before a step: kill the actor of the first job that has a checkpoint and runs again (mid-run)."""
        if not killed:
            for j in orders:
                if j in pool.checkpoints:
                    killed.update(job=j, batch=pool.checkpoints[j][0])
                    ray_cluster.kill(pool.actors[j])
                    break
        return work(pool, orders)

    monkeypatch.setattr(RayPool, "work", work_then_kill)
    ckpt_dir = tmp_path / "checkpoints"
    t0 = time.perf_counter()
    res = live_main(
        cfg_for(
            tmp_path / "ray",
            "live.workers=ray",
            "live.ray.cpus_per_job=0.5",
            "live.ray.gpus_per_job=1",
            "live.ray.checkpoint_every=2",
            f"live.ray.checkpoint_dir={ckpt_dir}",
        )
    )
    wall = time.perf_counter() - t0
    print(f"ray run {wall:.1f}s")
    assert killed, "no job ran again after a checkpoint: the episode is too short to kill a worker mid-run"
    j = killed["job"]
    run = json.loads((tmp_path / "ray" / "live_results.json").read_text())["runs"][0]
    assert run["n_tasks"] >= 3  # a multi-job episode
    [failure] = run["worker_failures"]
    assert failure["job"] == j and f"Ray actor of job {j} died" in failure["error"]
    assert run["status"][j] == 4  # failed, through the simulator's own failure rule
    # its last checkpoint survives the actor: written out, it restores the job at that batch
    path = Path(failure["checkpoint"]["path"])
    assert path.parent == ckpt_dir and failure["checkpoint"]["batch"] == killed["batch"] >= 2
    job = TrainingJob.from_bytes(path.read_bytes())
    assert job.processed == killed["batch"]
    recorded = run["losses"][j]
    assert len(recorded) == killed["batch"]  # killed before its next batch ran
    # the other jobs: the same run on this machine's process workers, job j's worker dying before that batch
    local = tmp_path / "process"
    live_main(cfg_for(local, "live.workers=process", f"++live.crash={{{j}: {killed['batch'] + 1}}}"))
    same = json.loads((local / "live_results.json").read_text())["runs"][0]
    for key in ("decisions", "status", "finish_time", "succeeded", "batches", "losses"):
        assert run[key] == same[key], key
    # the replay cannot know a worker died (it holds the job's last loss): it agrees with the other run's replay
    assert run["replay"]["decisions"] == same["replay"]["decisions"] and "FIFO" in res["summary"]
    # every actor was stopped: the cluster's reservations are free again
    deadline = time.monotonic() + 30
    while ray_cluster.available_resources().get("GPU", 0) < GPUS and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_cluster.available_resources().get("GPU", 0) == GPUS
    print(f"ray episode: {len(run['status'])} jobs, {sum(run['batches'])} batches, {wall:.1f} s")


@pytest.mark.slow  # shares the cluster of the test above
def test_jobs_asking_for_more_gpus_than_the_cluster_declares_are_refused_in_one_line(ray_cluster, tmp_path, capsys):
    cfg = cfg_for(
        tmp_path, "live.workers=ray", "live.ray.cpus_per_job=0.1", "live.ray.gpus_per_job=1", "sim.max_active=5"
    )
    with pytest.raises(SystemExit) as exc:
        run_cli(live_main, cfg)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "live.ray.gpus_per_job=1" in err and f"declares {GPUS} GPUs" in err
    assert not (tmp_path / "live_results.json").exists()
