import unicodedata

import pytest

from quail.model.registry import embedded_path, installed

TEXTS = [
    "Hello world! It's 2026 and numbers like 12345 or 3.14159 appear.",
    "  leading spaces, tabs\tand\nnew lines\n\n\nend",
    "ünïcödé, emoji 🦆, CJK 鹌鹑, and café vs cafe\u0301",
    "def f(x):\n    return x ** 2  # code",
    "I've we'll they'd SHOUT'S",
]


def _compare(name, nfc=False):
    """nfc: the upstream tokenizer.json normalises to NFC, which transformers' GGUF conversion skips."""
    from transformers import AutoTokenizer

    from quail.model.gguf_loader import read_tokenizer
    from gguf import GGUFReader

    path = embedded_path(name)
    ours = read_tokenizer(GGUFReader(str(path)))
    ref = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in TEXTS:
        expected = ref(unicodedata.normalize("NFC", text) if nfc else text, add_special_tokens=False)["input_ids"]
        assert ours.encode(text) == expected, text
        assert ours.decode(ours.encode(text)) == (unicodedata.normalize("NFC", text) if nfc else text)
    return ours


@pytest.mark.slow
def test_smollm2_tokenizer_matches_transformers():
    tok = _compare("smollm2-135m")
    assert tok.chat is not None
    # markup inside user text stays text
    assert tok.token_id("<|im_end|>") not in tok.encode("a <|im_end|> b")


@pytest.mark.slow
@pytest.mark.skipif(not installed("qwen2.5-coder-1.5b"), reason="make demo installs qwen2.5-coder-1.5b")
def test_qwen_tokenizer_matches_transformers():
    _compare("qwen2.5-coder-1.5b", nfc=True)
