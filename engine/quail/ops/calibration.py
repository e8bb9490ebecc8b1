"""Contextual calibration (Zhao et al., 2021, "Calibrate Before Use"). A model leans towards some
answers whatever the document says; its answers on content-free inputs (an empty document, "N/A",
a placeholder) in the very same prompt measure that lean, per question, and dividing it out
corrects it. The content-free prompts run on the engine like any others, so calibration is a
deterministic function of the question and the model, and reuse never changes it."""

from collections.abc import Sequence

from quail.errors import QuailError
from quail.kinds.settings import check_calibration
from quail.model.registry import EMBEDDED

CONTENT_FREE = ("N/A", "", "[N/A]")


def calibrates(model: str, calibration: str) -> bool:
    """Whether `calibration` means contextual calibration for the model of that name: "auto" is the
    registry's choice for an embedded model (measured on bench/data), none for any other."""
    try:
        check_calibration(calibration)
    except ValueError as e:
        raise QuailError(str(e)) from None
    if calibration == "auto":
        calibration = embedded.calibration if (embedded := EMBEDDED.get(model)) else "none"
    return calibration == "contextual"


def column_means(rows: Sequence[Sequence[float | None]]) -> list[float]:
    """Each question's mean P(yes) over the rows that asked it."""
    asked = [[p for p in column if p is not None] for column in zip(*rows)]
    return [sum(column) / len(column) for column in asked]


def yes_given(p: float, bias: float) -> float:
    """P(yes) with the question's content-free P(yes) divided out of the yes/no pair."""
    bias = min(max(bias, 1e-9), 1 - 1e-9)
    yes, no = p / bias, (1 - p) / (1 - bias)
    return yes / (yes + no)


def labels_given(probs: list[float], bias: list[float]) -> list[float]:
    """Label probabilities with the content-free distribution divided out, renormalised."""
    scaled = [p / max(b, 1e-12) for p, b in zip(probs, bias)]
    total = sum(scaled)
    return [s / total for s in scaled]
