"""LLM filter, classify, join, extract and map operators: each declares its settings, template fields
and docs; the rest is BaseLLMOperator's."""

from collections.abc import Sequence
from typing import Any

from airflow.exceptions import AirflowException

from airflow_quail.operators.base import BaseLLMOperator
from quail.kinds.classify import ClassifySettings
from quail.kinds.extract import ExtractSettings, parse_fields
from quail.kinds.filter import FilterSettings
from quail.kinds.join import JoinSettings
from quail.kinds.map import DEFAULT_COLUMN, MapSettings


class LLMFilterOperator(BaseLLMOperator):
    """Keeps the rows of `source` for which every predicate holds (rewind asks a predicate only
    of the rows that passed the ones before it).

    :param source: a .parquet or .csv path or URI, sql://CONN_ID/TABLE or sql://CONN_ID?query=SELECT ...
        (templated)
    :param text_column: the column whose text the predicates are asked of
    :param predicates: yes/no questions (templated)
    :param limit: the first N passing rows, in input order; computing stops after them
    :param threshold: P(yes) at or above which a predicate holds
    :param cascade: as BaseLLMOperator's, on each predicate's P(yes); its target is precision, recall
        or accuracy
    """

    template_fields: Sequence[str] = ("source", "target", "predicates", "review_output", "quail_plan")
    template_fields_renderers = {"quail_plan": "json", "predicates": "json"}
    settings = FilterSettings

    def __init__(self, *, source: str, text_column: str, predicates: list[str], limit: int | None = None,
                 threshold: float = 0.5, **kwargs: Any):
        super().__init__(**kwargs)
        self.source, self.text_column, self.predicates = source, text_column, predicates
        self.limit, self.threshold = limit, threshold
        self._declare_assets(kwargs)

    def settings_body(self) -> dict:
        return {"input": self.source, "column": self.text_column, "predicates": self.predicates,
                "threshold": self.threshold, "limit": self.limit}


class LLMClassifyOperator(BaseLLMOperator):
    """Labels each row of `source` with one of `labels`, adding `label` and `p_<label>` columns.

    :param source: as for LLMFilterOperator (templated)
    :param text_column: the column whose text is classified
    :param labels: the labels, at least two: a list, or a mapping of each label to its description
        (`{"arts": "painting, music, film"}`), which the prompt shows; the answer is scored on the
        label itself (templated)
    :param question: the question the labels answer (templated)
    :param top_k: 2 or more: also the K best labels (`label_2`, ...) with their probabilities
        (`p_label`, `p_label_2`, ...)
    :param cascade: as BaseLLMOperator's, on the top label's probability: ``"band": [0, 0.8]`` sends
        the rows labelled with 0.8 or less to the larger model; its target is accuracy
    """

    template_fields: Sequence[str] = ("source", "target", "labels", "question", "review_output", "quail_plan")
    template_fields_renderers = {"quail_plan": "json", "labels": "json"}
    settings = ClassifySettings

    def __init__(self, *, source: str, text_column: str, labels: list[str] | dict[str, str],
                 question: str | None = None, top_k: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.source, self.text_column, self.labels, self.question = source, text_column, labels, question
        self.top_k = top_k
        self._declare_assets(kwargs)

    def settings_body(self) -> dict:
        return {"input": self.source, "column": self.text_column, "labels": self.labels, "question": self.question,
                "top_k": self.top_k}


class LLMJoinOperator(BaseLLMOperator):
    """The pairs of `left` and `right` rows that satisfy `condition`, with `p_yes`; columns are
    prefixed left_ and right_. Rewind reads each left row once and rewinds past each right row.

    :param left: the anchors, read a window at a time (templated)
    :param right: the partners, read whole (templated)
    :param left_column: the left rows' text column
    :param right_column: the right rows' text column
    :param right_name: what the prompt calls a right row ("headline"); by default the right column's
        name in words. The left row is always "the document", so that its KV is shared with the
        filters and classifications of the same table.
    :param condition: what a matching pair satisfies, in those terms: "The headline is the title of
        the document." (templated)
    :param threshold: P(yes) at or above which a pair matches
    :param top_k: each left row's K right rows of highest P(yes) (at least the threshold); every
        pair gets its `rank` within its left row
    :param cascade: as BaseLLMOperator's, on each pair's P(yes); its target is precision, recall or
        accuracy, over pairs
    :param recall_target: ask the model about few pairs, chosen by the rows' vectors, and certify that
        the output holds at least this share of the pairs it would match if asked about every pair
        (docs/design.md, "Blocked joins"); the task log says the pairs asked and the bound
    :param recall_delta: the certificate holds with probability at least 1 - recall_delta
    :param candidates: ask about each left row's K best-scoring right rows only; the recall is
        estimated from a sample, not certified
    :param embedding: score pairs with this sentence-transformers model (a folder, or
        all-MiniLM-L6-v2 when installed) instead of the model's own hidden states
    :param condition_first: ask the condition before each right row (the default), so that a left
        row's pairs share its KV and each pair costs its right row and the answer cue; False asks it
        after each pair
    """

    template_fields: Sequence[str] = ("left", "right", "target", "condition", "review_output", "quail_plan")
    template_fields_renderers = {"quail_plan": "json"}
    settings = JoinSettings
    input_fields = (("left", "left_column"), ("right", "right_column"))

    def __init__(self, *, left: str, right: str, left_column: str, right_column: str, condition: str,
                 right_name: str | None = None, threshold: float = 0.5, top_k: int | None = None,
                 recall_target: float | None = None, recall_delta: float = 0.05, candidates: int | None = None,
                 embedding: str | None = None, condition_first: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.left, self.right, self.left_column, self.right_column = left, right, left_column, right_column
        self.condition, self.right_name, self.threshold, self.top_k = condition, right_name, threshold, top_k
        self.recall_target, self.recall_delta, self.candidates = recall_target, recall_delta, candidates
        self.embedding, self.condition_first = embedding, condition_first
        self._declare_assets(kwargs)

    def settings_body(self) -> dict:
        return {"left": self.left, "right": self.right, "left_column": self.left_column,
                "right_column": self.right_column, "condition": self.condition, "right_name": self.right_name,
                "threshold": self.threshold, "top_k": self.top_k, "recall_target": self.recall_target,
                "recall_delta": self.recall_delta, "candidates": self.candidates, "embedding": self.embedding,
                "condition_first": self.condition_first}


class LLMExtractOperator(BaseLLMOperator):
    """Fills in typed fields from each row of `source`, adding one column per field and `truncated`.
    The model writes one JSON object per row, held to the fields' JSON Schema as it writes (greedy:
    the same input gives the same output). After a filter or classify of the same column, the
    documents' KV is reused, not computed again.

    :param source: as for LLMFilterOperator (templated)
    :param text_column: the column whose text the fields are read from
    :param fields: each field's name and type (str, int, float, bool, date, list[str], or an enum's
        values): a mapping (``{"amount": "float", "sentiment": ["positive", "negative"]}``, or a
        field to ``{"type": ..., "description": ...}``), a JSON Schema object, or a pydantic model
        class. Each may be null where the document does not say (templated, as a mapping)
    :param instruction: what to extract, shown before the field list (templated)
    :param max_new_tokens: the most tokens written per row; a row cut there is `truncated`, its
        fields null
    """

    template_fields: Sequence[str] = ("source", "target", "fields", "instruction", "quail_plan")
    template_fields_renderers = {"quail_plan": "json", "fields": "json"}
    settings = ExtractSettings

    def __init__(self, *, source: str, text_column: str, fields: Any, instruction: str | None = None,
                 max_new_tokens: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        try:  # a pydantic class or a JSON Schema becomes a mapping: what a DAG serializes and templates
            parsed = parse_fields(fields)
        except ValueError as e:
            raise AirflowException(f"task {self.task_id!r}: {e}") from None
        self.fields = {f.name: {"type": f.type, "description": f.description, "values": list(f.values)}
                       for f in parsed}
        self.source, self.text_column, self.instruction = source, text_column, instruction
        self.max_new_tokens = max_new_tokens
        self._declare_assets(kwargs)

    def settings_body(self) -> dict:
        return {"input": self.source, "column": self.text_column, "fields": self.fields,
                "instruction": self.instruction, "max_new_tokens": self.max_new_tokens}


class LLMMapOperator(BaseLLMOperator):
    """Writes a short text for each row of `source` by `instruction`, adding `output_column` and
    `truncated` (greedy: the same input gives the same text).

    :param source: as for LLMFilterOperator (templated)
    :param text_column: the column whose text the instruction is applied to
    :param instruction: what to write: "Summarize the review in one sentence." (templated)
    :param output_column: the column it writes
    :param max_new_tokens: the most tokens written per row; a row cut there is `truncated`
    """

    template_fields: Sequence[str] = ("source", "target", "instruction", "quail_plan")
    template_fields_renderers = {"quail_plan": "json"}
    settings = MapSettings

    def __init__(self, *, source: str, text_column: str, instruction: str, output_column: str = DEFAULT_COLUMN,
                 max_new_tokens: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.source, self.text_column, self.instruction = source, text_column, instruction
        self.output_column, self.max_new_tokens = output_column, max_new_tokens
        self._declare_assets(kwargs)

    def settings_body(self) -> dict:
        return {"input": self.source, "column": self.text_column, "instruction": self.instruction,
                "output_column": self.output_column, "max_new_tokens": self.max_new_tokens}
