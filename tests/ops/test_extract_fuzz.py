"""Whatever fields are asked, every complete output parses and validates against their JSON Schema,
and its values are of their columns' types: the grammar allows nothing else (fuzzed)."""

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quail.executor.engine import PhysicalSettings
from quail.kinds.extract import json_schema
from quail.ops.grammar import JsonMatcher
from quail.session import Session
from quail.specs import FIELD_TYPES, FieldSpec

TEXTS = ["Acme Corp paid $1,250.00 on 2024-03-01 for 40 widgets. Great service!",
         "The striker scored twice as Arsenal beat Spurs 3-1 on Sunday."]
PY = {"str": str, "int": int, "float": (int, float), "bool": bool, "enum": str, "list[str]": list}
WORDS = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)


@st.composite
def fields(draw):
    names = draw(st.lists(WORDS.filter(lambda n: n not in ("row", "truncated")), min_size=1, max_size=4,
                          unique=True))
    out = []
    for name in names:
        kind = draw(st.sampled_from(FIELD_TYPES))
        values = tuple(draw(st.lists(WORDS, min_size=1, max_size=4, unique=True))) if kind == "enum" else ()
        out.append(FieldSpec(name, kind, draw(st.sampled_from(["", "as the document says"])), values))
    return tuple(out)


@pytest.fixture(scope="module")
def session(smollm2):
    return Session(smollm2, PhysicalSettings(arena_pages=256, max_batch_tokens=256))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields())
def test_every_complete_output_validates_against_its_schema(session, fs):
    r, stats = session.extract(TEXTS, fs, max_new_tokens=60)
    schema = json_schema(fs)
    for values, written in zip(r.values, r.written.written):
        if written.truncated:
            assert values is None and len(written.tokens) == 60
            continue
        obj = json.loads(session.loaded.tokenizer.decode(list(written.tokens)))
        jsonschema.validate(obj, schema)
        for f in fs:
            v = values[f.name]
            assert v is None or isinstance(v, PY.get(f.type, object)), (f, v)
            assert f.type != "enum" or v is None or v in f.values
    assert stats.tokens_computed + sum(stats.tokens_reused.values()) == stats.tokens_naive


def test_an_int_field_is_written_with_at_most_its_digits(session):
    """#48 15: a 26-digit serial wrote digits until the token budget; the grammar ends the number."""
    fs = (FieldSpec("serial", "int", "", ()),)
    matcher = session.grammars.json(json_schema(fs)).matcher()
    for token in session.loaded.tokenizer.encode('{"serial": ' + "9" * 18):
        matcher.accept(token)
    digits = [t for t in range(session.loaded.config.vocab_size)
              if session.loaded.tokenizer.decode([t]).strip().isdigit()]
    assert digits and not any(matcher._allowed(session.loaded.config.vocab_size)[digits])


def test_tokens_the_grammar_forces_take_no_pass_of_their_own_and_change_nothing(session, monkeypatch):
    fs = (FieldSpec("company", "str", "", ()), FieldSpec("paid", "float", "", ()),
          FieldSpec("tone", "enum", "", ("good", "bad")))
    forcing, s1 = session.extract(TEXTS, fs, max_new_tokens=60)
    monkeypatch.setattr(JsonMatcher, "forced", lambda self: None)
    one_by_one, s2 = session.extract(TEXTS, fs, max_new_tokens=60)
    assert forcing.written.written == one_by_one.written.written
    # forced or read, each token is counted once (JSON ends at its last character, with no stop token)
    assert s1.tokens_generated == s2.tokens_generated == sum(len(w.tokens) for w in forcing.written.written)
    # the keys, quotes and separators go in with the token read before them: 27 passes against 36
    assert s1.forward_passes <= s2.forward_passes - 6
