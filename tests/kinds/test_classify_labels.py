"""A classify's labels: a list, or each label with its description (shown in the prompt, never
scored); and top_k, its K best labels."""

import pyarrow as pa
import pytest

from quail.errors import QuailError
from quail.kinds import KINDS
from quail.planner.plan import plan
from quail.runtime import runtime_of

DESCRIBED = {"arts": "painting, music, film, literature, theatre", "history": "wars, empires, revolutions"}


def _spec(**body):
    return KINDS["classify"].from_settings("topic", {"input": "t", "column": "text"} | body, None)


def test_descriptions_are_part_of_the_spec_its_plan_and_its_prompt():
    plain, described = _spec(labels=list(DESCRIBED)), _spec(labels=DESCRIBED)
    assert described.labels == plain.labels == ("arts", "history")
    assert described.descriptions == tuple(DESCRIBED.values()) and plain.descriptions == ()
    assert described.fingerprint() != plain.fingerprint()
    assert plan([described]).hash != plan([plain]).hash
    other = _spec(labels=DESCRIBED | {"history": "kings and queens"})
    assert other.fingerprint() != described.fingerprint()


def test_the_prompt_shows_each_description_and_the_answer_is_the_label(smollm2):
    from quail.ops.prompts import PromptLayout

    layout = PromptLayout(smollm2.tokenizer)
    q = smollm2.tokenizer.decode(layout.label_question("Which topic?", list(DESCRIBED), tuple(DESCRIBED.values())))
    assert "- arts: painting, music, film, literature, theatre\n- history: wars, empires, revolutions\n" in q
    assert q.index("- history") < q.index("Answer with one of: arts, history.")
    assert layout.label("arts") == smollm2.tokenizer.encode(" arts")  # scored on the label's own tokens


@pytest.mark.parametrize("labels, says", [
    ({"arts": "", "history": "wars"}, "the description of 'arts' is empty"),
    ({"arts": 3, "history": "wars"}, "maps each label to its description"),
    ("arts", "must be a list of labels, or a mapping"),
])
def test_bad_labels_are_refused_naming_them(labels, says):
    with pytest.raises(QuailError, match=says):
        _spec(labels=labels)


def test_top_k_is_checked_and_gives_the_k_best_labels_with_their_probabilities():
    with pytest.raises(QuailError, match="top_k must be between 2 and the number of labels \\(2\\), got 3"):
        plan([_spec(labels=["a", "b"], top_k=3)])
    with pytest.raises(QuailError, match="clash with labels' probability columns"):
        plan([_spec(labels=["label", "b", "c"], top_k=2)])
    spec = _spec(labels=["a", "b", "c"], top_k=2)
    answers = pa.table({"row": [0, 1], "label": ["c", "a"], "p_a": [0.2, 0.5], "p_b": [0.3, 0.25],
                        "p_c": [0.5, 0.25]})
    out = runtime_of("classify").shape(spec, answers, [pa.table({"text": ["x", "y"]})], "t")
    assert out.column("label_2").to_pylist() == ["b", "b"]  # a tie goes to the earlier label, as the best does
    assert out.column("p_label").to_pylist() == [0.5, 0.5] and out.column("p_label_2").to_pylist() == [0.3, 0.25]


def test_the_cli_takes_name_equals_description(tmp_path):
    from quail.cli.main import parser

    def spec(*labels):
        args = parser().parse_args(["classify", "in.parquet", "--text-column", "text", "--output", "o.parquet",
                                    *[x for label in labels for x in ("--label", label)]])
        return KINDS["classify"].from_args(args)[1]

    assert spec("arts=painting, music", "history=wars").descriptions == ("painting, music", "wars")
    assert spec("arts", "history").descriptions == ()
    for labels, says in ((("arts=painting", "history"), "give every label a description"),
                         (("arts=", "history=wars"), "--label 1 \\(arts\\): the description after '=' is empty"),
                         (("arts=x", "arts=y"), "duplicate labels \\['arts'\\]")):
        with pytest.raises(QuailError, match=says):
            spec(*labels)
