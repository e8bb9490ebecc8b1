"""An extract at the text level: each row's fields, read from the JSON the model wrote after the
document (ops/generate.py), held to their schema as it was written (ops/grammar.py), as their
columns hold them (kinds/extract.py `read_fields`)."""

from collections.abc import Callable
from dataclasses import dataclass

from quail.executor.stats import Stats
from quail.kinds.extract import asked, read_fields
from quail.ops.generate import GenerateResult, Written, stored_generate
from quail.ops.grammar import Grammar
from quail.ops.prompts import Documents
from quail.ops.stored import Run
from quail.specs import FieldSpec


@dataclass
class ExtractResult:
    """An extract's rows: each one's fields by name (None for a truncated row), which were truncated,
    and per row the fields whose written value its column cannot hold (null instead)."""

    values: list[dict | None]
    truncated: list[bool]
    invalid: list[list[str]]
    written: GenerateResult  # the tokens each row wrote


def run_extract(run: Run, docs: Documents, question: list[int], fields: tuple[FieldSpec, ...], most: int,
                grammar: Grammar, decode: Callable[[list[int]], str], vocab: int) -> tuple[ExtractResult, Stats]:
    """Each document's fields, written after `question` (kinds/extract.py `render`) as JSON that
    `grammar` holds to their schema (ops/grammar.py `Grammars.json`), at most `most` tokens; `decode`
    reads the model's tokens as text, of `vocab`. A row cut at `most` is truncated, its fields None;
    the answer store keeps the outputs that read back."""
    def read(w: Written) -> tuple[dict, list[str]] | None:
        return read_fields(fields, decode(list(w.tokens)))

    result, stats = stored_generate(run, docs.tokens, question, grammar, most, asked(question, fields, most), vocab,
                                    lambda w: w.truncated or read(w) is not None)
    values: list[dict | None] = []
    invalid: list[list[str]] = []
    for w in result.written:
        got = None if w.truncated else read(w)
        values.append(got[0] if got else None)
        # held to the schema as it was written, it reads back; if not, no field is trusted
        invalid.append(got[1] if got else [] if w.truncated else [f.name for f in fields])
    stats.rows_truncated = docs.truncated
    return ExtractResult(values, [w.truncated for w in result.written], invalid, result), stats
