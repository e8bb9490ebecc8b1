"""The text-level API: a model, an engine and a prompt layout. Usable from a notebook or script:

    s = Session.open("qwen2.5-coder-1.5b")
    result, stats = s.filter(texts, ["Is this about sport?"])
"""

import functools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quail.constants import DEFAULT_GPU_MEMORY_UTILIZATION
from quail.errors import QuailError
from quail.executor.engine import Engine, PhysicalPlan
from quail.executor.stats import Stats
from quail.kinds.classify import render as render_classify
from quail.kinds.extract import DEFAULT_INSTRUCTION, DEFAULT_MAX_NEW_TOKENS, json_schema, read_fields
from quail.kinds.extract import render as render_extract
from quail.kinds.filter import render as render_filter
from quail.kinds.join import pair_room
from quail.kinds.join import render as render_join
from quail.kinds.map import render as render_map
from quail.kinds.settings import check_calibration, check_cascade_model
from quail.kinds.words import DEFAULT_QUESTION, SECOND
from quail.model.loader import LoadedModel, load_model
from quail.model.registry import DEFAULT_MODEL, EMBEDDED
from quail.ops.calibration import CONTENT_FREE, column_means, labels_given, yes_given
from quail.ops.classify import ClassifyResult, run_classify
from quail.ops.filter import FilterResult, run_filter
from quail.ops.generate import GenerateResult, Written, run_generate
from quail.ops.grammar import JSON_SEPARATORS, FreeText, Grammar, JsonSchema, llg_tokenizer
from quail.ops.join import JoinResult, run_join
from quail.ops.prompts import MAX_CHARS_PER_TOKEN, PromptLayout
from quail.reuse import Retain, Reuse
from quail.specs import FieldSpec
from quail.store import WRITTEN, answer_key

if TYPE_CHECKING:
    from llguidance import LLTokenizer

    from quail.store import Store


def _reuse(reuse: bool | Reuse) -> Reuse:
    """True: every mechanism; False: compute every prompt from scratch."""
    if isinstance(reuse, Reuse):
        return reuse
    return Reuse() if reuse else Reuse.none()


def _retain(retain: bool | Retain | None) -> Retain | None:
    """True: keep the documents' KV for any later operator of this session, until cleared."""
    if retain is True:
        return Retain()
    return retain or None


@dataclass
class Extraction:
    """An extract's rows: each one's fields by name (None for a truncated row), which were truncated,
    and per row the fields whose written value its column cannot hold (null instead)."""

    values: list[dict | None]
    truncated: list[bool]
    invalid: list[list[str]]
    written: GenerateResult  # the tokens each row wrote


@dataclass
class Mapped:
    texts: list[str]
    truncated: list[bool]
    written: GenerateResult


@dataclass
class Documents:
    """Tokenized documents that fit the model's context, and how many had to be cut."""

    tokens: list[list[int]]
    truncated: int = 0


class Session:
    def __init__(self, loaded: LoadedModel, plan: PhysicalPlan) -> None:
        self.loaded = loaded
        self.engine = Engine(loaded.model, plan)
        self.layout = PromptLayout(loaded.tokenizer, context=loaded.config.max_position)
        self.options: dict = {}  # how Session.open made it: how its peers are opened
        self.peers: dict[str, Session] = {}
        self.peers_lock = threading.Lock()
        self.store: Store | None = None  # the answer store, where a front end opens one

    @classmethod
    def open(cls, model: str = DEFAULT_MODEL, dtype: str = "auto", arena_pages: int | None = None,
             max_batch_tokens: int | None = None, device: str = "auto",
             gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
             say: Callable[[str], None] | None = None) -> "Session":
        """device: auto (CUDA when there is one), cpu, cuda or cuda:N. max_batch_tokens: by default
        per device. The arena is sized from the device's memory unless arena_pages is given. `say`
        hears each start-up phase with its duration: the model loading, the arena sizing and the
        cost-model calibration (measured once per model and batch size, then read from disk)."""
        if arena_pages is not None and arena_pages < 1:
            raise QuailError(f"--arena-pages must be at least 1, got {arena_pages}")
        if max_batch_tokens is not None and max_batch_tokens < 16:
            raise QuailError(f"--max-batch-tokens must be at least 16, got {max_batch_tokens}")
        if not 0 < gpu_memory_utilization <= 1:
            raise QuailError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
        say = say or (lambda _: None)
        say(f"loading {model} ({dtype}, device {device})")
        started = time.perf_counter()
        loaded = load_model(model, dtype, device)
        say(f"loaded {loaded.name} in {time.perf_counter() - started:.1f} s, {loaded.model.dtype} "
            f"({loaded.dtype_why}), attention {loaded.model.attention_name} ({loaded.model.attention_why})")
        started = time.perf_counter()
        plan = PhysicalPlan.for_model(loaded.model, arena_pages, max_batch_tokens, gpu_memory_utilization)
        say(f"arena sized in {time.perf_counter() - started:.1f} s: {plan.arena_pages:,} pages")
        started = time.perf_counter()
        session = cls(loaded, plan)
        say(f"cost model calibrated in {time.perf_counter() - started:.1f} s")
        session.options = dict(dtype=dtype, arena_pages=arena_pages, max_batch_tokens=max_batch_tokens, device=device,
                               gpu_memory_utilization=gpu_memory_utilization, say=say)
        return session

    def peer(self, model: str) -> "Session":
        """Another model in this process, with its own arena, opened as this one was and kept: a
        cascade's larger model."""
        check_cascade_model(self.loaded.name, model, "a cascade")
        with self.peers_lock:
            if model not in self.peers:
                peer = Session.open(model, **self.options)
                if peer.loaded.identity == self.loaded.identity:  # the same bytes under another name
                    raise QuailError(f"a cascade: its model {model!r} is the first model ({self.loaded.name!r}) "
                                     f"under another name; name a larger one")
                peer.store = self.store
                self.peers[model] = peer
            return self.peers[model]

    def changed(self) -> bool:
        """Whether its model's files, or a peer's, changed since they were loaded (model/identity.py)."""
        with self.peers_lock:
            peers = list(self.peers.values())
        return self.loaded.changed() or any(p.changed() for p in peers)

    @property
    def context(self) -> int:
        return self.loaded.config.max_position

    def documents(self, texts: list[str], render: Callable[[list[str]], list[list[int]]], suffix: int,
                  truncate: bool, rows: list[int] | None = None, what: str = "row") -> Documents:
        """Tokenizes texts with `render` (texts -> token lists); `suffix` is the longest question that
        follows a document in one prompt. `rows` are the input row numbers that errors name."""
        limit = self.context - suffix
        out = Documents([])
        if not truncate and (long := next(((i, len(t)) for i, t in zip(rows or range(len(texts)), texts)
                                           if len(t) > self.context * MAX_CHARS_PER_TOKEN), None)):
            raise QuailError(f"{what} {long[0]}: the document is {long[1]:,} characters, far more than the model's "
                             f"context holds ({limit:,} tokens after the question). Use --truncate to cut long "
                             f"documents.")
        for i, tokens in zip(rows or range(len(texts)), render(texts)):  # the layout cuts what it must
            if len(tokens) > limit:
                if not truncate:
                    raise QuailError(
                        f"{what} {i}: the document is {len(tokens)} tokens with its prompt; the model's context "
                        f"leaves {limit} for it after the question. Use --truncate to cut long documents."
                    )
                tokens = tokens[:limit]
                out.truncated += 1
            out.tokens.append(tokens)
        return out

    @property
    def own_calibration(self) -> str:
        """What calibration "auto" means for this model: the registry's choice for an embedded one
        (measured on bench/data), none for any other."""
        model = EMBEDDED.get(self.loaded.name)
        return model.calibration if model else "none"

    def calibrating(self, calibration: str) -> bool:
        try:
            check_calibration(calibration)
        except ValueError as e:
            raise QuailError(str(e)) from None
        return (self.own_calibration if calibration == "auto" else calibration) == "contextual"

    def content_free(self) -> list[list[int]]:
        """The documents contextual calibration asks every question of."""
        return [self.layout.document(text) for text in CONTENT_FREE]

    def _store(self, reuse: bool | Reuse) -> "Store | None":
        return self.store if _reuse(reuse).store else None

    def _calibration(self, calibration: str) -> str:
        return "contextual" if self.calibrating(calibration) else "none"

    def filter_keys(self, questions: list[list[int]], docs: list[list[int]], calibration: str) -> list[list[bytes]]:
        """The answer store's keys of each document's answer to each predicate."""
        cal = self._calibration(calibration)
        asked = [f"filter\x1f{cal}\x1f{q}" for q in questions]
        return [[answer_key(self.loaded.identity, a, d) for a in asked] for d in docs]

    def classify_keys(self, question: list[int], labels: list[list[int]], docs: list[list[int]],
                      calibration: str) -> list[bytes]:
        cal = self._calibration(calibration)
        # labels that begin others are scored as stopping there; answers stored before were not
        ends = "\x1fends" if any(a != b and b[:len(a)] == a for a in labels for b in labels) else ""
        asked = f"classify\x1f{cal}\x1f{question}\x1f{labels}{ends}"
        return [answer_key(self.loaded.identity, asked, d) for d in docs]

    @staticmethod
    def known(store: "Store", keys: list[list[bytes]], touch: bool = True) -> list[list[float | None]]:
        """Per document, each stored answer's single value (a P(yes)), or None."""
        found = store.get([k for row in keys for k in row], 1, touch)
        return [[found[k][0] if k in found else None for k in row] for row in keys]

    def _asked(self, docs: list[list[int]], questions: list[list[int]], threshold: float, reuse: bool | Reuse,
               retain: bool | Retain | None = None, progress: Callable[[int, int], None] | None = None,
               bias: list[float] | None = None, limit: int | None = None,
               calibration: str = "auto") -> tuple[FilterResult, Stats]:
        """run_filter, with the answers the store holds and keeping the new ones."""
        store = self._store(reuse)
        keys = self.filter_keys(questions, docs, calibration) if store is not None else None
        known = self.known(store, keys) if store is not None and keys else None
        result, stats = run_filter(self.engine, docs, questions, self.layout.yes_no, threshold, limit, _reuse(reuse),
                                   _retain(retain), progress, bias, known)
        if store is not None and keys:
            store.put((keys[i][k], [p]) for i, raw in enumerate(result.raw_p_yes) if i not in result.from_store
                      for k, p in enumerate(raw) if p is not None)
        return result, stats

    def filter(self, texts: list[str], predicates: list[str], threshold: float = 0.5, limit: int | None = None,
               reuse: bool | Reuse = True, retain: bool | Retain | None = None, truncate: bool = False,
               progress: Callable[[int, int], None] | None = None, rows: list[int] | None = None,
               calibration: str = "auto") -> tuple[FilterResult, Stats]:
        """calibration: "contextual" divides each predicate's content-free P(yes) out (ops/calibration.py)."""
        questions = render_filter(self.layout, predicates)
        docs = self.documents(texts, self.layout.documents, max(map(len, questions)), truncate, rows)
        bias, probe_stats = None, None
        if self.calibrating(calibration):  # threshold 0: the content-free documents are asked every predicate
            probe, probe_stats = self._asked(self.content_free(), questions, 0.0, reuse, calibration=calibration)
            bias = column_means(probe.p_yes)
        result, stats = self._asked(docs.tokens, questions, threshold, reuse, retain, progress, bias, limit,
                                    calibration)
        stats.rows_truncated = docs.truncated
        return result, stats.merge(probe_stats) if probe_stats else stats

    def _labelled(self, docs: list[list[int]], q: list[int], label_tokens: list[list[int]], reuse: bool | Reuse,
                  retain: bool | Retain | None = None, progress: Callable[[int, int], None] | None = None,
                  calibration: str = "auto") -> tuple[ClassifyResult, Stats]:
        """run_classify, with the answers the store holds and keeping the new ones."""
        store = self._store(reuse)
        keys = self.classify_keys(q, label_tokens, docs, calibration) if store is not None else None
        found = store.get(keys, len(label_tokens)) if store is not None and keys else {}
        result, stats = run_classify(self.engine, docs, q, label_tokens, _reuse(reuse), _retain(retain), progress,
                                     [found.get(k) for k in keys] if keys else None)
        if store is not None and keys:
            store.put((keys[i], p) for i, p in enumerate(result.probabilities) if i not in result.from_store)
        return result, stats

    def classify(self, texts: list[str], labels: list[str], question: str | None = None, reuse: bool | Reuse = True,
                 retain: bool | Retain | None = None, truncate: bool = False,
                 progress: Callable[[int, int], None] | None = None, rows: list[int] | None = None,
                 calibration: str = "auto", descriptions: tuple[str, ...] = ()) -> tuple[ClassifyResult, Stats]:
        q, label_tokens = render_classify(self.layout, question or DEFAULT_QUESTION, labels, descriptions)
        docs = self.documents(texts, self.layout.documents, len(q) + max(map(len, label_tokens)), truncate, rows)
        result, stats = self._labelled(docs.tokens, q, label_tokens, reuse, retain, progress, calibration)
        stats.rows_truncated = docs.truncated
        if self.calibrating(calibration):
            probe, probe_stats = self._labelled(self.content_free(), q, label_tokens, reuse, calibration=calibration)
            bias = column_means(probe.probabilities)
            result.probabilities = [labels_given(p, bias) for p in result.probabilities]
            result.labels = [max(range(len(p)), key=p.__getitem__) for p in result.probabilities]
            stats.merge(probe_stats)
        return result, stats

    def pair_room(self, condition: list[int]) -> int:
        return pair_room(self.context, len(condition))

    def join_keys(self, condition: list[int], anchors: list[list[int]], partners: list[list[int]],
                  calibration: str) -> list[list[bytes]]:
        """The answer store's keys of each pair: a left row, then a right row."""
        cal = self._calibration(calibration)
        asked = f"join\x1f{cal}\x1f{condition}"
        return [[answer_key(self.loaded.identity, asked, a + [-1] + p) for p in partners] for a in anchors]

    def _paired(self, anchors: list[list[int]], partners: list[list[int]], cond: list[int], reuse: bool | Reuse,
                retain: bool | Retain | None = None, progress: Callable[[int, int], None] | None = None,
                calibration: str = "auto") -> tuple[JoinResult, Stats]:
        """run_join, with the answers the store holds and keeping the new ones."""
        store = self._store(reuse)
        keys = self.join_keys(cond, anchors, partners, calibration) if store is not None and partners else None
        known = self.known(store, keys) if store is not None and keys else None
        result, stats = run_join(self.engine, anchors, partners, cond, self.layout.yes_no, _reuse(reuse),
                                 _retain(retain), progress, known)
        if store is not None and keys:
            store.put((keys[i][j], [p]) for i, row in enumerate(result.p_yes) if i not in result.from_store
                      for j, p in enumerate(row))
        return result, stats

    def join(self, left: list[str], right: list[str], condition: str, reuse: bool | Reuse = True,
             retain: bool | Retain | None = None, truncate: bool = False,
             progress: Callable[[int, int], None] | None = None, left_rows: list[int] | None = None,
             right_rows: list[int] | None = None, calibration: str = "auto",
             partner: str = SECOND) -> tuple[JoinResult, Stats]:
        """partner: what the prompt calls a right row ("headline"); the left row is the document.
        calibration: "contextual" divides out each right row's P(yes) against content-free left rows."""
        cond = render_join(self.layout, condition, partner)
        other = self.context - self.pair_room(cond)  # what follows one document of a pair at most
        partners = self.documents(right, lambda texts: self.layout.partners(texts, partner), other, truncate,
                                  right_rows, "right row")
        anchors = self.documents(left, self.layout.documents, other, truncate, left_rows, "left row")
        result, stats = self._paired(anchors.tokens, partners.tokens, cond, reuse, retain, progress, calibration)
        stats.rows_truncated = anchors.truncated + partners.truncated
        if self.calibrating(calibration):
            probe, probe_stats = self._paired(self.content_free(), partners.tokens, cond, reuse,
                                              calibration=calibration)
            bias = column_means(probe.p_yes)
            result.p_yes = [[yes_given(p, b) for p, b in zip(row, bias)] for row in result.p_yes]
            stats.merge(probe_stats)
        return result, stats

    @functools.cached_property
    def _grammar_tokenizer(self) -> "LLTokenizer":
        """The tokenizer as the grammar library reads it: built once (half a second on 152k tokens)."""
        return llg_tokenizer(self.loaded.tokenizer.json(), self.loaded.config.vocab_size, self._stop[0])

    @property
    def _stop(self) -> list[int]:
        stop = self.loaded.tokenizer.stop_ids
        if not stop:
            raise QuailError(f"{self.loaded.name}'s tokenizer has no end-of-text token: it cannot extract or map")
        return stop

    def written_keys(self, asked: str, docs: list[list[int]]) -> list[bytes]:
        """The answer store's keys of each document's written output; `asked` names the kind, its
        prompt, its schema and max_new_tokens."""
        return [answer_key(self.loaded.identity, asked, d) for d in docs]

    def _written(self, texts: list[str], question: list[int], grammar: Grammar, most: int, asked: str,
                 reuse: bool | Reuse, retain: bool | Retain | None, truncate: bool,
                 progress: Callable[[int, int], None] | None, rows: list[int] | None,
                 readable: Callable[[Written], bool] = lambda w: True) -> tuple[GenerateResult, Stats]:
        """run_generate, with the outputs the store holds and keeping the new ones. `readable`: whether
        an output can be read as the kind's result; a stored one that cannot is a miss, a computed
        one that cannot is not stored."""
        docs = self.documents(texts, self.layout.documents, len(question) + most, truncate, rows)
        store = self._store(reuse)
        keys = self.written_keys(asked, docs.tokens) if store is not None else None
        found = store.get(keys, WRITTEN) if store is not None and keys else {}
        known = [self._stored_written(found.get(k), readable) for k in keys] if keys else None
        result, stats = run_generate(self.engine, docs.tokens, question, grammar, most, _reuse(reuse),
                                     _retain(retain), progress, known)
        if store is not None and keys:
            store.put((keys[i], [float(w.truncated), *map(float, w.tokens)]) for i, w in enumerate(result.written)
                      if i not in result.from_store and readable(w))
        stats.rows_truncated = docs.truncated
        return result, stats

    def _stored_written(self, value: list | None, readable: Callable[[Written], bool]) -> Written | None:
        """A stored output, or None where there is none or it holds a token the model lacks or cannot be read."""
        if value is None:
            return None
        w = Written(tuple(int(t) for t in value[1:]), bool(value[0]))
        return w if all(t < self.loaded.config.vocab_size for t in w.tokens) and readable(w) else None

    @staticmethod
    def extract_asked(question: list[int], fields: tuple[FieldSpec, ...], most: int) -> str:
        return (f"extract\x1f{question}\x1f{json.dumps(json_schema(fields), sort_keys=True)}\x1f{most}"
                f"\x1f{JSON_SEPARATORS}")

    @staticmethod
    def map_asked(question: list[int], most: int) -> str:
        return f"map\x1f{question}\x1f{most}"

    def extract(self, texts: list[str], fields: tuple[FieldSpec, ...] | list[FieldSpec],
                instruction: str = DEFAULT_INSTRUCTION, max_new_tokens: int | None = None,
                reuse: bool | Reuse = True, retain: bool | Retain | None = None, truncate: bool = False,
                progress: Callable[[int, int], None] | None = None,
                rows: list[int] | None = None) -> tuple[Extraction, Stats]:
        """Each text's fields (kinds/extract.py: `parse_fields` reads a mapping, a JSON Schema or a
        pydantic model into them), written as JSON held to their schema; a row cut at
        max_new_tokens is truncated and its fields None."""
        fields = tuple(fields)
        most = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        grammar = self.extract_grammar(fields)
        question = render_extract(self.layout, instruction, fields)

        def read(w: Written) -> tuple[dict, list[str]] | None:
            return read_fields(fields, self.loaded.tokenizer.decode(list(w.tokens)))

        result, stats = self._written(texts, question, grammar, most, self.extract_asked(question, fields, most), reuse,
                                      retain, truncate, progress, rows, lambda w: w.truncated or read(w) is not None)
        values: list[dict | None] = []
        invalid: list[list[str]] = []
        for w in result.written:
            got = None if w.truncated else read(w)
            values.append(got[0] if got else None)
            # held to the schema as it was written, it reads back; if not, no field is trusted
            invalid.append(got[1] if got else [] if w.truncated else [f.name for f in fields])
        return Extraction(values, [w.truncated for w in result.written], invalid, result), stats

    def extract_grammar(self, fields: tuple[FieldSpec, ...]) -> JsonSchema:
        return JsonSchema(self._grammar_tokenizer, json_schema(fields), self.loaded.config.vocab_size, self._stop[0])

    def map(self, texts: list[str], instruction: str, max_new_tokens: int | None = None,
            reuse: bool | Reuse = True, retain: bool | Retain | None = None, truncate: bool = False,
            progress: Callable[[int, int], None] | None = None,
            rows: list[int] | None = None) -> tuple[Mapped, Stats]:
        """The text written for each text by `instruction`, to the end of the model's reply; a row cut
        at max_new_tokens is truncated (its text is what was written)."""
        most = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        question = render_map(self.layout, instruction)
        result, stats = self._written(texts, question, FreeText(self._stop), most, self.map_asked(question, most),
                                      reuse, retain, truncate, progress, rows)
        texts_out = [self.loaded.tokenizer.decode(list(w.tokens)).strip() for w in result.written]
        return Mapped(texts_out, [w.truncated for w in result.written], result), stats
