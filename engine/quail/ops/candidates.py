"""A join's product scored by the similarity of its rows' vectors, in blocks: a 10^4 x 10^4 product
is never held at once (10^8 scores would take 400 MB), yet the recall certificate
(planner/recall.py) gets what it asks of a product exactly: how many pairs lie at or above a score,
which ones lie between two scores, and a uniform sample of those below a score.

A score is the cosine of the two rows' vectors (each vector normalized once). One pass over the
blocks builds a histogram of every pair's score at a resolution finer than any cut needs; a cut is
then one of its edges, and what lies at or above it is counted exactly from the histogram. The
pairs between two cuts are found by a second pass that keeps only those, so its memory follows
the pairs asked, not the product."""

import math

import numpy as np

from quail.planner.recall import draw_below

BLOCK = 1024  # left rows a block: BLOCK x right rows of scores at once (80 MB at 10^4 right rows)
BINS = 1 << 16  # score bins over [-1, 1]: a cut falls on an edge, 3e-5 apart


class VectorProduct:
    """The pairs (i, j) of `left` x `right` rows, pair id i * right_rows + j, scored by the cosine of
    their vectors."""

    def __init__(self, left: np.ndarray, right: np.ndarray, block: int = BLOCK) -> None:
        self.left, self.right = _unit(left), _unit(right)
        self.rows = len(self.left), len(self.right)
        self.size = self.rows[0] * self.rows[1]
        self.block = block
        self.edges = np.linspace(-1.0, 1.0, BINS + 1)
        counts = np.zeros(BINS, np.int64)
        for _, scores in self._blocks():
            counts += np.bincount(self._bin(scores).ravel(), minlength=BINS)
        # at_least[b]: pairs whose score lies in bin b or above, so at or above edges[b]
        self.at_least = np.concatenate([np.cumsum(counts[::-1])[::-1], [0]])

    def _blocks(self):
        for lo in range(0, self.rows[0], self.block):
            yield lo, self.left[lo: lo + self.block] @ self.right.T

    def _bin(self, scores: np.ndarray) -> np.ndarray:
        return np.clip(((scores + 1.0) * (BINS / 2)).astype(np.int64), 0, BINS - 1)

    def score(self, ids: np.ndarray) -> np.ndarray:
        i, j = np.divmod(ids, self.rows[1])
        return np.einsum("nd,nd->n", self.left[i], self.right[j])

    def cut_for(self, pairs: int) -> float:
        if pairs <= 0:
            return math.inf
        b = int(np.flatnonzero(self.at_least >= pairs)[-1])  # the highest edge with that many at or above
        return float(self.edges[b])

    def count_at_least(self, cut: float) -> int:
        if cut == math.inf:
            return 0
        if cut == -math.inf:
            return self.size
        return int(self.at_least[int(np.searchsorted(self.edges, cut, side="left"))])

    def between(self, high: float, low: float) -> np.ndarray:
        found = []
        for lo, scores in self._blocks():
            bins = self._bin(scores)
            keep = (bins >= self._edge(low)) & (bins < self._edge(high))
            i, j = np.nonzero(keep)
            found.append((i + lo).astype(np.int64) * self.rows[1] + j)
        return np.concatenate(found) if found else np.empty(0, np.int64)

    def best(self, k: int) -> np.ndarray:
        """Each left row's k best-scoring right rows, best first (ties to the earlier right row):
        [left rows, min(k, right rows)]."""
        k = min(k, self.rows[1])
        out = [np.argsort(-scores, axis=1, kind="stable")[:, :k] for _, scores in self._blocks()]
        return np.concatenate(out) if out else np.empty((0, k), np.int64)

    def _edge(self, cut: float) -> int:
        """The first bin at or above `cut` (an edge of the histogram, as cut_for gives)."""
        if cut == math.inf:
            return BINS + 1
        if cut == -math.inf:
            return -1
        return int(np.searchsorted(self.edges, cut, side="left"))

    def sample_below(self, cut: float, n: int, rng: np.random.Generator, drawn: np.ndarray) -> np.ndarray:
        edge = self._edge(cut)
        return draw_below(self.size, lambda ids: self._bin(self.score(ids)) < edge,
                          min(n, self.size - self.count_at_least(cut)), rng, drawn)


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Normalized, in float64: a pair's score, summed in another order by a block's product and by a
    sample's dot product, then differs by about 1e-16, never by a bin's width (float32's 1e-7 would
    put one sampled pair in 300 in another bin than the blocks did)."""
    v = np.asarray(vectors, np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)
