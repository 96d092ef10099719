"""Does the run order bias a ratio? A resampling study of position effects.

An A/A session (one command under two names) should say "no change". If the position of
a run within its round matters (the first run of a round is slower, say), a ratio leans
towards the variant that went first more often. This script simulates sessions of
``--rounds`` rounds (two variants, states selective and hot) under per-position effects,
orders each session with the harness's balanced order (``runner.Plan.schedule``) and
with the per-round shuffle it replaced, and reports for each: the mean paired wall-time
ratio, its spread, and how often a paired t-test on per-round log ratios (the harness's
test for times) calls a difference at 5%.

Per-position effects are synthetic (``--effect``: the first run of a round slower by
that fraction) or estimated from stored results (``--results FILE...``: mean log wall
time by position within the round, relative to its cell's mean).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from elflayout.measure.runner import Plan, Variant  # noqa: E402

STATES = ["selective", "hot"]


def shuffled(plan: Plan) -> list[tuple[int, str, str]]:
    """The order before counterbalancing: every round's cells shuffled with the seed."""
    rng = random.Random(plan.seed)
    cells = [(v.name, s) for v in plan.variants for s in plan.states]
    out = []
    for r in range(plan.runs):
        order = cells[:]
        rng.shuffle(order)
        out.extend((r, v, s) for v, s in order)
    return out


def effects_from_results(paths: list[str]) -> np.ndarray:
    """Mean log wall time by position within the round, relative to the run's cell."""
    dev: dict[int, list[float]] = {}
    for p in paths:
        runs = [r for r in json.loads(Path(p).read_text())["runs"] if not r.get("interference")]
        cells: dict[tuple[str, str], list[float]] = {}
        for r in runs:
            cells.setdefault((r["variant"], r["state"]), []).append(np.log(r["wall_s"]))
        mean = {k: float(np.mean(v)) for k, v in cells.items()}
        by_round: dict[int, list[dict]] = {}
        for r in runs:
            by_round.setdefault(r["round"], []).append(r)
        for rs in by_round.values():
            for pos, r in enumerate(sorted(rs, key=lambda r: r["seq"])):
                dev.setdefault(pos, []).append(np.log(r["wall_s"]) - mean[(r["variant"], r["state"])])
    return np.array([float(np.mean(dev[k])) for k in sorted(dev)])


def session(order, effects: np.ndarray, noise: float, rng: np.random.Generator) -> tuple[float, float]:
    """(paired ratio b/a of selective wall times, p of the paired t-test) for one session."""
    base = {"selective": 0.100, "hot": 0.020}
    wall: dict[tuple[int, str, str], float] = {}
    pos: dict[int, int] = {}
    for rnd, v, s in order:
        k = pos.get(rnd, 0)
        pos[rnd] = k + 1
        wall[(rnd, v, s)] = base[s] * np.exp(effects[k % len(effects)] + rng.normal(0, noise))
    rounds = sorted({r for r, _, _ in order})
    lr = np.array([np.log(wall[(r, "b", "selective")] / wall[(r, "a", "selective")]) for r in rounds])
    p = float(sps.ttest_1samp(lr, 0.0).pvalue) if lr.std() > 0 else 1.0
    return float(np.exp(lr.mean())), p


def study(effects, rounds: int, trials: int, noise: float) -> dict[str, dict]:
    rng = np.random.default_rng(0)
    out = {}
    for name, order_of in (("shuffled", shuffled), ("balanced", Plan.schedule)):
        ratios, bias, alarms, first = [], [], 0, []
        for seed in range(trials):
            plan = Plan([Variant("a", "true"), Variant("b", "true")], STATES, rounds, seed=seed)
            order = order_of(plan)
            ratio, p = session(order, effects, noise, rng)
            bias.append(session(order, effects, 0.0, rng)[0])  # the position effects alone
            ratios.append(ratio)
            alarms += p < 0.05
            firsts = [next(v for r, v, s in order if r == k and s == "selective") for k in range(rounds)]
            first.append(firsts.count("a"))
        ratios, bias = np.array(ratios), np.abs(np.log(bias))
        out[name] = {"bias_max": float(np.expm1(bias.max())), "bias_over_1pct": float((bias > np.log(1.01)).mean()),
                     "mean_ratio": float(ratios.mean()), "sd_ratio": float(ratios.std()),
                     "alarm_rate": alarms / trials, "a_first_max": max(first), "a_first_min": min(first)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--effect", type=float, default=0.05, help="first run of a round slower by this fraction")
    ap.add_argument("--noise", type=float, default=0.03, help="run-to-run sd of log wall time")
    ap.add_argument("--results", nargs="*", default=[], help="estimate per-position effects from these results")
    args = ap.parse_args(argv)
    if args.results:
        effects = effects_from_results(args.results)
        src = f"estimated from {len(args.results)} results file(s)"
    else:
        effects = np.array([np.log1p(args.effect), 0.0, 0.0, 0.0])
        src = f"synthetic: first run of a round {args.effect:.0%} slower"
    print(f"A/A sessions: {args.trials} per order, {args.rounds} rounds, states {'+'.join(STATES)}, noise sd "
          f"{args.noise:.0%}; position effects ({src}): " + ", ".join(f"{np.expm1(e):+.1%}" for e in effects))
    print("bias: the session's ratio from the position effects alone (no noise); alarms: paired t-test p < 0.05")
    print(f"{'order':10} {'max bias':>9} {'bias > 1%':>10} {'mean b/a':>9} {'sd':>7} {'alarms':>7} "
          f"{'rounds a first':>15}")
    for name, r in study(effects, args.rounds, args.trials, args.noise).items():
        print(f"{name:10} {r['bias_max']:9.2%} {r['bias_over_1pct']:10.1%} {r['mean_ratio']:9.4f} "
              f"{r['sd_ratio']:7.4f} {r['alarm_rate']:7.1%} {r['a_first_min']:>7}..{r['a_first_max']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
