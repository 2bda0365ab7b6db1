"""The trace capacity bound is a method a trace evaluation lists: ``methods=[EDF, Capacity-bound]`` gives its rows
(the best selection found) and each window's proven bound, which no schedule beats."""

import numpy as np
import pytest

from mara.bounds.trace_capacity import capacity_bound, gpu_seconds_needed
from mara.core.config import ConfigError
from mara.core.registry import bound_methods
from mara.traces.run import run_trace
from mara.traces.schema import load_trace, parse_cluster
from mara.traces.settings import trace_run_settings
from mara.traces.throughput import job_speeds, known_models


def _run(methods, **over):
    """The typed settings of a trace run on the shipped sample's first 60 jobs, on 64 GPUs."""
    return trace_run_settings(
        {
            "methods": methods,
            "method_overrides": over,
            "eval": {"tensorboard": False},
            "trace": {"cluster": "n8g8", "first_jobs": 60},
        }
    )


def test_the_bound_is_listed_beside_schedulers_and_no_schedule_beats_it(tmp_path):
    res = run_trace(_run(["EDF", "ElasticFlow", "Capacity-bound"]), tmp_path, log=lambda s: None)
    rows = res["rows"]
    bound = [w for w in res["windows"] if w["method"] == "Capacity-bound"]
    assert len(bound) == 1 and bound[0]["jobs"] == 60
    picked = sum(r["deadline_met"] for r in rows if r["method"] == "Capacity-bound")
    assert picked <= bound[0]["bound"] + 1e-9
    for m in ("EDF", "ElasticFlow"):
        assert sum(r["deadline_met"] for r in rows if r["method"] == m) <= bound[0]["bound"]
    assert "Capacity-bound" in bound_methods()  # never "the best rule", dashed in figures
    # the same number as the bound solved on the window's jobs directly
    cl = parse_cluster("n8g8")
    jobs = load_trace(res["protocol"]["trace"], cl, 1.5, known_models()).take(slice(0, 60))
    tput = np.maximum(job_speeds(jobs, "table", cl.gpus)[0], job_speeds(jobs, "elasticflow", cl.gpus)[0])
    gs, ws = gpu_seconds_needed(jobs.iterations.astype(np.float64), tput, cl.gpus)
    assert capacity_bound(jobs.submit, jobs.deadline, gs, ws, cl.gpus, 60.0)[0] == bound[0]["bound"]


def test_a_time_limit_that_is_not_positive_is_refused_before_any_work():
    with pytest.raises(ConfigError, match="time_limit_s must be a positive number"):
        _run(["Capacity-bound"], **{"Capacity-bound": {"time_limit_s": 0}})
