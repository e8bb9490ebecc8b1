"""Which vectors find a join's candidates: the model's own hidden states (by layer) against a
sentence-transformers model, on FEBRL 4 (bench/common/febrl.py), by how many pairs each needs.

For each left row, is its gold match among its k best-scoring right rows (recall at k); and over
the whole product, the share of pairs that lie at or above the highest score cut holding 90% and
95% of the gold matches (what a certified join asks above its cut). A score is the cosine of the
two rows' vectors, after the mean vector of both tables is taken away (centering).

    python -m bench quality vectors --rows 500 --model qwen2.5-coder-1.5b --depths 0.25 0.5 0.75 1
"""

import time

import numpy as np

from bench.common.febrl import pairs
from bench.common.results import parser, write_json


def figures(left: np.ndarray, right: np.ndarray, partner: np.ndarray) -> dict:
    both = np.concatenate([left, right]).astype(np.float64)
    both -= both.mean(0)
    both /= np.maximum(np.linalg.norm(both, axis=1, keepdims=True), 1e-12)
    scores = both[: len(left)] @ both[len(left):].T
    gold = scores[np.arange(len(left)), partner]
    rank = (scores > gold[:, None]).sum(1)  # right rows scoring above the match
    out = {f"recall_at_{k}": round(float((rank < k).mean()), 4) for k in (1, 3, 10)}
    flat = np.sort(scores.ravel())[::-1]
    for r in (0.9, 0.95):
        cut = np.sort(gold)[::-1][int(np.ceil(r * len(gold))) - 1]
        out[f"share_above_for_{int(r * 100)}"] = round(float(np.searchsorted(-flat, -cut, side="right") / flat.size), 5)
    return out


def quail_vectors(model: str, dtype: str, texts: list[str], depths: list[float]) -> dict[float, tuple]:
    from quail.ops.vectors import run_vectors
    from quail.session import Session

    session = Session.open(model, dtype=dtype)
    docs = session.layout.documents(texts)
    model_ = session.engine.model
    out = {}
    for depth in depths:
        model_.vector_layer = max(1, round(depth * model_.cfg.num_layers))
        started = time.perf_counter()
        result, stats = run_vectors(session.engine, docs, len(session.layout.preamble))
        vectors = result.vectors
        out[depth] = vectors, time.perf_counter() - started, stats.tokens_computed
    return out


def sentence_vectors(name: str, texts: list[str]) -> tuple[np.ndarray, float]:
    from quail.ops.embedding import embedding_model

    started = time.perf_counter()
    return embedding_model(name).encode(texts), time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__, "join-vectors")
    ap.add_argument("--rows", type=int, default=500, help="left rows, each with its duplicate on the right")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--depths", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0],
                    help="the shares of the model's layers after which its hidden states are read")
    ap.add_argument("--embedding", default="all-MiniLM-L6-v2", help="the sentence-transformers model beside it")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    left, right, partner = pairs(args.rows, args.seed)
    rows = []
    for depth, (vectors, seconds, tokens) in quail_vectors(args.model, args.dtype, left + right, args.depths).items():
        rows.append({"vectors": f"{args.model} at {depth:g} of its layers", "seconds": round(seconds, 1),
                     "tokens": tokens} | figures(vectors[: args.rows], vectors[args.rows:], partner))
        print(rows[-1], flush=True)
    vectors, seconds = sentence_vectors(args.embedding, left + right)
    rows.append({"vectors": args.embedding, "seconds": round(seconds, 1)}
                | figures(vectors[: args.rows], vectors[args.rows:], partner))
    print(rows[-1], flush=True)
    write_json(args, {"rows": args.rows, "seed": args.seed, "results": rows})


if __name__ == "__main__":
    main()
