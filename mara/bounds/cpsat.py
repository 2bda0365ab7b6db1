"""What the two Clairvoyant bounds share: OR-Tools loaded lazily (one clear line when it is missing), a deterministic
CP-SAT solver, a stop once a solution meets a known bound, and the split of an episode into time-connected groups."""

from __future__ import annotations

import numpy as np

MISSING_ORTOOLS = "Clairvoyant needs OR-Tools: pip install 'mara[bounds]'"


class MissingORTools(ImportError, RuntimeError):
    """OR-Tools is not installed: an optional dependency missing (an ImportError; a RuntimeError for older callers)."""


def cp_model():
    """The CP-SAT module, imported on first use; a missing OR-Tools gives one clear line."""
    try:
        from ortools.sat.python import cp_model as module
    except ImportError:  # ModuleNotFoundError included
        raise MissingORTools(MISSING_ORTOOLS) from None
    return module


def max_flow():
    """OR-Tools' max-flow module (``SimpleMaxFlow``), imported on first use like :func:`cp_model`."""
    try:
        from ortools.graph.python import max_flow as module
    except ImportError:
        raise MissingORTools(MISSING_ORTOOLS) from None
    return module


def solver(time_limit_s: float):
    """A CP-SAT solver on one worker with a fixed seed, so that a solve that finishes is deterministic."""
    s = cp_model().CpSolver()
    s.parameters.num_workers = 1
    s.parameters.random_seed = 0
    s.parameters.max_time_in_seconds = max(float(time_limit_s), 1e-3)
    return s


def stop_at_bound(z, target):
    """Solution callback that stops the search once ``sum(z) >= target`` (a solution meeting a valid upper bound is
    optimal); ``.hit`` says whether it did."""

    class _Stop(cp_model().CpSolverSolutionCallback):
        def __init__(self):
            super().__init__()
            self.hit = False

        def on_solution_callback(self):
            if sum(self.Value(v) for v in z) >= target:
                self.hit = True
                self.StopSearch()

    return _Stop()


def time_components(b: np.ndarray, d: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
    """Split task indices into groups whose windows [b, d) are connected in time (solved independently)."""
    order = idx[np.argsort(b[idx], kind="stable")]
    groups, cur, end = [], [], None
    for k in order:
        if cur and b[k] >= end:
            groups.append(np.array(cur, dtype=np.int64))
            cur, end = [], None
        cur.append(k)
        end = d[k] if end is None else max(end, d[k])
    if cur:
        groups.append(np.array(cur, dtype=np.int64))
    return groups
