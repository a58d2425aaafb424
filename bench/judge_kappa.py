"""How far the judge's calibration floor separates judges: quadratic-weighted kappa on the shipped
gold set (monitor/data/judge_gold.jsonl) for a random judge, an honest judge that is off by one on
a share of the items, and a harsher judge (every score one lower), over many seeded draws.

    .venv/bin/python -m bench.judge_kappa [--draws 2000]
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

import numpy as np

from monitor.quality.calibration import SHIPPED_GOLD, load_gold, quadratic_kappa

Judge = Callable[[int, random.Random], int]


def random_judge(score: int, rng: random.Random) -> int:
    return rng.randint(1, 5)


def honest_judge(off_share: float) -> Judge:
    def judge(score: int, rng: random.Random) -> int:
        if rng.random() >= off_share:
            return score
        return min(5, max(1, score + rng.choice((-1, 1))))
    return judge


def harsh_judge(score: int, rng: random.Random) -> int:
    return max(1, score - 1)


def kappas(judge: Judge, scores: list[int], draws: int, seed: int) -> np.ndarray:
    rng = random.Random(seed)
    found = [quadratic_kappa(scores, [judge(s, rng) for s in scores]) for _ in range(draws)]
    return np.array([k for k in found if k is not None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    scores = [item.score for item in load_gold(SHIPPED_GOLD)]
    print(f"{len(scores)} known answers; the floor is kappa 0.6")
    print("| judge | kappa mean | p1 | p99 | max |\n|---|---|---|---|---|")
    for name, judge in (("random", random_judge), ("honest, off by one on 40 %", honest_judge(0.4)),
                        ("harsher (every score -1)", harsh_judge)):
        k = kappas(judge, scores, args.draws, args.seed)
        print(f"| {name} | {k.mean():.2f} | {np.quantile(k, 0.01):.2f} | {np.quantile(k, 0.99):.2f} | {k.max():.2f} |")


if __name__ == "__main__":
    main()
