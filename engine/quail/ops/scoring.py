import numpy as np


def p_yes(logprobs: np.ndarray, n_yes: int) -> float:
    """P(yes) normalised over the yes/no answer-token variants; logprobs holds yes ids, then no ids."""
    lp = logprobs.astype(np.float64)
    yes, no = np.logaddexp.reduce(lp[:n_yes]), np.logaddexp.reduce(lp[n_yes:])
    return float(1.0 / (1.0 + np.exp(no - yes)))


def label_scores(labels: list[list[int]], token_logprobs: list[list[float]]) -> list[float]:
    """Each label's log-probability as the whole answer. token_logprobs[i]: the log-prob of each of
    label i's tokens, teacher-forced. A label whose tokens begin another's ("news" of "news report")
    would otherwise always outscore it, since the longer one's probability is its own times more
    factors below 1: it keeps only the mass of not going on towards a longer label, read from the
    longer labels' next tokens. Labels that begin no other keep their full-sequence score."""
    scores = []
    for i, label in enumerate(labels):
        score = float(np.sum(np.asarray(token_logprobs[i], dtype=np.float64)))
        n = len(label)
        onward = {labels[j][n]: token_logprobs[j][n] for j in range(len(labels))
                  if len(labels[j]) > n and labels[j][:n] == label}
        if onward:
            going_on = float(np.exp(np.asarray(list(onward.values()), dtype=np.float64)).sum())
            score += float(np.log1p(-going_on)) if going_on < 1.0 else -np.inf
        scores.append(score)
    return scores


def label_probabilities(scores: list[float]) -> list[float]:
    s = np.asarray(scores, dtype=np.float64)
    e = np.exp(s - s.max())
    return (e / e.sum()).tolist()
