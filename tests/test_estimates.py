"""One place where estimates come from (mara/predictors/estimates.py): any predictor's band from a loss prefix,
each (job, prefix) asked once, and the kinds readable on trace jobs read from the registry."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mara.core import registry
from mara.predictors.estimates import Estimates, predict_band


class Counting:
    """A predictor whose band is (n, 2n, 3n) for a prefix of n batches; counts the prefixes it is asked for."""

    min_obs = 2

    def __init__(self):
        self.asked = []

    def predict_quantiles(self, S, L, lengths, eps, cap, batch_size, lr, family=None):
        self.asked += [int(n) for n in lengths]
        assert np.isnan(S[0, int(lengths[0]) :]).all()  # past a prefix's end the predictor reads NaN
        n = np.asarray(lengths, np.float64)
        return np.stack([n, 2 * n, 3 * n], axis=1)


def _bank(rows: int = 3, length: int = 20):
    L = np.linspace(2.0, 1.0, length)[None, :].repeat(rows, 0)
    S = np.arange(1, length + 1, dtype=np.float64)[None, :].repeat(rows, 0)
    return SimpleNamespace(S=S, L=L, lengths=np.full(rows, length), batch_size=np.ones(rows), lr=np.full(rows, 0.1))


def test_a_prefix_asked_again_is_answered_from_the_memo():
    pred = Counting()
    est = Estimates(pred)
    bank, rows, eps, fam = _bank(), np.array([0, 2]), np.array([1.2, 1.3]), np.array(["a", "b"])
    q, asked = est.remembered(np.array([7, 9]), bank, rows, np.array([4, 5]), eps, fam)
    assert asked and q.tolist() == [[4, 8, 12], [5, 10, 15]] and pred.asked == [4, 5]
    q, asked = est.remembered(np.array([9, 7]), bank, rows[::-1], np.array([5, 6]), eps[::-1], fam[::-1])
    assert asked and q.tolist() == [[5, 10, 15], [6, 12, 18]] and pred.asked == [4, 5, 6]  # job 9 at 5: memo
    assert est.min_obs == 2


def test_the_band_of_a_predictor_without_quantiles_is_its_point_estimate():
    class Point:
        def predict_remaining(self, S, L, lengths, eps, cap, batch_size, lr, family=None):
            return np.asarray(cap, np.float64) / 2

    lo, med, hi = predict_band(Point(), None, None, None, None, np.array([10.0, 4.0]), None, None)
    assert lo.tolist() == med.tolist() == hi.tolist() == [5.0, 2.0]


def test_the_kinds_read_on_trace_jobs_are_the_registry_s(tmp_path, monkeypatch):
    assert registry.trace_predictors() == tuple(
        k for k in registry.predictor_kinds() if registry.predictor_entry(k).traces
    )
    assert {"qr", "wls"} <= set(registry.trace_predictors()) and "fm" not in registry.trace_predictors()
    # a kind registered with traces: true joins them: one line of its YAML, no list elsewhere
    (tmp_path / "predictor").mkdir()
    (tmp_path / "predictor" / "toy.yaml").write_text(
        "name: toy\nregistry:\n  builder: mara.predictors.baselines.wls.WLSPredictor\n  traces: true\n"
    )
    monkeypatch.setenv("MARA_CONF_PATH", str(tmp_path))
    assert "toy" in registry.trace_predictors()


@pytest.mark.parametrize("name", ["wls"])
def test_a_registered_predictor_by_name(name):
    est = Estimates.named(name)
    assert est.predictor.name == name and est.min_obs >= 1
