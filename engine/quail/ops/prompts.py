"""Prompt layout: [chat preamble][document][question][answer cue], the question after the document
so that the document's KV can be kept while questions change.

Measured on qwen2.5-coder-0.5b with bench/quality/accuracy.py (issue 2): with the assistant turn pre-filled
with "Answer:", "Answer Yes or No." scored 1.00 on the sport filter where "Answer yes or no." scored
0.80 (it never said yes: mean P(yes) 0.37 on sport items against 0.59).
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from quail.errors import QuailError
from quail.kinds.words import ANCHOR, SECOND
from quail.model.tokenizer import Tokenizer

SYSTEM = "You answer questions about documents. Reply with one word."
@dataclass(frozen=True)
class YesNoTokens:
    yes: list[int]
    no: list[int]

    @property
    def ids(self) -> list[int]:
        """The ids a yes/no prompt reads, yes variants first (the order p_yes expects)."""
        return self.yes + self.no


# The longest token of the embedded tokenizers spans 128 characters (Qwen2.5's; SmolLM2's 81): a
# text longer than the context times this has more tokens than the context holds.
MAX_CHARS_PER_TOKEN = 128


class PromptLayout:
    """:param context: the model's context in tokens; a text is cut to what it could fill (and one
        token more) before it is tokenized, which spent 3 minutes and 8 GB on a 50 MB cell"""

    def __init__(self, tokenizer: Tokenizer, system: str = SYSTEM, context: int | None = None) -> None:
        self.tok = tokenizer
        self.max_chars = None if context is None else (context + 1) * MAX_CHARS_PER_TOKEN
        self._last: dict[str, list[int]] = {}
        chat = tokenizer.chat
        if chat is None:
            self.preamble = tokenizer.encode(system + "\n\n")
            self.cue = tokenizer.encode("\nAnswer:")
            self.reply = tokenizer.encode("\nReply:\n")  # where an extract or a map writes
        else:
            self.preamble = chat.begin_system + tokenizer.encode(system) + chat.end_turn + chat.begin_user
            self.reply = chat.end_turn + chat.begin_assistant
            self.cue = self.reply + tokenizer.encode("Answer:")

    @functools.cached_property
    def yes_no(self) -> YesNoTokens:
        """The yes/no answer tokens that filters and joins (and their calibration) read; asked for
        only by them, so a model without such tokens can still classify."""
        return YesNoTokens(yes=self._single_tokens("yes"), no=self._single_tokens("no"))

    def _single_tokens(self, word: str) -> list[int]:
        ids = set()
        for variant in (word, word.capitalize(), word.upper()):
            for text in (" " + variant, variant):
                enc = self.tok.encode(text)
                if len(enc) == 1 and self.tok.decode(enc).strip().lower() == word:  # not an unknown-word token
                    ids.add(enc[0])
        if not ids:
            raise QuailError(f"the model's tokenizer has no single token for {word!r}: filters and joins read a "
                             f"yes/no answer (a classify needs none)")
        return sorted(ids)

    @functools.cached_property
    def document_head(self) -> int:
        """The tokens of a document besides its text: the preamble, its heading and the blank line."""
        return len(self.preamble) + len(self.tok.encode(_headed(ANCHOR, [""])[0]))

    def document(self, text: str) -> list[int]:
        return self.documents([text])[0]

    def documents(self, texts: list[str]) -> list[list[int]]:
        """The texts rendered as documents. The last call's are kept (or an earlier call's, while
        later calls ask only texts it holds: the parts of a window), so that the operators of a
        chain, and a window's prediction and its run, tokenize a window once (memory: one window)."""
        last = self._last
        todo = [t for t in dict.fromkeys(texts) if t not in last]
        if not todo:
            return [last[t] for t in texts]
        done = {t: self.preamble + ids for t, ids in zip(todo, self.tok.encode_batch(_headed(ANCHOR, self._cut(todo))))}
        done.update((t, last[t]) for t in texts if t in last)
        self._last = done  # replaced whole: threads sharing the layout never see it half-made
        return [done[t] for t in texts]

    def yes_no_question(self, question: str) -> list[int]:
        return self.tok.encode(f"Question: {question}\nAnswer Yes or No.") + self.cue

    def label_question(self, question: str, labels: list[str], descriptions: list[str] | tuple = ()) -> list[int]:
        """The question, each label's description if given (a line each), then the labels to answer
        with; the answer is scored on the label's own tokens (`label`), never its description."""
        options = ", ".join(labels)
        described = "".join(f"- {label}: {d}\n" for label, d in zip(labels, descriptions))
        return self.tok.encode(f"Question: {question}\n{described}Answer with one of: {options}.") + self.cue

    def label(self, label: str) -> list[int]:
        return self.tok.encode(" " + label)

    def partner(self, text: str, name: str = SECOND) -> list[int]:
        """A join's left row is rendered as a plain document, so its KV is shared with filters and
        classifications of the same table (KV retention); the right row follows under its own name."""
        return self.partners([text], name)[0]

    def partners(self, texts: list[str], name: str = SECOND) -> list[list[int]]:
        return self.tok.encode_batch(_headed(name, self._cut(texts)))

    def _cut(self, texts: list[str]) -> list[str]:
        return texts if self.max_chars is None else [t[:self.max_chars] for t in texts]

    def pair_question(self, condition: str, name: str = SECOND) -> list[int]:
        return self.yes_no_question(f"Do the {ANCHOR} and the {name} satisfy this condition? {condition}")

    def pair_lead(self, condition: str, name: str = SECOND) -> list[int]:
        """The condition before the right row, which then ends the prompt with the answer cue."""
        return self.tok.encode(f"Question: Do the {ANCHOR} and the {name} below satisfy this condition? "
                               f"{condition}\nAnswer Yes or No.\n\n")

    def writing_question(self, text: str) -> list[int]:
        """An extract's or a map's prompt after the document: what to write, then the reply's start,
        where the model writes."""
        return self.tok.encode(text) + self.reply


def _headed(name: str, texts: list[str]) -> list[str]:
    """Each text under its name, capitalised, as a heading line ("Headline:"), then a blank line."""
    return [f"{name[0].upper()}{name[1:]}:\n{t}\n\n" for t in texts]


@dataclass
class Documents:
    """Tokenized documents that fit the model's context, and how many had to be cut."""

    tokens: list[list[int]] = field(default_factory=list)
    truncated: int = 0


def fit(texts: list[str], render: Callable[[list[str]], list[list[int]]], context: int, suffix: int, truncate: bool,
        rows: list[int] | None = None, what: str = "row") -> Documents:
    """Tokenizes texts with `render` (texts -> token lists) for a model of `context` tokens; `suffix`
    is the longest question that follows a document in one prompt. A document longer than its room
    is refused, or cut with `truncate`. `rows` are the input row numbers that errors name."""
    limit = context - suffix
    out = Documents()
    if not truncate and (long := next(((i, len(t)) for i, t in zip(rows or range(len(texts)), texts)
                                       if len(t) > context * MAX_CHARS_PER_TOKEN), None)):
        raise QuailError(f"{what} {long[0]}: the document is {long[1]:,} characters, far more than the model's "
                         f"context holds ({limit:,} tokens after the question). Set truncate to cut long "
                         f"documents.", parameter="truncate")
    for i, tokens in zip(rows or range(len(texts)), render(texts)):  # the layout cuts what it must
        if len(tokens) > limit:
            if not truncate:
                raise QuailError(
                    f"{what} {i}: the document is {len(tokens)} tokens with its prompt; the model's context "
                    f"leaves {limit} for it after the question. Set truncate to cut long documents.",
                    parameter="truncate")
            tokens = tokens[:limit]
            out.truncated += 1
        out.tokens.append(tokens)
    return out
