"""extract and map from the command line and a pipeline file: typed columns beside the input's, the
same tokens written with reuse as without, accounting, and bad input refused before any work."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.cli.main import main

pytestmark = pytest.mark.usefixtures("smollm2_for_every_session")
MODEL = ["--model", "smollm2-135m", "--dtype", "float32"]
TEXTS = ["Acme Corp paid $1,250.00 on 2024-03-01 for 40 widgets. Great service!",
         "The striker scored twice as Arsenal beat Spurs 3-1 on Sunday.",
         "Invoice from Globex, total 99.5 dollars, dated 12 January 2023. Terrible delays."]
FIELDS = ["--field", "company:str=the company named", "--field", "amount:float=the total in dollars",
          "--field", "date:date", "--field", "sentiment:positive|negative|neutral", "--field", "items:int",
          "--field", "tags:list[str]", "--field", "paid:bool"]


def run(capsys, *argv) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return e.value.code, err


@pytest.fixture
def docs(tmp_path):
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": [7, 8, 9], "text": TEXTS}), path)
    return path


def test_extract_writes_typed_columns_beside_the_input(docs, tmp_path, capsys):
    out, stats = tmp_path / "o.parquet", tmp_path / "s.json"
    code, err = run(capsys, "extract", docs, "--text-column", "text", *FIELDS, "--max-new-tokens", "120",
                    "--output", out, "--stats", stats, *MODEL)
    assert code == 0, err
    table = pq.read_table(out)
    assert table.column_names == ["id", "text", "company", "amount", "date", "sentiment", "items", "tags", "paid",
                                  "truncated", "invalid"]
    types = [table.schema.field(n).type for n in table.column_names[2:]]
    assert types == [pa.string(), pa.float64(), pa.date32(), pa.string(), pa.int64(), pa.list_(pa.string()),
                     pa.bool_(), pa.bool_(), pa.list_(pa.string())]
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [7, 8, 9]
    for r in rows:
        assert r["sentiment"] in (None, "positive", "negative", "neutral")
        if r["truncated"]:
            assert all(r[f] is None for f in ("company", "amount", "date", "sentiment", "items", "tags", "paid"))
    s = json.loads(stats.read_text())
    assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]
    assert s["predicted"]["tokens_computed"] == s["tokens_computed"]
    assert 0 < s["tokens_generated"] <= s["predicted"]["tokens_generated_at_most"] == 3 * 120


def test_extract_with_reuse_writes_what_it_writes_without(docs, tmp_path, capsys):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run(capsys, "extract", docs, "--text-column", "text", *FIELDS, "--output", a, *MODEL)[0] == 0
    assert run(capsys, "extract", docs, "--text-column", "text", *FIELDS, "--output", b, "--no-reuse", *MODEL)[0] == 0
    assert pq.read_table(a).to_pylist() == pq.read_table(b).to_pylist()


def test_map_writes_a_text_column(docs, tmp_path, capsys):
    out = tmp_path / "o.parquet"
    code, err = run(capsys, "map", docs, "--text-column", "text", "--instruction", "Summarize it in one sentence.",
                    "--output-column", "summary", "--max-new-tokens", "30", "--output", out, *MODEL)
    assert code == 0, err
    table = pq.read_table(out)
    assert table.column_names == ["id", "text", "summary", "truncated"]
    assert all(isinstance(r["summary"], str) for r in table.to_pylist())


def test_a_pipeline_extracts_from_the_rows_a_filter_kept_reusing_their_kv(docs, tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(f"""
model: smollm2-135m
tables: {{docs: {docs}}}
operators:
  - name: kept
    filter: {{input: docs, column: text, predicates: ["Is this about money?"], threshold: 0.0}}
  - name: fields
    extract: {{input: kept, column: text, fields: {{company: str, amount: float}}, max_new_tokens: 60}}
    output: {tmp_path / "o.parquet"}
    stats: {tmp_path / "s.json"}
""")
    code, err = run(capsys, "pipeline", path, "--dtype", "float32")
    assert code == 0, err
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["tokens_reused"]["retention"] > 0  # the documents' KV, kept by the filter for the extract
    assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]
    assert pq.read_table(tmp_path / "o.parquet").column_names[-4:] == ["company", "amount", "truncated", "invalid"]


@pytest.mark.parametrize("argv, says", [
    (["--field", "amount:money"], "field 'amount': type 'money' is not one of str, int, float"),
    ([], "give at least one field"),
    (["--field", "a:str", "--field", "a:int"], "duplicate fields ['a']"),
    # #48 15: names SQL cannot tell apart, and type words read as an enum's values
    (["--field", "a:str", "--field", "A:int"], "duplicate fields ['A', 'a'] (SQL does not tell names apart by case)"),
    (["--field", "ID:int"], "already has the column(s) ['ID'], which its output adds"),
    (["--field", "Truncated:bool"], "field name 'Truncated' is a column the output has"),
    (["--field", "a:date|str"], "is an enum of words, and ['date', 'str'] name types"),
    (["--field", "amount"], "must be NAME:TYPE[=DESCRIPTION]"),
    (["--field", "truncated:bool"], "field name 'truncated' is a column the output has"),
    (["--field", "id:int"], "already has the column(s) ['id'], which its output adds"),
    (["--field", "a:str", "--max-new-tokens", "0"], "max_new_tokens must be at least 1, got 0"),
    (["--field", "a:str", "--max-new-tokens", "9000"], "or lower max_new_tokens"),
])
def test_bad_extracts_are_refused_before_any_work(docs, tmp_path, capsys, argv, says):
    out = tmp_path / "o.parquet"
    code, err = run(capsys, "extract", docs, "--text-column", "text", *argv, "--output", out, *MODEL)
    assert code == 2 and "quail: error:" in err and says in err, err
    assert not out.exists()


def test_a_rerun_finds_its_outputs_in_the_store_and_a_changed_schema_misses(docs, tmp_path, capsys):
    def extract(*fields, n):
        out, stats = tmp_path / f"o{n}.parquet", tmp_path / f"s{n}.json"
        code, err = run(capsys, "extract", docs, "--text-column", "text", *fields, "--max-new-tokens", "60",
                        "--output", out, "--stats", stats, *MODEL)
        assert code == 0, err
        return pq.read_table(out).to_pylist(), json.loads(stats.read_text())

    fields = ["--field", "company:str", "--field", "amount:float"]
    first, s1 = extract(*fields, n=1)
    again, s2 = extract(*fields, n=2)
    assert again == first
    assert s2["tokens_computed"] == s2["tokens_generated"] == 0
    assert s2["tokens_reused"]["store"] == s2["tokens_naive"] == s1["tokens_naive"]
    assert s2["predicted"]["tokens_computed"] == 0
    _, s3 = extract(*fields, "--field", "paid:bool", n=3)  # another schema: another question
    assert s3["tokens_reused"]["store"] == 0 and s3["tokens_generated"] > 0


def _stored_over(path, tokens: list[int], sign: bool = True) -> int:
    """Every written output in the answer store at `path` replaced by `tokens` (not truncated), signed
    with this process's key as a worker's would be (or not, as an intruder's); how many."""
    import sqlite3
    from array import array

    from quail.store.signing import signer

    db = sqlite3.connect(path)
    keys = [k for (k,) in db.execute("SELECT key FROM answers")]
    value = array("d", [0.0, *tokens]).tobytes()
    db.executemany("UPDATE answers SET value = ? WHERE key = ?",
                   [(signer().seal(k, value) if sign else value + bytes(16), k) for k in keys])
    db.commit()
    db.close()
    return len(keys)


def test_a_stored_value_no_column_holds_is_null_and_marked_never_a_crash(docs, tmp_path, capsys, smollm2):
    """#48 2: a number the schema allows but int64 does not, stored, killed every rerun."""
    import os

    fields = ["--field", "serial:int", "--field", "amount:float", "--max-new-tokens", "40"]
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", docs, "--text-column", "text", *fields, "--output", out, *MODEL)[0] == 0
    big = 98765432109876543210987654321
    written = smollm2.tokenizer.encode(json.dumps({"serial": big, "amount": big}))
    assert _stored_over(os.environ["QUAIL_ANSWER_STORE"], written) == 3
    code, err = run(capsys, "extract", docs, "--text-column", "text", *fields, "--output", out, *MODEL)
    assert code == 0, err
    rows = pq.read_table(out).to_pylist()
    assert [(r["serial"], r["amount"], r["invalid"], r["truncated"]) for r in rows] == [(None, float(big), ["serial"],
                                                                                        False)] * 3


@pytest.mark.parametrize("planted", [{"serial": "HACKED", "amount": 1.0}, {"amount": 1.0}, '{"serial": 1, "amo',
                                     {"serial": 1, "amount": 1.0, "extra": 2}])
@pytest.mark.parametrize("sign", [True, False])
def test_a_stored_output_not_of_the_schema_is_computed_again(docs, tmp_path, capsys, smollm2, planted, sign):
    """#48 1: a wrong type, a missing field, cut JSON, or a field too many, signed or not: a miss."""
    import os

    fields = ["--field", "serial:int", "--field", "amount:float", "--max-new-tokens", "40"]
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run(capsys, "extract", docs, "--text-column", "text", *fields, "--output", a, *MODEL)[0] == 0
    text = planted if isinstance(planted, str) else json.dumps(planted)
    _stored_over(os.environ["QUAIL_ANSWER_STORE"], smollm2.tokenizer.encode(text), sign)
    code, err = run(capsys, "extract", docs, "--text-column", "text", *fields, "--output", b, "--stats",
                    tmp_path / "s.json", *MODEL)
    assert code == 0, err
    assert pq.read_table(b).to_pylist() == pq.read_table(a).to_pylist()
    assert json.loads((tmp_path / "s.json").read_text())["tokens_reused"]["store"] == 0


def test_a_map_after_an_extract_of_the_same_column_reads_each_document_once(docs, tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(f"""
model: smollm2-135m
tables: {{docs: {docs}}}
operators:
  - name: fields
    extract: {{input: docs, column: text, fields: {{company: str}}, max_new_tokens: 30}}
    output: {tmp_path / "fields.parquet"}
  - name: summary
    map: {{input: docs, column: text, instruction: "Summarize it in five words.", max_new_tokens: 20}}
    output: {tmp_path / "summary.parquet"}
    stats: {tmp_path / "s.json"}
""")
    code, err = run(capsys, "pipeline", path, "--dtype", "float32")
    assert code == 0, err
    s = json.loads((tmp_path / "s.json").read_text())
    # every document's KV, kept by the extract for the map: only the map's question is computed
    assert s["document_tokens_computed"] == 0 and s["tokens_reused"]["retention"] > 0
    assert pq.read_table(tmp_path / "summary.parquet").column_names == ["id", "text", "mapped", "truncated"]


def _explained(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv] + ["--explain"])
    out, err = capsys.readouterr()
    assert e.value.code == 0, err
    return out


def test_the_next_plan_expects_what_each_field_wrote_not_the_bound(docs, tmp_path, capsys):
    """The prediction of tokens written starts at the bound (max_new_tokens a row) and, once a run
    has written the fields, is their observed means per field: a schema that gains a field keeps
    the bound until that field is seen too."""
    from quail.cost.observed import WrittenCounts

    base = ["extract", docs, "--text-column", "text", "--field", "company:str=the company named",
            "--field", "paid:bool", "--max-new-tokens", "120", *MODEL]
    assert "written at most 360" in _explained(capsys, *base)
    stats = tmp_path / "s.json"
    assert run(capsys, *base, "--output", tmp_path / "o.parquet", "--stats", stats, "--no-answer-store")[0] == 0
    s = json.loads(stats.read_text())
    means = WrittenCounts().means()
    assert len(means) == 2 and all(m > 0 for m in means.values())
    expected = 3 * (sum(means.values()) + 3)  # two fields' means, the braces and a separator, a row
    assert s["predicted"]["tokens_generated_at_most"] == 360  # this run was planned before it wrote
    assert f"written about {expected:,.0f} (at most 360)" in _explained(capsys, *base)
    assert abs(expected - s["tokens_generated"]) <= 0.25 * s["tokens_generated"]  # near what was written
    assert "written at most 360" in _explained(capsys, *base, "--field", "items:int")  # a field not seen yet


def test_a_map_column_only_case_apart_from_an_input_column_is_refused(docs, tmp_path, capsys):
    code, err = run(capsys, "map", docs, "--text-column", "text", "--instruction", "Summarize it.", "--output-column",
                    "ID", "--output", tmp_path / "o.parquet", *MODEL)
    assert code != 0 and "already has the column(s) ['ID'], which its output adds" in err
    assert not (tmp_path / "o.parquet").exists()
