"""The text-level API: a model, an engine and a prompt layout. Usable from a notebook or script:

    s = Session.open("qwen2.5-coder-1.5b")
    result, stats = s.filter(texts, ["Is this about sport?"])

Each entry point renders its kind's prompts (kinds/<kind>.py), fits the documents to the context
and runs its kind's op with the answer store (ops/<kind>.py, ops/stored.py); it holds no kind's
keys, defaults or results (docs/adding-a-kind.md)."""

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from quail.constants import DEFAULT_GPU_MEMORY_UTILIZATION
from quail.errors import QuailError
from quail.executor.engine import Engine, PhysicalSettings
from quail.executor.memory import check_settings
from quail.executor.stats import Stats
from quail.kinds.classify import render as render_classify
from quail.kinds.extract import DEFAULT_INSTRUCTION, json_schema
from quail.kinds.extract import render as render_extract
from quail.kinds.filter import render as render_filter
from quail.kinds.join import pair_room
from quail.kinds.join import render as render_join
from quail.kinds.map import render as render_map
from quail.kinds.settings import check_cascade_model
from quail.kinds.words import DEFAULT_QUESTION, SECOND
from quail.kinds.writes import most_written
from quail.model.loader import LoadedModel, load_model
from quail.model.registry import DEFAULT_MODEL
from quail.ops.calibration import CONTENT_FREE, calibrates
from quail.ops.classify import ClassifyResult, stored_classify
from quail.ops.extract import ExtractResult, run_extract
from quail.ops.filter import FilterResult, stored_filter
from quail.ops.grammar import Grammars
from quail.ops.join import JoinResult, stored_join
from quail.ops.map import MapResult, run_map
from quail.ops.prompts import PromptLayout, fit
from quail.ops.stored import Run, Stored
from quail.ops.vectors import VectorResult, stored_vectors
from quail.reuse import Retain, Reuse
from quail.specs import FieldSpec

if TYPE_CHECKING:
    from quail.store import Store


class Session:
    def __init__(self, loaded: LoadedModel, settings: PhysicalSettings) -> None:
        self.loaded = loaded
        self.engine = Engine(loaded.model, settings)
        self.layout = PromptLayout(loaded.tokenizer, context=loaded.config.max_position)
        self.grammars = Grammars(loaded.tokenizer, loaded.config.vocab_size, loaded.name)  # an extract's, a map's
        self.options: dict = {}  # how Session.open made it: how its cascade models are opened
        self.cascade_models: dict[str, Session] = {}
        self.cascade_lock = threading.Lock()
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
        check_settings(arena_pages, max_batch_tokens, gpu_memory_utilization)
        say = say or (lambda _: None)
        say(f"loading {model} ({dtype}, device {device})")
        started = time.perf_counter()
        loaded = load_model(model, dtype, device)
        read = "loaded" if loaded.model.weights_loaded else "opened"
        say(f"{read} {loaded.name} in {time.perf_counter() - started:.1f} s, {loaded.model.dtype} "
            f"({loaded.dtype_why}), attention {loaded.model.attention_name} ({loaded.model.attention_why})"
            + ("" if loaded.model.weights_loaded else "; its weights are read at their first use"))
        started = time.perf_counter()
        settings = PhysicalSettings.for_model(loaded.model, arena_pages, max_batch_tokens, gpu_memory_utilization)
        say(f"arena sized in {time.perf_counter() - started:.1f} s: {settings.arena_pages:,} pages")
        started = time.perf_counter()
        session = cls(loaded, settings)
        say(f"cost model calibrated in {time.perf_counter() - started:.1f} s")
        session.options = dict(dtype=dtype, arena_pages=arena_pages, max_batch_tokens=max_batch_tokens, device=device,
                               gpu_memory_utilization=gpu_memory_utilization, say=say)
        return session

    def cascade_model(self, model: str) -> "Session":
        """Another model in this process, with its own arena, opened as this one was and kept: a
        cascade's larger model."""
        check_cascade_model(self.loaded.name, model, "a cascade")
        with self.cascade_lock:
            if model not in self.cascade_models:
                opened = Session.open(model, **self.options)
                if opened.loaded.identity == self.loaded.identity:  # the same bytes under another name
                    raise QuailError(f"a cascade: its model {model!r} is the first model ({self.loaded.name!r}) "
                                     f"under another name; name a larger one")
                opened.store = self.store
                self.cascade_models[model] = opened
            return self.cascade_models[model]

    def changed(self) -> bool:
        """Whether its model's files, or a cascade model's, changed since they were loaded (model/identity.py)."""
        with self.cascade_lock:
            models = list(self.cascade_models.values())
        return self.loaded.changed() or any(p.changed() for p in models)

    @property
    def context(self) -> int:
        return self.loaded.config.max_position

    def calibrating(self, calibration: str) -> bool:
        return calibrates(self.loaded.name, calibration)

    def content_free(self) -> list[list[int]]:
        """The documents contextual calibration asks every question of."""
        return [self.layout.document(text) for text in CONTENT_FREE]

    def _run(self, reuse: bool | Reuse, retain: bool | Retain | None,
             progress: Callable[[int, int], None] | None) -> Run:
        """reuse True: every mechanism; False: compute every prompt from scratch. retain True: keep the
        documents' KV for any later operator of this session, until cleared."""
        reuse = reuse if isinstance(reuse, Reuse) else Reuse() if reuse else Reuse.none()
        stored = Stored(self.store, self.loaded.identity) if self.store is not None and reuse.store else None
        return Run(self.engine, reuse, Retain() if retain is True else retain or None, progress, stored)

    def _probes(self, calibration: str) -> list[list[int]] | None:
        """The content-free documents, where this model calibrates."""
        return self.content_free() if self.calibrating(calibration) else None

    def filter(self, texts: list[str], predicates: list[str], threshold: float = 0.5, limit: int | None = None,
               reuse: bool | Reuse = True, retain: bool | Retain | None = None, truncate: bool = False,
               progress: Callable[[int, int], None] | None = None, rows: list[int] | None = None,
               calibration: str = "auto") -> tuple[FilterResult, Stats]:
        """calibration: "contextual" divides each predicate's content-free P(yes) out (ops/calibration.py)."""
        questions = render_filter(self.layout, predicates)
        docs = fit(texts, self.layout.documents, self.context, max(map(len, questions)), truncate, rows)
        return stored_filter(self._run(reuse, retain, progress), docs, questions, self.layout.yes_no, threshold, limit,
                             self._probes(calibration))

    def classify(self, texts: list[str], labels: list[str], question: str | None = None, reuse: bool | Reuse = True,
                 retain: bool | Retain | None = None, truncate: bool = False,
                 progress: Callable[[int, int], None] | None = None, rows: list[int] | None = None,
                 calibration: str = "auto", descriptions: tuple[str, ...] = ()) -> tuple[ClassifyResult, Stats]:
        q, label_tokens = render_classify(self.layout, question or DEFAULT_QUESTION, labels, descriptions)
        docs = fit(texts, self.layout.documents, self.context, len(q) + max(map(len, label_tokens)), truncate, rows)
        return stored_classify(self._run(reuse, retain, progress), docs, q, label_tokens, self._probes(calibration))

    def join(self, left: list[str], right: list[str], condition: str, reuse: bool | Reuse = True,
             retain: bool | Retain | None = None, truncate: bool = False,
             progress: Callable[[int, int], None] | None = None, left_rows: list[int] | None = None,
             right_rows: list[int] | None = None, calibration: str = "auto", partner: str = SECOND,
             pairs: list[list[int]] | None = None, condition_first: bool = True,
             bias: dict[int, float] | None = None) -> tuple[JoinResult, Stats]:
        """partner: what the prompt calls a right row ("headline"); the left row is the document.
        calibration: "contextual" divides out each right row's P(yes) against content-free left rows.
        pairs: per left row, the right rows asked (its row of P(yes) in that order); None: every one.
        bias: the right rows' content-free P(yes) known from earlier calls (ops/join.py stored_join)."""
        cond = render_join(self.layout, condition, partner, condition_first)
        other = self.context - pair_room(self.context, len(cond))  # what follows one document of a pair at most
        partners = fit(right, lambda texts: self.layout.partners(texts, partner), self.context, other, truncate,
                       right_rows, "right row")
        anchors = fit(left, self.layout.documents, self.context, other, truncate, left_rows, "left row")
        return stored_join(self._run(reuse, retain, progress), anchors, partners, cond, self.layout.yes_no,
                           self._probes(calibration), pairs, bias)

    def vectors(self, texts: list[str], reuse: bool | Reuse = True, retain: bool | Retain | None = None,
                truncate: bool = False, rows: list[int] | None = None) -> tuple[VectorResult, Stats]:
        """Each text's vector from the model's own hidden states, read as a plain document (ops/vectors.py)."""
        run, docs = self._run(reuse, retain, None), fit(texts, self.layout.documents, self.context, 0, truncate, rows)
        return stored_vectors(run, docs.tokens, len(self.layout.preamble), self.engine.model.vector_layer)

    def extract(self, texts: list[str], fields: tuple[FieldSpec, ...] | list[FieldSpec],
                instruction: str = DEFAULT_INSTRUCTION, max_new_tokens: int | None = None,
                reuse: bool | Reuse = True, retain: bool | Retain | None = None, truncate: bool = False,
                progress: Callable[[int, int], None] | None = None,
                rows: list[int] | None = None) -> tuple[ExtractResult, Stats]:
        """Each text's fields (kinds/extract.py: `parse_fields` reads a mapping, a JSON Schema or a
        pydantic model into them), written as JSON held to their schema; a row cut at
        max_new_tokens is truncated and its fields None."""
        fields, most = tuple(fields), most_written(max_new_tokens)
        grammar, question = self.grammars.json(json_schema(fields)), render_extract(self.layout, instruction, fields)
        docs = fit(texts, self.layout.documents, self.context, len(question) + most, truncate, rows)
        return run_extract(self._run(reuse, retain, progress), docs, question, fields, most, grammar,
                           self.loaded.tokenizer.decode, self.grammars.vocab)

    def map(self, texts: list[str], instruction: str, max_new_tokens: int | None = None,
            reuse: bool | Reuse = True, retain: bool | Retain | None = None, truncate: bool = False,
            progress: Callable[[int, int], None] | None = None,
            rows: list[int] | None = None) -> tuple[MapResult, Stats]:
        """The text written for each text by `instruction`, to the end of the model's reply; a row cut
        at max_new_tokens is truncated (its text is what was written)."""
        most, grammar = most_written(max_new_tokens), self.grammars.free_text()
        question = render_map(self.layout, instruction)
        docs = fit(texts, self.layout.documents, self.context, len(question) + most, truncate, rows)
        return run_map(self._run(reuse, retain, progress), docs, question, most, grammar, self.loaded.tokenizer.decode,
                       self.grammars.vocab)
