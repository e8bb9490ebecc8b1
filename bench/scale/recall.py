"""A join's certified recall against a simulated oracle (issue 50): pairs asked as a share of the
product, by the product's size, with the certificate's bound and the true recall.

One match a left row; a match's score is N(6, 1) and a non-match's N(0, 1), so the matches' tail
overlaps the noise's top at scale, and a `--hard` share of matches scores N(1.5, 1): barely told
apart from noise. The certificate (engine/quail/planner/recall.py) asks every pair above a cut and
a uniform sample below it; the answers are the planted truth.

    python -m bench scale recall 1000 10000 --seeds 3 --target 0.9 --delta 0.05
"""

import time

import numpy as np

from bench.common.results import parser, write_json
from quail.planner.recall import ScoredProduct, certify
from quail.sampling import predict_asked


def world(rows: int, seed: int, hard: float) -> tuple[ScoredProduct, np.ndarray]:
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((rows, rows), dtype=np.float32)
    partner = rng.permutation(rows)
    scores[np.arange(rows), partner] = rng.standard_normal(rows) + np.where(rng.random(rows) < hard, 1.5, 6.0)
    truth = np.zeros(rows * rows, bool)
    truth[np.arange(rows) * rows + partner] = True
    return ScoredProduct(scores), truth


def run(rows: int, seed: int, hard: float, target: float, delta: float) -> dict:
    product, truth = world(rows, seed, hard)
    started = time.perf_counter()
    out, cert = certify(product, rows, lambda ids: truth[ids], target, delta, seed)
    return {"rows": rows, "seed": seed, "hard": hard, "pairs": cert.pairs, "asked": cert.asked,
            "share_asked": round(cert.asked / cert.pairs, 5), "asked_above": cert.asked_above,
            "sampled_below": cert.sampled_below, "found_below": cert.found_below, "tries": len(cert.tries),
            "recall_lower": round(cert.recall_lower, 4), "recall": round(float(truth[out].sum() / truth.sum()), 4),
            "predicted_asked": predict_asked(cert.pairs, rows, rows, target, delta),
            "seconds": round(time.perf_counter() - started, 2)}


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__, stem="scale-recall")
    ap.add_argument("sizes", nargs="+", type=int, help="rows a side")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--hard", type=float, default=0.0, help="the share of matches scored near noise")
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--delta", type=float, default=0.05)
    args = ap.parse_args(argv)
    runs = [run(n, s, args.hard, args.target, args.delta) for n in args.sizes for s in range(args.seeds)]
    lines = ["| rows a side | seed | pairs | asked | share | certified recall | true recall | tries |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        print(r, flush=True)
        lines.append(f"| {r['rows']:,} | {r['seed']} | {r['pairs']:,} | {r['asked']:,} | {r['share_asked']:.2%} | "
                     f"{r['recall_lower']:.3f} | {r['recall']:.3f} | {r['tries']} |")
    write_json(args, {"target": args.target, "delta": args.delta, "hard": args.hard, "runs": runs},
               markdown="\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
