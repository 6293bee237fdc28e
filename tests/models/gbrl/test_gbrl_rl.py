"""PPO/A2C plumbing with tree and MLP actor-critics, and the gbrl-cartpole producer (tiny budgets)."""
from __future__ import annotations

import numpy as np
import pytest

from edgesmith.models import get_producer
from edgesmith.models.gbrl.rl import A2C, PPO, PPOConfig, TreeActorCritic

TINY = dict(n_envs=2, n_steps=64, batch_size=64, n_epochs=2)


def test_policy_gradient_tree_step_raises_probability_of_advantaged_actions():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(256, 3)).astype(np.float32)
    act = rng.integers(0, 2, 256)
    good = (obs[:, 0] > 0).astype(np.int64)  # the action that matches the sign of x0 is rewarded
    adv = np.where(act == good, 1.0, -1.0)
    algo = PPO.__new__(PPO)  # the update alone, on a synthetic buffer: no environment needed
    algo.cfg, algo.rng = PPOConfig(batch_size=64, n_epochs=3), rng
    algo.policy = TreeActorCritic(3, 2, policy_lr=0.1)
    logits0, _ = algo.policy.predict(obs)
    algo._update(obs, act, np.full(256, np.log(0.5)), adv, np.zeros(256))
    logits1, _ = algo.policy.predict(obs)
    gain = lambda lg: lg[np.arange(256), good] - lg[np.arange(256), 1 - good]  # noqa: E731
    assert algo.policy.n_trees == 12
    assert np.mean(gain(logits1)) > np.mean(gain(logits0)) + 0.1


def test_update_cache_tracks_the_ensemble_exactly():
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(128, 4)).astype(np.float32)
    pol = TreeActorCritic(4, 3, shared=False)
    pol.begin_update(obs)
    import torch

    for _ in range(3):
        idx = rng.permutation(128)[:64]
        pi, v = pol.outputs(idx)
        pol.step(idx, (pi**2).sum() + ((v - 1.0) ** 2).sum())
    pi, v = pol.predict(obs)
    np.testing.assert_allclose(pol._cache[0], pi, atol=1e-5)
    np.testing.assert_allclose(pol._cache[1][:, 0], v, atol=1e-5)
    assert pol.log_std is None and torch.is_tensor(pol.outputs(np.arange(4))[0])


@pytest.mark.parametrize("shared", [True, False])
def test_ppo_tree_rollout_adds_one_tree_per_minibatch_per_ensemble(shared):
    algo = PPO("CartPole-v1", policy="tree", seed=0, config=PPOConfig(**TINY, policy_kwargs={"shared": shared}))
    algo.learn(128)
    per_update = 2 * 128 // 64
    assert algo.num_timesteps == 128
    assert [e.n_trees for e in algo.policy.ensembles] == ([per_update] if shared else [per_update, per_update])
    assert algo.policy.policy_ensemble().output_dim == 2


def test_same_seed_gives_the_same_tree_policy():
    runs = [PPO("CartPole-v1", policy="tree", seed=3, config=PPOConfig(**TINY)).learn(128) for _ in range(2)]
    a, b = (r.policy.ensembles[0] for r in runs)
    np.testing.assert_array_equal(a.leaves, b.leaves)


def test_a2c_fits_one_tree_per_rollout():
    algo = A2C("CartPole-v1", policy="tree", seed=0, config=PPOConfig(n_envs=2, n_steps=16))
    algo.learn(64)
    assert algo.policy.n_trees == 2 and algo.num_timesteps == 64


def test_gaussian_tree_policy_on_pendulum_learns_log_std_and_stays_in_bounds():
    algo = PPO("Pendulum-v1", policy="tree", seed=0, config=PPOConfig(**TINY))
    std0 = algo.policy.log_std.detach().clone()
    algo.learn(128)
    assert algo.gaussian and algo.policy.n_trees == 4
    assert not np.allclose(algo.policy.log_std.detach().numpy(), std0.numpy())
    assert np.isfinite(algo.evaluate(1))


def test_predict_has_the_stable_baselines3_shape():
    algo = PPO("CartPole-v1", policy="tree", seed=0, config=PPOConfig(**TINY)).learn(128)
    obs = np.zeros((3, 4), np.float32)
    a, state = algo.predict(obs)
    assert state is None and a.shape == (3,) and set(a) <= {0, 1}
    one, _ = algo.predict(obs[0], deterministic=False)
    assert int(one) in (0, 1)


def test_mlp_baseline_runs_the_same_ppo():
    algo = PPO("CartPole-v1", policy="mlp", seed=0, config=PPOConfig(**TINY)).learn(128)
    assert algo.num_timesteps == 128 and 0 < algo.evaluate(1) <= 500


def test_gbrl_cartpole_producer_builds_caches_and_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    monkeypatch.setattr("edgesmith.models.gbrl.producer.PPOConfig", lambda: PPOConfig(**TINY))
    p = get_producer("gbrl-cartpole", seed=0, steps=128, eval_episodes=2).build()
    assert p.cache_path().exists() and p.module.output_dim == 2
    again = get_producer("gbrl-cartpole", seed=0, steps=128, eval_episodes=2).build()
    x = p.calibration_data(32)
    assert x.shape == (32, 4)
    np.testing.assert_array_equal(again.module.predict(x), p.module.predict(x))
    ev = p.evaluate(p.module.predict)
    assert ev.metric.name == "mean_return" and 0 < ev.value <= 500
