"""A map at the text level: the text the model wrote for each row after the document
(ops/generate.py), to its end of turn or max_new_tokens."""

from collections.abc import Callable
from dataclasses import dataclass

from quail.executor.stats import Stats
from quail.kinds.map import asked
from quail.ops.generate import GenerateResult, stored_generate
from quail.ops.grammar import Grammar
from quail.ops.prompts import Documents
from quail.ops.stored import Run


@dataclass
class MapResult:
    """A map's rows: each one's text, and which were cut at max_new_tokens (their text is what was written)."""

    texts: list[str]
    truncated: list[bool]
    written: GenerateResult  # the tokens each row wrote


def run_map(run: Run, docs: Documents, question: list[int], most: int, grammar: Grammar,
            decode: Callable[[list[int]], str], vocab: int) -> tuple[MapResult, Stats]:
    """Each document's text, written after `question` (kinds/map.py `render`) as `grammar` allows
    (ops/grammar.py `Grammars.free_text`: to an end-of-text token), at most `most` tokens; `decode`
    reads the model's tokens as text, of `vocab`."""
    result, stats = stored_generate(run, docs.tokens, question, grammar, most, asked(question, most), vocab)
    texts = [decode(list(w.tokens)).strip() for w in result.written]
    stats.rows_truncated = docs.truncated
    return MapResult(texts, [w.truncated for w in result.written], result), stats
