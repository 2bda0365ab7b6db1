"""LARA-FM through the real evaluation path: the shipped FM checkpoint as the simulator's predictor."""

from mara.evaluate import evaluate
from tests.test_entrypoints import tiny


def test_lara_fm_serves_short_tasks_on_stress(tmp_path, small_bank):
    """Stress (paper §5.4): FIFO and EDF serve the 7 infeasible tasks until their deadline and so finish no short
    task (0 by construction); LARA-FM drops the infeasible tasks once its estimates say so and finishes short
    tasks in every episode, never more than the Oracle bound."""
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[LARA-FM,FIFO,EDF,Oracle]", "scenario=stress"))
    done = {}
    for r in res["rows"]:
        done.setdefault(r["method"], []).append(r["succeeded"])
    assert done["FIFO"] == [0, 0] and done["EDF"] == [0, 0]
    assert all(d >= 4 for d in done["LARA-FM"]), done
    assert all(a <= b for a, b in zip(done["LARA-FM"], done["Oracle"])), done
