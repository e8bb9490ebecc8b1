"""Tokenizers built with the `tokenizers` library, from GGUF metadata or a tokenizer.json,
and the chat markup the prompts are laid out in."""

import functools
from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

# Pre-tokenizer split patterns, as the upstream tokenizer.json files of these families define them.
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONTROL, _USER_DEFINED = 3, 4
SHORT = 4096  # characters: texts up to this long are kept once encoded (`Tokenizer.encode`)


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in ("qwen2", "llama-bpe", "llama3"):
        pattern = _QWEN2 if pre == "qwen2" else _LLAMA3
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"), byte_level])
    if pre == "smollm":
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    if pre in ("gpt2", "default"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    raise ValueError(f"unsupported GGUF tokenizer pre-tokenizer {pre!r}")


def tokenizer_from_gguf_fields(tokens: list[str], token_types: list[int], merges: list[str], pre: str) -> HFTokenizer:
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[(a, b) for a, _, b in (m.partition(" ") for m in merges)], fuse_unk=False)
    tk = HFTokenizer(bpe)
    if pre == "qwen2":
        tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = _pre_tokenizer(pre)
    tk.decoder = decoders.ByteLevel()
    typed = list(zip(tokens, token_types))
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in typed if k == _CONTROL])
    tk.add_tokens([AddedToken(t, special=False, normalized=False) for t, k in typed if k == _USER_DEFINED])
    return tk


@dataclass(frozen=True)
class ChatMarkup:
    """Token ids that open and close a chat turn; text inside turns is encoded as plain text."""

    begin_system: list[int]
    begin_user: list[int]
    end_turn: list[int]
    begin_assistant: list[int]


class Tokenizer:
    def __init__(self, tk: HFTokenizer):
        self._tk = tk
        # User text must never turn into control tokens ("<|im_end|>" inside a document stays text).
        self._tk.encode_special_tokens = True
        self.chat = self._chat_markup()

    @classmethod
    def from_file(cls, path: str | Path) -> "Tokenizer":
        return cls(HFTokenizer.from_file(str(path)))

    def token_id(self, token: str) -> int | None:
        return self._tk.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        if len(text) <= SHORT:
            return list(self._short(text))
        return self._tk.encode(text, add_special_tokens=False).ids

    @functools.lru_cache(maxsize=256)  # noqa: B019 (a tokenizer lives as long as its process)
    def _short(self, text: str) -> tuple[int, ...]:
        """A question, a label, a heading: encoded again for every window of a run."""
        return tuple(self._tk.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many texts at once, in the tokenizers library's threads."""
        return [e.ids for e in self._tk.encode_batch(texts, add_special_tokens=False)]

    def json(self) -> str:
        """The tokenizer as a tokenizer.json: what a grammar library reads its vocabulary from."""
        return self._tk.to_str()

    @functools.cached_property
    def stop_ids(self) -> list[int]:
        """The tokens that end a reply: the chat's end of turn, and end of text."""
        names = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "</s>")
        return [i for i in (self.token_id(n) for n in names) if i is not None]

    def decode(self, ids: list[int]) -> str:
        return self._tk.decode(ids, skip_special_tokens=False)

    def _chat_markup(self) -> ChatMarkup | None:
        start, end = self.token_id("<|im_start|>"), self.token_id("<|im_end|>")
        if start is not None and end is not None:
            nl = self.encode("\n")
            return ChatMarkup(
                begin_system=[start] + self.encode("system\n"),
                begin_user=[start] + self.encode("user\n"),
                end_turn=[end] + nl,
                begin_assistant=[start] + self.encode("assistant\n"),
            )
        header, header_end, eot = (self.token_id(t) for t in ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"))
        if header is not None and header_end is not None and eot is not None:
            def turn(role: str) -> list[int]:
                return [header] + self.encode(role) + [header_end] + self.encode("\n\n")

            return ChatMarkup(turn("system"), turn("user"), [eot], turn("assistant"))
        return None
