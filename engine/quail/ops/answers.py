import numpy as np


def p_yes(logprobs: np.ndarray, n_yes: int) -> float:
    """P(yes) normalised over the yes/no answer-token variants; logprobs holds yes ids, then no ids."""
    lp = logprobs.astype(np.float64)
    yes, no = np.logaddexp.reduce(lp[:n_yes]), np.logaddexp.reduce(lp[n_yes:])
    return float(1.0 / (1.0 + np.exp(no - yes)))


def label_probabilities(scores: list[float]) -> list[float]:
    s = np.asarray(scores, dtype=np.float64)
    e = np.exp(s - s.max())
    return (e / e.sum()).tolist()
