"""A kind's settings as one pydantic model: the pipeline file, the CLI and the Airflow operators all
build specs through it, so that a setting is typed, checked and named in one place. Its errors
name the operator and the key: `operator 'f': 'threshold' must be a number, got 'abc'`."""

import argparse
import unicodedata
from dataclasses import fields
from typing import Annotated, Any, ClassVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from quail.errors import QuailError
from quail.specs import CALIBRATIONS, Cascade, OperatorSpec


def check_operator_name(name: str) -> None:
    """An operator's name names files (a pipeline's intermediate output in its scratch folder) and
    log lines: it must be one path component, printable. Airflow task ids (letters, digits, `_`,
    `-` and `.`, as in `group.task`) all pass, but `.` and `..`."""
    why = None
    if not isinstance(name, str) or not name.strip():
        why = "is empty" if isinstance(name, str) else "is not text"
    elif bad := [c for c in name if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")]:
        why = f"holds the control character {bad[0]!r}"
    elif bad := [c for c in name if c in "/\\"]:
        why = f"holds the path separator {bad[0]!r}"
    elif name in (".", ".."):
        why = "is a folder's name"
    if why:
        raise QuailError(f"operator name {name!r} {why}: a name names the operator's files, so it must be one "
                         f"path component of printable characters")


def _name(value: object, info: ValidationInfo) -> str:
    """A table, operator or column name: text (a number such as a year is taken as its text)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{info.field_name!r} must be a name, got {value!r}")
    return str(value)


def _texts(value: object, info: ValidationInfo) -> tuple[str, ...]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{info.field_name!r} must be text or a list of texts")
    return tuple(values)


def _number(value: object, info: ValidationInfo) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{info.field_name!r} must be a number, got {value!r}")
    return float(value)


def _maybe_number(value: object, info: ValidationInfo) -> float | None:
    return None if value is None else _number(value, info)


def _count(value: object, info: ValidationInfo) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{info.field_name!r} must be a whole number of rows, got {value!r}")
    return value


def _flag(value: object, info: ValidationInfo) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{info.field_name!r} must be true or false, got {value!r}")
    return value


def _text(value: object, info: ValidationInfo) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{info.field_name!r} must be text, got {value!r}")
    return value


def check_calibration(value: object) -> str:
    """The calibration setting, checked: what every front end's, the session's too, goes through."""
    if value not in CALIBRATIONS:
        raise ValueError(f"'calibration' must be one of {', '.join(CALIBRATIONS)}, got {value!r}")
    return value


def check_cascade_model(model: str, cascade_model: str, where: str) -> None:
    """A cascade's larger model must be another model than the one that answers first."""
    if cascade_model == model:
        raise QuailError(f"{where}: the cascade's model is the first model itself ({model!r}); name a larger one")


def _cascade(value: object, info: ValidationInfo) -> Cascade | None:
    """cascade: {model: NAME, band: [LOW, HIGH]}, or {model: NAME, target: {METRIC: T}, delta: D,
    sample: N} (delta 0.05 and sample 400 by default)."""
    if value is None or isinstance(value, Cascade):
        return value
    shapes = ("{model: NAME, band: [LOW, HIGH]} or {model: NAME, target: {precision|recall|accuracy: T}, "
              "delta: D, sample: ROWS}")
    if not isinstance(value, dict) or "model" not in value or ("band" in value) == ("target" in value) \
            or set(value) - {"model", "band", "target", "delta", "sample"} \
            or ("band" in value and set(value) != {"model", "band"}):
        raise ValueError(f"'cascade' must be {shapes}, got {value!r}")
    model = value["model"]
    if isinstance(model, bool) or not isinstance(model, (str, int)):
        raise ValueError(f"cascade 'model' must be a name, got {model!r}")
    if "band" in value:
        band = value["band"]
        if not (isinstance(band, (list, tuple)) and len(band) == 2 and all(map(_is_number, band))):
            raise ValueError(f"cascade 'band' must be two numbers [LOW, HIGH], got {band!r}")
        return Cascade(str(model), float(band[0]), float(band[1]))
    target, delta, sample = value["target"], value.get("delta", 0.05), value.get("sample", 400)
    if not (isinstance(target, dict) and len(target) == 1 and all(map(_is_number, target.values()))):
        raise ValueError(f"cascade 'target' must be one of {{precision: T}}, {{recall: T}} or {{accuracy: T}}, "
                         f"got {target!r}")
    if not _is_number(delta):
        raise ValueError(f"cascade 'delta' must be a number, got {delta!r}")
    if isinstance(sample, bool) or not isinstance(sample, int):
        raise ValueError(f"cascade 'sample' must be a whole number of rows, got {sample!r}")
    [(metric, t)] = target.items()
    return Cascade(str(model), metric=str(metric), target=float(t), delta=float(delta), sample=sample)


def cascade_from_args(args: argparse.Namespace) -> dict | None:
    """The cascade setting from the CLI's --cascade options (cli/run.py), as a pipeline file gives it."""
    if (args.cascade is None) != (args.cascade_band is None and args.cascade_target is None) \
            or (args.cascade_band is not None and args.cascade_target is not None):
        raise QuailError("--cascade MODEL goes with one of --cascade-band LOW HIGH and --cascade-target METRIC=T")
    if args.cascade_band is not None:
        return {"model": args.cascade, "band": args.cascade_band}
    if args.cascade_target is None:
        return None
    metric, eq, value = args.cascade_target.partition("=")
    try:
        target = {metric: float(value)}
    except ValueError:
        target = None
    if not eq or target is None:
        raise QuailError(f"--cascade-target must be METRIC=T, got {args.cascade_target!r}")
    return {"model": args.cascade, "target": target, "delta": args.cascade_delta, "sample": args.cascade_sample}


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


Name = Annotated[str, BeforeValidator(_name)]
Texts = Annotated[tuple[str, ...], BeforeValidator(_texts)]
Number = Annotated[float, BeforeValidator(_number)]
MaybeNumber = Annotated[float | None, BeforeValidator(_maybe_number)]
Count = Annotated[int | None, BeforeValidator(_count)]
Flag = Annotated[bool, BeforeValidator(_flag)]
Text = Annotated[str | None, BeforeValidator(_text)]
Calibration = Annotated[str, BeforeValidator(check_calibration)]
CascadeSetting = Annotated[Cascade | None, BeforeValidator(_cascade)]


class Settings(BaseModel):
    """One kind's settings; a subclass names its fields and builds the spec."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True,
                              validate_default=False)
    kind: ClassVar[str]
    question_word: ClassVar[str]  # what its questions are called in messages: predicate, question, condition
    cascade_metrics: ClassVar[tuple[str, ...]]  # the targets a cascade's band can be chosen for

    @classmethod
    def parse(cls, body: dict, where: str, flags: dict[str, str] | None = None) -> "Settings":
        """The settings from a mapping (a pipeline file's, or an operator's arguments), or a
        QuailError naming `where` and the key. `flags`: what the command line calls a setting,
        for its messages."""
        if not isinstance(body, dict):
            raise QuailError(f"{where}: {cls.kind} must be a mapping of its settings")
        try:
            return cls.model_validate(body, context={"flags": flags or {}})
        except ValidationError as e:
            raise QuailError(f"{where}: {cls._reason(e, body)}") from None

    @classmethod
    def of_spec(cls, spec: OperatorSpec, where: str) -> "Settings":
        """The settings a spec that arrived whole (a job submission, a plan) stands for, checked as a
        pipeline file's are. A spec field the kind does not take, set, is refused as an unknown key."""
        body = cls.body(spec)
        settings = cls.parse(body, where)
        rebuilt = settings.spec(spec.name, spec.output)
        if foreign := sorted(f.name for f in fields(spec) if getattr(spec, f.name) != getattr(rebuilt, f.name)):
            raise QuailError(f"{where}: unknown {cls.kind} keys {foreign}; allowed: {sorted(cls.model_fields)}")
        return settings

    @classmethod
    def body(cls, spec: OperatorSpec) -> dict:
        """The settings mapping that builds `spec`."""
        raise NotImplementedError

    @model_validator(mode="after")
    def _checked(self, info: ValidationInfo) -> "Settings":
        self.check((info.context or {}).get("flags", {}))
        return self

    def check(self, flags: dict[str, str]) -> None:
        """The checks across a kind's settings (ranges, shapes), as ValueErrors. `flags` names a setting
        as the command line does."""
        self.check_questions(self.questions(), flags.get("questions"))
        if (threshold := getattr(self, "threshold", None)) is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold {threshold} is outside [0, 1]")
        self.check_cascade()

    def questions(self) -> tuple[str, ...]:
        raise NotImplementedError

    def check_questions(self, questions: tuple[str, ...], flag: str | None) -> None:
        word = self.question_word
        if not questions:
            raise ValueError(f"give at least one {word}")
        for i, q in enumerate(questions, 1):
            if not q.strip():
                raise ValueError(f"{flag or word} {i} is empty; give at least one non-empty {word}, and none empty")

    def check_cascade(self) -> None:
        c: Cascade | None = getattr(self, "cascade", None)
        if c is None:
            return
        if not c.model.strip():
            raise ValueError("cascade: name the larger model")
        if c.target is not None:
            if c.metric not in self.cascade_metrics:
                raise ValueError(f"cascade target {c.metric!r}: a {self.kind}'s is one of "
                                 f"{', '.join(self.cascade_metrics)}")
            if not 0.0 < c.target < 1.0 or not 0.0 < c.delta < 1.0:
                raise ValueError(f"cascade target {c.target} and delta {c.delta} must each lie in (0, 1)")
            if c.sample < 1:
                raise ValueError(f"cascade sample must be at least 1 row, got {c.sample}")
        if (c.low is None) != (c.high is None) or (c.low is None and c.target is None):
            raise ValueError("cascade: give a band or a target")
        if c.low is not None and c.high is not None and not 0.0 <= c.low <= c.high <= 1.0:
            raise ValueError(f"cascade band [{c.low}, {c.high}] must be LOW <= HIGH within [0, 1]")

    @classmethod
    def check_one(cls, key: str, value: object, where: str) -> Any:
        """One setting alone, checked as the model checks it: what an operator can check when its DAG is
        parsed, before its templated settings are rendered."""
        field = cls.model_fields[key]
        try:
            # the field's type is known only at run time: the adapter is built from it there
            return TypeAdapter(cast(Any, Annotated)[(field.annotation, *field.metadata)]).validate_python(value)
        except ValidationError as e:
            raise QuailError(f"{where}: {cls._reason(e, {key: value})}") from None

    @classmethod
    def _reason(cls, e: ValidationError, body: dict) -> str:
        errors = e.errors()
        extra = sorted(str(x["loc"][0]) for x in errors if x["type"] == "extra_forbidden")
        if extra:
            return f"unknown {cls.kind} keys {extra}; allowed: {sorted(cls.model_fields)}"
        first = errors[0]
        if first["type"] == "missing":
            return f"{cls.kind} needs {first['loc'][0]!r}"
        cause = first.get("ctx", {}).get("error")
        return str(cause) if cause is not None else f"{first['loc'][0]!r}: {first['msg']}"

    def spec(self, name: str, output: str | None) -> OperatorSpec:
        raise NotImplementedError
