"""A join's prompt names its right rows after their column, or after the name the DAG gives, and
always calls the left row "the document", the label under which filters and classifications of the
same table compute its KV."""

import dataclasses
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main
from quail.kinds.join import partner
from quail.kinds.words import partner_name
from quail.ops.prompts import PromptLayout
from quail.specs import OperatorSpec
from tests.cli.test_bad_input import MODEL, refused


@pytest.mark.parametrize("column, name", [
    ("headline", "headline"), ("Title", "title"), ("short_description", "short description"),
    ("shortDescription", "short description"), ("job title 2", "job title 2"),
    ("document", "second document"), ("Document", "second document"), ("__", "second document"),
])
def test_right_rows_are_named_after_their_column(column, name):
    assert partner_name(column) == name


def test_the_prompt_labels_the_right_row_and_asks_in_its_terms(smollm2):
    layout = PromptLayout(smollm2.tokenizer)
    spec = OperatorSpec("j", "join", ("a", "h"), ("body", "headline"), ("The headline is the title of the document.",))
    text = smollm2.tokenizer.decode(layout.partner("Derby goals", partner(spec))
                                    + layout.pair_question(spec.questions[0], partner(spec)))
    assert text.startswith("Headline:\nDerby goals\n\n")
    assert ("Question: Do the document and the headline satisfy this condition? "
            "The headline is the title of the document.") in text
    assert partner(dataclasses.replace(spec, right_name=" news title ")) == "news title"
    assert smollm2.tokenizer.decode(layout.document("Goals.")).endswith("Document:\nGoals.\n\n")


@pytest.mark.usefixtures("smollm2_for_every_session")
def test_a_named_join_is_predicted_exactly(tmp_path):
    pq.write_table(pa.table({"body": ["The striker scored twice in the derby.", "Rates rose again."]}),
                   tmp_path / "a.parquet")
    pq.write_table(pa.table({"title": ["Derby goals", "Bank rates", "Weather"]}), tmp_path / "h.parquet")
    runs = {}
    for name in (None, "headline"):
        stats = tmp_path / f"{name}.json"
        with pytest.raises(SystemExit) as e:
            main(["join", str(tmp_path / "a.parquet"), str(tmp_path / "h.parquet"), "--left-column", "body",
                  "--right-column", "title", "--condition", "The headline is the title of the document.",
                  "--threshold", "0", "--output", str(tmp_path / f"{name}.parquet"), "--stats", str(stats), *MODEL]
                 + (["--right-name", name] if name else []))
        assert e.value.code == 0
        runs[name] = json.loads(stats.read_text())
        assert pq.read_table(tmp_path / f"{name}.parquet").num_rows == 2 * 3
    for s in runs.values():
        assert s["predicted"]["tokens_naive"] == s["tokens_naive"]
        assert s["predicted"]["tokens_computed"] == s["tokens_computed"]
    # "Headline:" is a token longer than "Title:" here, once per (left, right) pair
    assert runs["headline"]["tokens_naive"] > runs[None]["tokens_naive"]


@pytest.mark.usefixtures("smollm2_for_every_session")
@pytest.mark.parametrize("name, says", [
    ("document", "right_name 'document' is what the prompt calls the left row"),
    ("", "right_name must be a short name on one line"),
    ("head\nline", "right_name must be a short name on one line"),
    ("Headline:", "right_name must be a short name on one line"),
])
def test_a_bad_right_name_is_a_clear_error(tmp_path, capsys, monkeypatch, name, says):
    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.table({"t": ["x"]}), tmp_path / "a.parquet")
    refused(capsys, "join", "a.parquet", "a.parquet", "--left-column", "t", "--right-column", "t", "--condition", "c",
            "--right-name", name, "--output", "o.parquet", *MODEL, says=says)
    assert not (tmp_path / "o.parquet").exists()
