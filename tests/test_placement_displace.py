"""The placement's displacement move on unequal nodes (hand-worked cases: it fires when it should, not otherwise),
bit-identity on identical nodes, and the placement search (Plan-*) against the least-slack rule on a tiny instance."""

import numpy as np
import pytest

from mara.allocators.placement import assign_nodes, displace_running, place
from mara.allocators.placement_search import PlanRule, band_sample, rollout_successes
from mara.allocators.slack import SlackRule, band_quantile
from mara.predictors.baselines.truth import TruthPredictor
from mara.predictors.baselines.wls import WLSPredictor
from mara.sim.env import IDLE, BatchedEnv, run_episodes
from mara.sim.workload import PAPER_TASK_SETS, episodes_from_tasks, generate_episodes
from tests.test_sim import task

SPEED, COST = np.array([2, 1]), 2


def swap_case(rem_a=8, tau_a=6, rem_b=4, tau_b=10):
    """Nodes [fast 2, slow 1], switch cost 2. Slot 0 (b) ran on the fast node, slot 1 (a) on the slow one; a is
    ranked first (least slack). Greedy keeps both where they ran: node 0 → b, node 1 → a."""
    picks = np.array([[1, 0]])
    last = np.array([[0, 1]])
    started = np.array([[True, True]])
    setup = np.zeros((1, 2), np.int64)
    rem = np.array([[rem_b, rem_a]], np.float64)
    tau = np.array([[tau_b, tau_a]])
    greedy = assign_nodes(picks, SPEED, COST, last, started, setup, rem)
    assert greedy.tolist() == [[0, 1]]
    return displace_running(greedy, picks, SPEED, COST, last, started, setup, rem, tau)


def test_displacement_fires_when_the_tight_task_makes_it_only_on_the_fast_node():
    # a: 8 batches in 6 steps: 8 steps on its slow node (late), 2 + ceil(8/2) = 6 on the fast one (in time);
    # b: 4 batches, 10 steps left: moved to the slow node 2 + 4 = 6 <= 10 (4 steps to spare) -> swap
    assert swap_case().tolist() == [[1, 0]]


@pytest.mark.parametrize(
    "kw, why",
    [
        (dict(rem_a=6), "a makes it where it is (6 <= 6)"),
        (dict(rem_a=10), "a misses even on the fast node (2 + 5 = 7 > 6)"),
        (dict(tau_b=5), "b would miss on the slow node (2 + 4 = 6 > 5)"),
    ],
)
def test_displacement_does_not_fire_otherwise(kw, why):
    assert swap_case(**kw).tolist() == [[0, 1]], why


def test_displacement_margin_and_displaced_estimate():
    picks, last, started = np.array([[1, 0]]), np.array([[0, 1]]), np.array([[True, True]])
    setup, rem, tau = np.zeros((1, 2), np.int64), np.array([[4.0, 8.0]]), np.array([[10, 6]])
    greedy = np.array([[0, 1]])
    # b keeps 4 spare steps: a margin of 4 allows the swap, 5 does not
    assert displace_running(greedy, picks, SPEED, COST, last, started, setup, rem, tau, margin=4).tolist() == [[1, 0]]
    assert displace_running(greedy, picks, SPEED, COST, last, started, setup, rem, tau, margin=5).tolist() == [[0, 1]]
    # judged at a pessimistic estimate of b (9 batches: 2 + 9 = 11 > 10) the swap is off
    hi = np.array([[9.0, 8.0]])
    assert displace_running(greedy, picks, SPEED, COST, last, started, setup, rem, tau, hi).tolist() == [[0, 1]]


def test_displacement_needs_a_running_task_on_the_faster_node():
    # b did not run on the fast node at t-1 (a fresh start): the greedy pass already gave the fast node to a
    picks, last, started = np.array([[1, 0]]), np.array([[-1, 1]]), np.array([[False, True]])
    setup, rem, tau = np.zeros((1, 2), np.int64), np.array([[4.0, 8.0]]), np.array([[10, 6]])
    greedy = assign_nodes(picks, SPEED, COST, last, started, setup, rem)
    assert greedy.tolist() == [[1, 0]]
    assert displace_running(greedy, picks, SPEED, COST, last, started, setup, rem, tau).tolist() == [[1, 0]]


def random_picks(rng, E, K, M):
    """[E, M] picks: per episode a random number of distinct slots of K in random order, IDLE after."""
    P = np.full((E, M), IDLE)
    for e in range(E):
        n = rng.integers(0, M + 1)
        P[e, :n] = rng.permutation(K)[:n]
    return P


def test_displacement_never_fires_on_equal_speeds():
    rng = np.random.default_rng(1)
    E, K, M = 300, 8, 4
    P = random_picks(rng, E, K, M)
    last, started = rng.integers(-1, M, (E, K)), rng.random((E, K)) < 0.7
    setup, rem, tau = rng.integers(0, 3, (E, K)), rng.integers(0, 40, (E, K)), rng.integers(1, 30, (E, K))
    speed = np.full(M, 2)
    out = assign_nodes(P, speed, 2, last, started, setup, rem)
    np.testing.assert_array_equal(displace_running(out, P, speed, 2, last, started, setup, rem, tau), out)


def test_displacement_keeps_every_pick_once():
    rng = np.random.default_rng(2)
    E, K, M = 300, 8, 5
    P = random_picks(rng, E, K, M)
    speed = rng.integers(1, 4, M)
    last, started = rng.integers(-1, M, (E, K)), rng.random((E, K)) < 0.7
    setup, rem, tau = rng.integers(0, 3, (E, K)), rng.integers(0, 40, (E, K)), rng.integers(1, 30, (E, K))
    out = displace_running(
        assign_nodes(P, speed, 2, last, started, setup, rem), P, speed, 2, last, started, setup, rem, tau
    )
    for e in range(E):
        assert sorted(out[e][out[e] >= 0].tolist()) == sorted(P[e][P[e] >= 0].tolist())


def test_place_with_displacement_is_identity_on_identical_nodes(linear_bank):
    env = BatchedEnv(episodes_from_tasks([[task(0, 5, 10), task(0, 6, 10)]], linear_bank), linear_bank, n_nodes=3)
    picks = np.array([[IDLE, 1, 0]])
    assert place(env.reset(), picks, displace=True) is picks


@pytest.mark.parametrize("speed, cost", [(None, 0), ([1, 1, 1], 2)])
def test_identical_nodes_bit_identical_with_displacement(small_bank, speed, cost):
    """On identical nodes (free preemption, or a switch cost with equal speeds) every rule and planner acts as the
    plain rule: the same metrics, exactly."""
    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.08, 4, 7, n_steps=200)

    def run(alloc):
        return run_episodes(
            BatchedEnv(ep, small_bank, n_nodes=3, predictor=WLSPredictor(), node_speed=speed, switch_cost=cost), alloc
        )

    ref = run(SlackRule())
    for alloc in (
        SlackRule(displace=True),
        SlackRule(displace=True, displace_at="upper", displace_margin=2),
        PlanRule(samples=2, horizon=20),
    ):
        got = run(alloc)
        for k in ("succeeded", "failed", "utilization", "ready", "waiting", "steps"):
            np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{alloc} {k}")


def test_band_sample_is_the_band_quantile():
    lo, med, hi = np.array([3.0, 10.0]), np.array([8.0, 10.0]), np.array([20.0, 10.0])
    for q in (0.05, 0.1, 0.3, 0.5, 0.8, 0.9, 0.97):
        from statistics import NormalDist

        np.testing.assert_allclose(
            band_sample(lo, med, hi, NormalDist().inv_cdf(q)), band_quantile(lo, med, hi, q), rtol=1e-9
        )


def test_planner_and_displacement_save_the_task_greedy_placement_loses(linear_bank):
    """Nodes [2, 1], switch cost 2, a loss point every 2 batches, true remaining batches from the 4th point on.
    B (34 batches, deadline 42) starts alone on the fast node; A (16 batches, arriving at 2, deadline 16) gets the
    slow one, and after its 8 warm-up batches needs 8 more in 6 steps: only on the fast node (2 set-up + 4). The
    greedy placement keeps B there and loses A; displacing B (2 set-up + 14 batches, 32 steps left) saves both, the
    optimum here. The search finds the same swap."""
    ep = episodes_from_tasks([[task(0, 34, 42), task(2, 16, 14)]], linear_bank)

    def run(alloc):
        env = BatchedEnv(
            ep, linear_bank, n_nodes=2, obs_every=2, node_speed=[2, 1], switch_cost=2, predictor=TruthPredictor()
        )
        return int(run_episodes(env, alloc)["succeeded"][0])

    assert run(SlackRule()) == 1
    assert run(SlackRule(displace=True)) == 2
    assert run(PlanRule(samples=1)) == 2
    assert run(PlanRule(samples=4, displace=True)) == 2


def test_rollout_counts_the_swap_by_hand():
    # the state of the case above when A turns warm: B 14 batches left, 32 steps; A 8 left, 6 steps
    need = np.array([[14, 8], [14, 8]])
    args = dict(
        est=need.astype(float),
        warm=np.ones((2, 2), bool),
        tau=np.array([[32, 6]] * 2),
        cap=np.array([[40, 52]] * 2),
        deadline=np.array([[42, 16]] * 2),
        task=np.array([[0, 1]] * 2),
        last=np.array([[0, 1]] * 2),
        started=np.ones((2, 2), bool),
        setup=np.zeros((2, 2), np.int64),
    )
    got = rollout_successes(np.array([[0, 1], [1, 0]]), need, node_speed=SPEED, switch_cost=COST, horizon=32, **args)
    assert got.tolist() == [1, 2]
    assert rollout_successes(
        np.array([[1, 0]]),
        need[:1] + np.array([[0, 1]]),
        node_speed=SPEED,
        switch_cost=COST,
        horizon=32,
        **{k: v[:1] for k, v in args.items()},
    ).tolist() == [1]  # one batch more: A misses


@pytest.mark.parametrize(
    "name",
    [
        "Slack-QR-displace",
        "Slack-Truth-displace",
        "Plan-QR",
        "Plan-Truth",
        "Slack-Truth-chosen",
        "Plan-QR-arrivals",
        "Plan-Truth-arrivals",
    ],
)
def test_method_configs_build(name):
    from mara.core.config import build_allocators, load_method_cfg

    [(_, alloc)] = build_allocators(load_method_cfg(name))
    assert alloc.name == name


@pytest.mark.parametrize(
    "name, override, needle",
    [
        ("Plan-QR", {"allocator": {"samples": 0}}, "samples must be >= 1"),
        ("Slack-QR-displace", {"allocator": {"displace_at": "q90"}}, "displace_at must be"),
    ],
)
def test_bad_options_are_one_config_error(name, override, needle):
    from mara.core.config import ConfigError, build_allocators, load_method_cfg

    with pytest.raises(ConfigError, match=needle) as exc:
        build_allocators(load_method_cfg(name, override))
    assert "\n" not in str(exc.value)


def _one_node(tau_a=10, need_a=100):
    """One node, two slots: slot 0 holds A (``need_a`` batches, ``tau_a`` steps left), slot 1 is free."""
    big = 10**9
    return dict(
        actions=np.array([[0]]),
        need=np.array([[need_a, big]]),
        est=np.array([[float(need_a), 1e9]]),
        warm=np.array([[True, False]]),
        tau=np.array([[tau_a, 0]]),
        cap=np.array([[200, 0]]),
        deadline=np.array([[tau_a, 0]]),
        task=np.array([[0, -1]]),
        last=np.array([[0, IDLE]]),
        started=np.array([[True, False]]),
        setup=np.zeros((1, 2), np.int64),
        node_speed=np.array([1]),
        switch_cost=0,
        horizon=40,
    )


def _joins(step, need=5, budget=20, cap=50, A=2):
    out = {
        "step": np.full((1, A), 10**9),
        "need": np.full((1, A), need),
        "est": np.full((1, A), float(need)),
        "budget": np.full((1, A), budget),
        "cap": np.full((1, A), cap),
        "obs_every": 2,
    }
    out["step"][0, 0] = step
    return out


def test_rollout_arrivals_join_compete_and_count():
    """A (100 batches in 10 steps) is hopeless: a task joining at step 1 (5 batches, 20 steps to its deadline) is
    admitted to the free slot, served while cold (before the hopeless), and succeeds; without arrivals nothing does."""
    assert rollout_successes(**_one_node()).tolist() == [0]
    assert rollout_successes(**_one_node(), arrivals=_joins(1)).tolist() == [1]
    # joining after the horizon, or with a deadline before it could finish: no success
    assert rollout_successes(**_one_node(), arrivals=_joins(45)).tolist() == [0]
    assert rollout_successes(**_one_node(), arrivals=_joins(1, budget=4)).tolist() == [0]


def test_rollout_arrival_waits_for_a_slot_and_its_deadline_counts_from_joining():
    """With A's slot the only one (K = 1), the task that joins at step 1 waits until A leaves at step 10: 20 − 9 = 11
    steps left then, enough for 5 batches, not for 12."""
    case = _one_node()
    one = {
        k: (v[:, :1] if isinstance(v, np.ndarray) and v.ndim == 2 and v.shape[1] == 2 else v) for k, v in case.items()
    }
    assert rollout_successes(**one, arrivals=_joins(1)).tolist() == [1]
    assert rollout_successes(**one, arrivals=_joins(1, need=12)).tolist() == [0]


def test_a_joining_task_turns_warm_and_is_judged_on_its_estimate():
    """Y (30 batches) then X (12 batches) join at step 1 on one node, 20 steps each. Cold, they are served in
    joining order, Y first; after 8 batches (4 observations of 2) Y is warm, judged on its estimate: 22 left in 12
    steps, hopeless, so cold X takes the node and makes it in exactly its 12 steps. Were Y never judged, it would
    keep the node and both would fail."""
    case = _one_node(tau_a=1)  # A leaves at once: both slots free from step 1
    arr = {
        "step": np.array([[1, 1]]),
        "need": np.array([[30, 12]]),
        "est": np.array([[30.0, 12.0]]),
        "budget": np.array([[20, 20]]),
        "cap": np.array([[40, 100]]),
        "obs_every": 2,
    }
    assert rollout_successes(**case, arrivals=arr).tolist() == [1]
    assert rollout_successes(**case, arrivals=dict(arr, obs_every=100)).tolist() == [0]  # never warm


def test_planner_with_arrivals_records_profiles_and_acts_validly(small_bank):
    """Plan-Truth with arrivals on unequal nodes: valid actions (a slot at most once, present tasks only), the
    profiles it drew from are the warm tasks it saw, and the same episodes give the same result."""
    ep = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.08, 4, 7, n_steps=200)

    def run():
        env = BatchedEnv(ep, small_bank, n_nodes=3, predictor=TruthPredictor(), node_speed=[2, 1, 1], switch_cost=2)
        plan = PlanRule(samples=1, horizon=20, displace=True, arrivals=True)
        return run_episodes(env, plan), plan

    a, plan = run()
    b, _ = run()
    assert sum(len(p) for p in plan.seen.profiles) > 0 and plan.timing["searched"] > 0
    for k in ("succeeded", "failed", "steps"):
        np.testing.assert_array_equal(a[k], b[k])
