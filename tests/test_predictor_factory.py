"""The one predictor builder: names, configs, a run's configured predictors (each built once), clear errors."""

import pytest
from omegaconf import OmegaConf

from mara.core.config import ConfigError
from mara.predictors.baselines.wls import WLSPredictor
from mara.predictors.factory import known_predictors, predictor_from


def test_a_name_reads_the_group_file_and_a_config_is_taken_as_it_is():
    assert predictor_from(None) is None and predictor_from({"name": None}) is None
    assert isinstance(predictor_from("wls"), WLSPredictor)
    assert predictor_from(OmegaConf.create({"name": "wls", "gamma": 0.5})).gamma == 0.5
    assert predictor_from({"name": "wls"}).gamma == OmegaConf.load("conf/predictor/wls.yaml").get("gamma", 0.9)


def test_a_run_builds_each_configured_predictor_once():
    configured = OmegaConf.create({"wls": {"name": "wls", "gamma": 0.7}})
    built: dict = {}
    first = predictor_from("wls", configured=configured, built=built)
    assert first.gamma == 0.7 and built == {"wls": first}
    assert predictor_from("wls", configured=configured, built=built) is first
    assert predictor_from(None, configured=configured, built=built) is None


def test_a_name_neither_configured_nor_registered_is_one_config_error():
    with pytest.raises(ConfigError, match=r"predictor 'nope' is not configured \(known: wls\)"):
        predictor_from("nope", configured={"wls": {"name": "wls"}}, built={})
    with pytest.raises(ConfigError, match=r"known: none"):
        predictor_from("nope", configured={})


def test_a_registered_name_the_run_does_not_list_is_built_from_its_file():
    built = {}
    wls = predictor_from("wls", configured={"fm": {"name": "fm"}}, built=built)
    assert type(wls).__name__ == "WLSPredictor" and built == {"wls": wls}


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match=str(known_predictors()).replace("[", r"\[").replace("]", r"\]")):
        predictor_from({"name": "nope", "gamma": 1.0})
