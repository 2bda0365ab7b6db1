"""LARA-FM through the real evaluation path: the shipped FM checkpoint as the simulator's predictor."""
from mara.evaluate import evaluate
from tests.test_entrypoints import tiny


def test_lara_fm_beats_rules_on_stress(tmp_path, small_bank):
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[LARA-FM,FIFO,EDF]", "scenario=stress"))
    s = {m: res["summary"][m]["stress"]["0"]["mean"] for m in res["summary"]}
    assert s["LARA-FM"] > s["FIFO"] and s["LARA-FM"] > s["EDF"]
