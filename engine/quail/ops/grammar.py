"""What may come next while an operator writes, chosen greedily: an extract's JSON, held to its
schema by llguidance's grammar (a token that would break it is never chosen), or a map's free text,
to a stop token. Token ids only: the text stays above the session.

llguidance was chosen by measurement (bench/README.md, "Grammar"): on Qwen2.5's 152k vocabulary it
compiles a 5-field schema in about 1 ms and masks a step in about 0.02 ms, and installs as one wheel
with no dependencies."""

import functools
import json
from collections.abc import Sequence
from typing import Protocol

import llguidance
import llguidance.numpy as lt
import numpy as np

from quail.errors import QuailError
from quail.kinds.extract import JSON_SEPARATORS
from quail.model.tokenizer import Tokenizer


class Matcher(Protocol):
    """One row's writing state."""

    def choose(self, logprobs: np.ndarray) -> int:
        """The next token: the likeliest the grammar allows (the first of equals)."""
        ...

    def accept(self, token: int) -> bool:
        """Takes the chosen token; whether it is part of the output (a stop token is not)."""
        ...

    def forced(self) -> int | None:
        """The next token if it is the only one allowed, which greedy choice would take whatever
        the model's log-probs: it is written without a forward pass of its own."""
        ...

    @property
    def stopped(self) -> bool:
        """Whether the output is complete: nothing may follow."""
        ...


class Grammar(Protocol):
    def matcher(self) -> Matcher: ...


class FreeText:
    """Any token, until one of the stop tokens (which ends the text and is not part of it)."""

    def __init__(self, stop: Sequence[int]):
        self.stop = frozenset(stop)

    def matcher(self) -> "TextMatcher":
        return TextMatcher(self.stop)


class TextMatcher:
    def __init__(self, stop: frozenset[int]):
        self._stop = stop
        self.stopped = False

    def choose(self, logprobs: np.ndarray) -> int:
        return int(np.argmax(logprobs))

    def accept(self, token: int) -> bool:
        self.stopped = token in self._stop
        return not self.stopped

    def forced(self) -> int | None:
        return None


def json_grammar(schema: str) -> str:
    """llguidance's grammar for a JSON Schema (given as JSON), written on one line with JSON_SEPARATORS."""
    return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={
        "whitespace_flexible": False, "item_separator": JSON_SEPARATORS[0], "key_separator": JSON_SEPARATORS[1]})


class JsonSchema:
    """A JSON Schema compiled once (per job) for one tokenizer; each row gets its own matcher."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, schema: dict, vocab: int, stop: int):
        self._tokenizer, self._vocab, self._stop = tokenizer, vocab, stop
        self._grammar = json_grammar(json.dumps(schema))
        error = llguidance.LLMatcher.validate_grammar(self._grammar, tokenizer)
        if error:
            raise ValueError(f"the fields' JSON Schema does not compile: {error}")

    def matcher(self) -> "JsonMatcher":
        return JsonMatcher(llguidance.LLMatcher(self._tokenizer, self._grammar), self._vocab, self._stop)


class JsonMatcher:
    def __init__(self, matcher: llguidance.LLMatcher, vocab: int, stop: int):
        self._m = matcher
        self._vocab, self._stop = vocab, stop
        self._mask = lt.allocate_token_bitmask(1, vocab)

    def _allowed(self, vocab: int) -> np.ndarray:
        lt.fill_next_token_bitmask(self._m, self._mask, 0)
        return np.unpackbits(self._mask.view(np.uint8), bitorder="little")[:vocab].astype(bool)

    def choose(self, logprobs: np.ndarray) -> int:
        return int(np.argmax(np.where(self._allowed(len(logprobs)), logprobs, -np.inf)))

    def forced(self) -> int | None:
        only = np.flatnonzero(self._allowed(self._vocab))
        return int(only[0]) if len(only) == 1 else None

    def accept(self, token: int) -> bool:
        if not self._m.consume_token(token):
            raise RuntimeError(f"the grammar refused token {token}, which its mask allowed: {self._m.get_error()}")
        return token != self._stop  # it stops after its last character, before a stop token is chosen

    @property
    def stopped(self) -> bool:
        return self._m.is_stopped()


def llg_tokenizer(tokenizer_json: str, vocab: int, stop: int) -> llguidance.LLTokenizer:
    """llguidance's view of a tokenizer (its tokenizer.json) over the model's `vocab` rows; `stop`
    ends a complete output. Building it takes about half a second on a 152k vocabulary: keep it."""
    return llguidance.LLTokenizer(tokenizer_json, n_vocab=vocab, eos_token=stop)


class Grammars:
    """The grammars one model writes with, over its `vocab` rows: free text to one of its tokenizer's
    end-of-text tokens, or JSON held to a schema. `name` names the model in errors."""

    def __init__(self, tokenizer: Tokenizer, vocab: int, name: str) -> None:
        self.tokenizer, self.vocab, self.name = tokenizer, vocab, name

    @property
    def stop(self) -> list[int]:
        stop = self.tokenizer.stop_ids
        if not stop:
            raise QuailError(f"{self.name}'s tokenizer has no end-of-text token: it cannot extract or map")
        return stop

    @functools.cached_property
    def _llg(self) -> llguidance.LLTokenizer:
        return llg_tokenizer(self.tokenizer.json(), self.vocab, self.stop[0])

    def free_text(self) -> FreeText:
        return FreeText(self.stop)

    def json(self, schema: dict) -> JsonSchema:
        return JsonSchema(self._llg, schema, self.vocab, self.stop[0])
