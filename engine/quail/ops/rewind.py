"""A filter's decisions from its predicates' probabilities, as rewind takes them: a row passes
when every predicate holds, and the next predicate is asked only if the ones before held. Pure: no
engine, so that a prediction can decide rows the answer store holds."""

from quail.ops.calibration import yes_given


def passed(probs: list[float], questions: list, threshold: float) -> bool:
    return len(probs) == len(questions) and probs[-1] >= threshold


def calibrated(raw: list[float], bias: list[float] | None) -> list[float]:
    return raw if bias is None else [yes_given(p, b) for p, b in zip(raw, bias)]


def decided(raw: list[float | None], questions: list[list[int]], threshold: float,
            bias: list[float] | None) -> list[float] | None:
    """The raw P(yes) that decide a row under this threshold (rewind stops at the first that
    fails), if the stored ones reach that far; else None."""
    known: list[float] = []
    for k in range(len(questions)):
        p = raw[k] if k < len(raw) else None
        if p is None:
            return None
        known.append(p)
        if calibrated(known, bias)[-1] < threshold:
            return known
    return known
