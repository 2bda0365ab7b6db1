"""The recipe `mat=hetero` (MARA on heterogeneous nodes cloning Slack-QR, the decision
head's median rule): it composes with `predictor=qr`, passes the teacher/predictor check, its tokens are read at the
levels Slack-QR reads (the median; the head's band ends (0.1, 0.9)) and its v3 stage equals the teacher's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

torch.set_num_threads(1)


def _resolved(*overrides):
    from mara.train_settings import mat_settings
    from tests.test_entrypoints import cfg_for

    return mat_settings(cfg_for("train", ["experiment=hetero", "mat=hetero", "predictor=qr", *overrides]))


def test_hetero_qr_recipe_composes_and_matches_slack_qr():
    from mara.core.config import build_allocators, load_method_cfg
    from mara.predictors.factory import predictor_config
    from mara.train_settings import check_teacher_predictor

    settings = _resolved()  # mat=hetero on predictor qr: a policy for experiment=hetero's nodes alone
    check_teacher_predictor(settings)  # the teacher reads MAT's own predictor
    c = settings.recorded()
    assert c["predictor"]["name"] == "qr" and list(c["predictor"]["band"]) == [0.1, 0.5, 0.9]
    assert c["imitation"]["teacher"] == "Slack-QR"
    assert c["sim"]["node_speed"] == [2, 2, 1, 1, 1, 1, 1] and c["net"]["features"] == "v3"
    method = load_method_cfg("Slack-QR")
    teacher = build_allocators(method)[0][1]
    head_band = list(predictor_config(method.predictor).band)
    # Slack-QR judges "finishable" at the median (quantile null) on the head's band (0.1, 0.9)
    assert teacher.quantile is None and c["net"]["token_q"] == 0.5 == head_band[1]
    assert list(c["net"]["token_band"]) == list(teacher.band) == [head_band[0], head_band[2]]
    # everything else is the same tokens on the FM band cloning Slack-FM-q
    base = _resolved(
        "predictor=fm", "mat.imitation.teacher=Slack-FM-q", "~mat.net.token_q", "~mat.net.token_band"
    ).recorded()
    strip = lambda d: {k: v for k, v in d.items() if k not in ("predictor", "imitation", "net")}
    assert strip(c) == strip(base)
    assert {k: v for k, v in c["net"].items() if not k.startswith("token_")} == base["net"]
    assert {k: v for k, v in c["imitation"].items() if k != "teacher"} == {
        k: v for k, v in base["imitation"].items() if k != "teacher"
    }


def test_hetero_qr_with_the_fm_predictor_is_refused():
    from mara.core.config import ConfigError
    from mara.train_settings import check_teacher_predictor

    with pytest.raises(ConfigError):
        check_teacher_predictor(_resolved("predictor=fm"))


def _obs():
    """As tests.test_mat_hetero.hetero_obs (nodes [2, 1, 1], τ = 80) but slot 0's median is 200 (100 fastest-node
    steps: hopeless for Slack-QR) with its band's low end at 95 (its extrapolated 0.01 quantile, the FM recipes'
    token level, is finishable)."""
    from mara.sim.env import Observation

    E, K = 1, 4
    s_ = np.array([[40, 40, 0, 0]])
    f = lambda v: np.array([[*v, 0.0]])
    return Observation(
        t=70,
        slot_task=np.array([[0, 1, 2, -1]]),
        slot_s=s_,
        slot_arrival=np.zeros((E, K), int),
        slot_deadline=np.full((E, K), 150),
        slot_cap=np.full((E, K), 300),
        slot_pred=f((200.0, 100.0, 50.0)),
        slot_pred_s=s_,
        n_queued=np.array([2]),
        done=np.array([False]),
        n_nodes=3,
        max_active=K,
        obs_every=10,
        slot_pred_lo=f((95.0, 20.0, 40.0)),
        slot_pred_hi=f((300.0, 140.0, 60.0)),
        node_speed=np.array([2, 1, 1]),
        switch_cost=2,
        last_node=np.array([[0, -1, -1, -1]]),
        started=np.array([[True, True, False, False]]),
        setup_left=np.array([[1, 0, 0, 0]]),
    )


def test_v3_stage_tokens_are_slack_qr_stages():
    """At token_q = 0.5 the v3 stage columns are Slack-QR's stages (median in fastest-node steps vs τ); at the FM
    recipes' default level (0.01) slot 0 would read finishable."""
    from mara.allocators.slack import (
        COLD,
        FINISHABLE,
        HOPELESS,
        fastest_node_steps,
        slack_stage,
    )
    from mara.mat.features import n_features, obs_to_tokens

    o = _obs()
    s2 = n_features("v2")[0]
    qr = obs_to_tokens(o, 350.0, "v3", q=0.5, band=(0.1, 0.9))[0][0].double().numpy()
    fm = obs_to_tokens(o, 350.0, "v3")[0][0].double().numpy()
    pred = np.asarray(o.pred_remaining, dtype=np.float64)
    stage = slack_stage(
        o.present, o.cap_remaining, o.n_obs, fastest_node_steps(o, pred), o.remaining_time.astype(float)
    )[0]
    assert list(stage[:3]) == [HOPELESS, FINISHABLE, COLD]
    for k in range(3):  # the present slots
        want = [stage[k] == FINISHABLE, stage[k] == COLD, stage[k] == HOPELESS]
        np.testing.assert_array_equal(qr[k, s2 + 7 : s2 + 10], np.array(want, dtype=np.float64))
    np.testing.assert_array_equal(fm[0, s2 + 7 : s2 + 10], [1, 0, 0])
