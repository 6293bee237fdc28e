"""RL learning curves: GBRL tree policy vs a small MLP policy under the same PPO settings.

    .venv/bin/python -m edgesmith.bench.studies.gbrl_rl --env CartPole-v1 --steps 100000 --seeds 0 1 2 \
        --out results/gbrl_cartpole.png
    .venv/bin/python -m edgesmith.bench.studies.gbrl_rl --env MiniGrid-Empty-5x5-v0 --steps 30000 --seeds 0 1 2 \
        --out results/gbrl_minigrid.png
    .venv/bin/python -m edgesmith.bench.studies.gbrl_rl --env Pendulum-v1 --steps 100000 --seeds 0 1 2 \
        --out results/gbrl_pendulum.png

For each policy and seed: train with PPO (``models.gbrl.rl``), log the mean return of the
episodes finished in each rollout, then evaluate the greedy policy on 10 seeded episodes. Writes
the learning-curve PNG, a JSON with every curve and final return, and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from edgesmith.common import atomic_path, write_json
from edgesmith.models.gbrl.rl import A2C, PPO, PPOConfig


def preset(env_id: str) -> PPOConfig:
    """PPO settings per environment family (the same for the tree and the MLP policy)."""
    if env_id.startswith("MiniGrid"):
        return PPOConfig(n_envs=8, n_steps=128, batch_size=256, n_epochs=4, ent_coef=0.01)
    if env_id.startswith("Pendulum"):  # short horizon, as in the rl-zoo settings for Pendulum
        return PPOConfig(n_envs=4, n_steps=1024, batch_size=512, n_epochs=10, gamma=0.9)
    return PPOConfig()


def tree_kwargs(env_id: str) -> dict:
    """Tree-policy-only options (the MLP keeps its defaults): the Gaussian log-std step size."""
    return {"log_std_lr": 1e-2} if env_id.startswith("Pendulum") else {}


def run_one(env_id: str, policy: str, seed: int, steps: int, algo: str, env_kwargs: dict | None = None,
            obs_wrapper=None, config: PPOConfig | None = None) -> dict:
    cls = PPO if algo == "ppo" else A2C
    t0 = time.perf_counter()
    model = cls(env_id, policy=policy, seed=seed, config=config, env_kwargs=env_kwargs, obs_wrapper=obs_wrapper)
    model.learn(steps)
    train_s = time.perf_counter() - t0
    final = model.evaluate(10)
    extra = {"n_trees": model.policy.n_trees} if policy == "tree" else {}
    return {"policy": policy, "seed": seed, "steps": model.num_timesteps, "final_mean_return": final,
            "train_s": train_s, "curve": model.history, **extra}


def plot(runs: list[dict], title: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, color in (("tree", "tab:green"), ("mlp", "tab:blue")):
        mine = [r for r in runs if r["policy"] == policy]
        for i, r in enumerate(mine):
            x, y = zip(*r["curve"]) if r["curve"] else ((), ())
            ax.plot(x, y, color=color, alpha=0.5, lw=1,
                    label=f"{policy} (final {_fmt(np.mean([m['final_mean_return'] for m in mine]))}, {len(mine)} seeds)"
                    if i == 0 else None)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean episodic return (training rollouts)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    with atomic_path(out, force=True) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def _fmt(v: float) -> str:
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3f}"  # MiniGrid returns live in [0, 1]


def table(runs: list[dict]) -> str:
    lines = ["| policy | seed | steps | final mean return (10 greedy episodes) | train s | trees |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r['policy']} | {r['seed']} | {r['steps']} | {_fmt(r['final_mean_return'])} | "
                     f"{r['train_s']:.0f} | {r.get('n_trees', '')} |")
    for policy in ("tree", "mlp"):
        f = [r["final_mean_return"] for r in runs if r["policy"] == policy]
        if f:
            lines.append(f"| **{policy} mean** | | | **{_fmt(np.mean(f))} ± {_fmt(np.std(f))}** | | |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--algo", default="ppo", choices=["ppo", "a2c"])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--policies", nargs="+", default=["tree", "mlp"])
    ap.add_argument("--out", type=Path, default=Path("results/gbrl_rl.png"))
    args = ap.parse_args(argv)
    runs = []
    for policy in args.policies:
        for seed in args.seeds:
            cfg = preset(args.env)
            if policy == "tree":
                cfg.policy_kwargs = tree_kwargs(args.env)
            r = run_one(args.env, policy, seed, args.steps, args.algo, config=cfg)
            print(f"{policy} seed {seed}: final {_fmt(r['final_mean_return'])} in {r['train_s']:.0f} s", flush=True)
            runs.append(r)
    plot(runs, f"{args.algo.upper()} on {args.env}: GBRL trees vs MLP", args.out)
    write_json(args.out.with_suffix(".json"), {"env": args.env, "algo": args.algo, "config": preset(args.env).to_dict(),
                                                "tree_kwargs": tree_kwargs(args.env),
                                                "runs": runs})
    print(table(runs))


if __name__ == "__main__":
    main()
