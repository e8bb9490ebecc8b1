"""What a user would otherwise write, asked the same prompts as Quail (the same token ids, the same
reads, the same decision rule). A stage is one operator: its documents and its questions.

(a) transformers, one prompt at a time, logits_to_keep; (b) transformers, left-padded batches of
8, one predicate level at a time; (c) transformers with a hand-rolled prefix cache, the document
once and a copy of its DynamicCache per question; (d) llama-cpp-python on the same GGUF file with
its automatic prefix reuse (the longest common prefix with the previous prompt). (c) and (d) ask
document by document, so a document's questions follow each other and their caches hit.
"""

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from quail.model.loader import load_weights, model_path
from quail.model.registry import embedded_path
from quail.ops.scoring import p_yes
from quail.session import Session


@dataclass
class Question:
    """Tokens after the document; `score` maps the log-probs of the last `keep` positions to scores,
    one per label for a classify question (`labels` says which)."""
    tokens: list[int]
    keep: int
    score: Callable[[np.ndarray], list[float]]
    labels: list[int] = field(default_factory=list)


def yes_no(s: Session, question: list[int]) -> Question:
    ids, n_yes = s.layout.yes_no.ids, len(s.layout.yes_no.yes)
    return Question(question, 1, lambda lp: [p_yes(lp[-1][ids], n_yes)])


def label_questions(s: Session, question: str, labels: list[str]) -> list[Question]:
    """Quail's classify reads: every label's first token after the question, then each longer
    label's later tokens by teacher forcing."""
    head = s.layout.label_question(question, labels)
    tokens = [s.layout.label(label) for label in labels]
    single = [i for i, t in enumerate(tokens) if len(t) == 1]
    out = [Question(head, 1, lambda lp: [lp[-1][tokens[i][0]] for i in single], single)] if single else []
    for i, t in enumerate(tokens):
        if len(t) > 1:
            out.append(Question(head + t[:-1], len(t), lambda lp, t=t: [sum(lp[j][x] for j, x in enumerate(t))], [i]))
    return out


@dataclass
class Stage:
    name: str
    docs: list[list[int]]
    questions: list[Question]
    kind: str  # "filter": chain mode; "join": every pair; "classify": the best label of every question's scores
    threshold: float = 0.0
    rows: list[int] = field(default_factory=list)  # the workload's row of each document (keys the decisions)


def decide(stage: Stage, ask, doc_major: bool) -> dict:
    """ask(pairs of (document, question)) -> scores per pair. The decisions, keyed by
    (stage, row[, partner])."""
    rows = stage.rows or list(range(len(stage.docs)))
    nq = len(stage.questions)
    if stage.kind == "filter":
        alive = list(range(len(stage.docs)))
        if doc_major:
            alive = [d for d in alive if all(ask([(d, q)])[0][0] >= stage.threshold for q in range(nq))]
        else:
            for q in range(nq):
                scores = ask([(d, q) for d in alive])
                alive = [d for d, s in zip(alive, scores) if s[0] >= stage.threshold]
        return {(stage.name, rows[d]): d in set(alive) for d in range(len(stage.docs))}
    pairs = [(d, q) for d in range(len(stage.docs)) for q in range(nq)]
    scores = ask(pairs)
    if stage.kind == "join":
        return {(stage.name, rows[d], q): s[0] >= stage.threshold for (d, q), s in zip(pairs, scores)}
    best = {}
    for d in range(len(stage.docs)):
        by_label = {label: x for question, s in zip(stage.questions, scores[d * nq:(d + 1) * nq])
                    for label, x in zip(question.labels, s)}
        best[(stage.name, rows[d])] = max(by_label, key=by_label.get)
    return best


def transformers_model(name: str, dtype):
    """The baseline a user writes: the model in transformers, with the same dequantized weights as
    Quail's (not transformers' packed-GGUF path, whose kernels dequantize on every matmul)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = embedded_path(name)
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path.parent, gguf_file=path.name),
                                          dtype=dtype).eval()
    _, weights, _ = load_weights(model_path(name))
    missing, unexpected = hf.load_state_dict(dict(weights), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    hf.tie_weights()
    return hf


def left_padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """A transformers batch: input ids and attention mask, padded on the left so that every row's
    last positions line up."""
    width = max(map(len, rows))
    return (torch.tensor([[0] * (width - len(r)) + r for r in rows]),
            torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows]))


def _log_probs(logits: torch.Tensor) -> np.ndarray:
    return torch.log_softmax(logits.float(), -1).cpu().numpy()


class Transformers:
    """(a), (b) and (c) share one model; `computed` counts the tokens each run feeds it, and
    `scores` keeps each (document, question)'s first score (the GPU check compares them)."""

    def __init__(self, hf, device: torch.device = torch.device("cpu")):
        self.hf, self.device = hf, device
        self.computed = 0
        self.scores: dict[tuple[int, int], float] = {}

    def _score(self, question: "Question", logits: torch.Tensor, key: tuple[int, int]) -> list:
        out = question.score(_log_probs(logits))
        self.scores[key] = out[0]
        return out

    def one_at_a_time(self, stage: Stage):
        def ask(pairs):
            out = []
            for d, q in pairs:
                question = stage.questions[q]
                ids = stage.docs[d] + question.tokens
                logits = self.hf(input_ids=torch.tensor([ids], device=self.device),
                                 logits_to_keep=question.keep).logits[0]
                self.computed += len(ids)
                out.append(self._score(question, logits, (d, q)))
            return out
        return ask, False

    def batches(self, stage: Stage, size: int = 8):
        def ask(pairs):
            out = []
            for lo in range(0, len(pairs), size):
                batch = pairs[lo:lo + size]
                rows = [stage.docs[d] + stage.questions[q].tokens for d, q in batch]
                keep = max(stage.questions[q].keep for _, q in batch)
                ids, mask = left_padded(rows)
                logits = self.hf(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                 logits_to_keep=keep).logits
                self.computed += sum(map(len, rows))
                for (d, q), x in zip(batch, logits):
                    out.append(self._score(stage.questions[q], x[keep - stage.questions[q].keep:], (d, q)))
            return out
        return ask, False

    def prefix_cache(self, stage: Stage):
        from transformers import DynamicCache

        current = {}

        def ask(pairs):
            out = []
            for d, q in pairs:
                if current.get("doc") != d:
                    cache = DynamicCache()
                    self.hf(input_ids=torch.tensor([stage.docs[d]]), cache=cache, logits_to_keep=1)
                    self.computed += len(stage.docs[d])
                    current.update(doc=d, cache=cache)
                question = stage.questions[q]
                logits = self.hf(input_ids=torch.tensor([question.tokens]), logits_to_keep=question.keep,
                                 cache=copy.deepcopy(current["cache"])).logits[0]
                self.computed += len(question.tokens)
                out.append(question.score(_log_probs(logits)))
            return out
        return ask, True


class LlamaCpp:
    """(d): one llama.cpp context kept across the workload's stages, as a user's loop would."""

    def __init__(self, model: str):
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(embedded_path(model)), n_ctx=2048, n_threads=torch.get_num_threads(),
                         verbose=False)
        self.computed = 0

    def _last_logits(self) -> torch.Tensor:
        # without logits_all, 0.3.36 keeps only the last evaluated token's logits, in the context
        last = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))
        return torch.from_numpy(last.copy())

    def prefix_reuse(self, stage: Stage):
        llm = self.llm

        def ask(pairs):
            out = []
            for d, q in pairs:
                question = stage.questions[q]
                ids = stage.docs[d] + question.tokens
                cached = llm.input_ids[:llm.n_tokens]
                same = next((i for i, (a, b) in enumerate(zip(cached, ids)) if a != b), min(len(cached), len(ids)))
                head = len(ids) - question.keep + 1  # the last `keep` positions are read one at a time
                llm.n_tokens = min(same, head - 1)
                llm.eval(ids[llm.n_tokens:head])
                rows = [self._last_logits()]
                for t in ids[head:]:
                    llm.eval([t])
                    rows.append(self._last_logits())
                self.computed += len(ids) - min(same, head - 1)
                out.append(question.score(_log_probs(torch.stack(rows))))
            return out
        return ask, True

    def close(self):
        self.llm.close()
