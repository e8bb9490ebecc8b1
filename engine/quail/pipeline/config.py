"""A pipeline: named input tables and operators, from a YAML file or a single-operator command.

    model: qwen2.5-coder-1.5b            # optional
    tables: {reviews: reviews.parquet, products: products.csv}
    operators:
      - name: good
        filter: {input: reviews, column: text, predicates: ["Is it positive?"]}
        output: out/good.parquet
        max_tokens: 5000000              # optional: refused or stopped past it
        review_output: out/unsure.parquet  # optional, with a cascade: the rows inside its band
      - name: topics
        classify: {input: good, column: text, labels: [price, quality]}
        output: out/topics.parquet
      - name: pairs
        join: {left: topics, right: products, left_column: text, right_column: name,
               condition: "The review is about the product"}
        output: out/pairs.parquet
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import yaml

from quail.errors import QuailError
from quail.kinds import KINDS
from quail.model.registry import DEFAULT_MODEL
from quail.pipeline.windows import check_count
from quail.specs import Cascade, OperatorSpec


@dataclass
class Pipeline:
    tables: dict[str, str]  # name -> Parquet or CSV path
    specs: list[OperatorSpec]
    model: str = DEFAULT_MODEL
    stats: dict[str, str] = field(default_factory=dict)  # operator -> where its stats JSON goes
    budgets: dict[str, int | None] = field(default_factory=dict)  # operator -> its max_tokens
    reviews: dict[str, str] = field(default_factory=dict)  # operator -> where the rows inside its band go


TOP_KEYS = frozenset({"model", "tables", "operators"})
OPERATOR_KEYS = frozenset({"name", "output", "stats", "max_tokens", "review_output"})


class _NoAliases(yaml.SafeLoader):
    """A pipeline file has no use for YAML aliases, and nested ones expand without bound (a
    "billion laughs" file): they are refused where they appear."""

    def fetch_alias(self) -> NoReturn:
        raise yaml.scanner.ScannerError(None, None, "aliases (*name) are not allowed in a pipeline file",
                                        self.get_mark())


def _path(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise QuailError(f"{where} must be a file path, got {value!r}")
    return value


def load_pipeline(path: str) -> Pipeline:
    try:
        doc = yaml.load(Path(path).read_text(), Loader=_NoAliases)
    except OSError as e:
        raise QuailError(f"pipeline {path}: {e.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise QuailError(f"pipeline {path}: not valid YAML: {e}") from None
    except RecursionError:
        raise QuailError(f"pipeline {path}: nested too deep to be a pipeline") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("operators"), list) or not doc["operators"]:
        raise QuailError(f"pipeline {path}: needs a list of operators")
    if unknown := set(doc) - TOP_KEYS:
        raise QuailError(f"pipeline {path}: unknown keys {sorted(map(str, unknown))}; allowed: {sorted(TOP_KEYS)}")
    base = Path(path).parent
    tables = doc.get("tables") or {}
    if not isinstance(tables, dict):
        raise QuailError(f"pipeline {path}: tables must map names to files")
    tables = {str(k): str(base / _path(v, f"table {k!r}")) for k, v in tables.items()}
    model = doc.get("model", DEFAULT_MODEL)
    if not isinstance(model, str):
        raise QuailError(f"pipeline {path}: model must be a name or a path, got {model!r}")
    specs, stats, budgets, reviews = [], {}, {}, {}
    for i, op in enumerate(doc["operators"]):
        if not isinstance(op, dict) or "name" not in op:
            raise QuailError(f"pipeline {path}: operator {i} needs a name")
        if isinstance(op["name"], bool) or not isinstance(op["name"], (str, int)):
            raise QuailError(f"pipeline {path}: operator {i}: name must be text, got {op['name']!r}")
        name = str(op["name"])
        if name in tables:  # an input named so would be read as one or the other
            raise QuailError(f"operator {name!r} has the name of a table; rename one of them")
        kinds = [k for k in KINDS if k in op]
        if len(kinds) != 1:
            raise QuailError(f"operator {name!r}: give exactly one of {', '.join(KINDS)}")
        if unknown := set(op) - OPERATOR_KEYS - set(KINDS):
            raise QuailError(f"operator {name!r}: unknown keys {sorted(map(str, unknown))}; allowed: "
                             f"{sorted(OPERATOR_KEYS)} and one of {', '.join(KINDS)}")
        output = str(base / _path(op["output"], f"operator {name!r}: output")) if "output" in op else None
        specs.append(KINDS[kinds[0]].from_settings(name, op[kinds[0]], output))
        if output:
            stats[name] = str(base / _path(op["stats"], f"operator {name!r}: stats")) if "stats" in op \
                else output + ".stats.json"
        elif "stats" in op:
            raise QuailError(f"operator {name!r}: stats needs an output")
        if "review_output" in op:
            reviews[name] = str(base / _path(op["review_output"], f"operator {name!r}: review_output"))
        if "max_tokens" in op:
            budgets[name] = check_count(op["max_tokens"], f"operator {name!r}: max_tokens")
    names = set(tables) | {s.name for s in specs}
    for s in specs:
        for source in s.inputs:
            if source not in names:
                raise QuailError(f"operator {s.name!r}: input {source!r} is neither a table nor an operator")
    pipeline = Pipeline(tables, specs, model, stats, budgets, reviews)
    check_reviews(pipeline)
    return pipeline


def check_reviews(pipeline: Pipeline) -> None:
    for spec in pipeline.specs:
        check_review(pipeline.reviews.get(spec.name), spec.cascade, f"operator {spec.name!r}")


def check_review(review_output: str | None, cascade: Cascade | None, where: str) -> None:
    """A review output takes the rows inside a cascade's band: an operator without one has none."""
    if review_output is not None and cascade is None:
        raise QuailError(f"{where}: review_output takes the rows inside a cascade's band; give the operator a "
                         f"cascade")
