"""The glossary (docs/design.md, "Glossary"): one word per concept. A retired word used as a name
in engine/ or airflow_quail/ fails here, and so does a reuse mechanism under a retired key."""

import ast
from pathlib import Path

import pytest

from quail.constants import MECHANISMS, mechanisms_of
from quail.executor.stats import Stats
from quail.planner.predict import Prediction

ROOT = Path(__file__).resolve().parents[1]

# retired everywhere: the word no longer names anything in the code
RETIRED = {
    "WindowAnswers", "prefix_sharing", "chain", "_chain", "chains", "peer", "peers", "peers_lock", "large", "big",
    "second", "cascaded", "PhysicalPlan", "dag_plan", "Extraction", "Mapped", "SelectivityStore", "WrittenStore",
    "written_parts", "Identity", "by_identity",
}
# retired as a column of an output table: `escalated` now
RETIRED_COLUMNS = {"cascaded"}
# retired where it meant a table of results: in these folders a name `answers` held one
RESULTS_FOLDERS = ("engine/quail/runtime/", "engine/quail/pipeline/", "engine/quail/worker/")

# (file, name): a use the glossary's retirement does not mean
ALLOWED = {
    ("engine/quail/worker/locations.py", "chain"),  # a TLS certificate chain
}
# #49: files another change still holds; their renames land with it. Remove once it has.


def _names(tree: ast.AST):
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            yield n.lineno, n.id
        elif isinstance(n, ast.Attribute):
            yield n.lineno, n.attr
        elif isinstance(n, ast.arg):
            yield n.lineno, n.arg
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield n.lineno, n.name
        elif isinstance(n, ast.keyword) and n.arg is not None:
            yield n.lineno, n.arg
        elif isinstance(n, ast.alias):
            yield n.lineno, n.asname or n.name.rsplit(".", 1)[-1]
        elif isinstance(n, ast.Constant) and n.value in RETIRED_COLUMNS:
            yield n.lineno, n.value


def _sources() -> list[Path]:
    return sorted(p for d in ("engine", "airflow_quail") for p in (ROOT / d).rglob("*.py"))


def _retired_names(path: Path) -> list[str]:
    rel = str(path.relative_to(ROOT))
    found = []
    for line, name in _names(ast.parse(path.read_text(), str(path))):
        retired = name in RETIRED or (name == "answers" and rel.startswith(RESULTS_FOLDERS))
        if retired and (rel, name) not in ALLOWED:
            found.append(f"{rel}:{line}: {name}")
    return found


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_retired_word_names_anything(path):
    assert _retired_names(path) == [], "retired words (docs/design.md, Glossary):"


def test_the_check_sees_every_kind_of_name():
    code = ("import a.PhysicalPlan as dag_plan\nfrom x import peer\nclass WindowAnswers: ...\n"
            "def large(big, *, second=1): return f(cascaded=1) + o.chain + t['cascaded']\n")
    names = [n for _, n in _names(ast.parse(code))]
    assert set(names) >= {"dag_plan", "peer", "WindowAnswers", "large", "big", "second", "cascaded", "chain"}
    assert names.count("cascaded") == 2  # the keyword and the column


def test_the_mechanisms_are_the_glossarys():
    assert MECHANISMS == ("rewind", "sharing", "retention", "store")


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_mechanism_is_counted_under_a_retired_key(path):
    """tokens_reused["prefix"] or ["answers"], or a credit {"prefix": n}: the mechanisms are MECHANISMS."""
    bad = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value in ("prefix", "answers"):
            value = n.value
            last = value.attr if isinstance(value, ast.Attribute) else \
                value.slice.value if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) else \
                value.id if isinstance(value, ast.Name) else None
            if last in ("tokens_reused", "reused", "r", "credits"):
                bad.append(f"{n.lineno}: [{n.slice.value!r}]")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args \
                and isinstance(n.args[0], ast.Constant) and n.args[0].value in ("prefix", "answers") \
                and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "tokens_reused":
            bad.append(f"{n.lineno}: .get({n.args[0].value!r})")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Seq":
            for arg in n.args:
                if isinstance(arg, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "prefix"
                                                     for k in arg.keys):
                    bad.append(f"{n.lineno}: a credit under 'prefix'")
    assert bad == []


def test_json_of_an_older_quail_reads_under_todays_names():
    old = {"rewind": 1, "prefix": 2, "retention": 3, "answers": 4}
    assert mechanisms_of(old) == {"rewind": 1, "sharing": 2, "retention": 3, "store": 4}
    stats = Stats.from_dict(Stats().to_dict() | {"tokens_naive": 10, "tokens_computed": 0, "tokens_reused": old})
    assert stats.tokens_reused == {"rewind": 1, "sharing": 2, "retention": 3, "store": 4}
    p = Prediction.from_dict({"tokens_naive": 10, "tokens_computed": 0, "tokens_reused": old})
    assert p.tokens_reused == {"rewind": 1, "sharing": 2, "retention": 3, "store": 4}
