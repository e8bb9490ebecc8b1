"""LLM filter, classify and join operators: each names its inputs and builds its spec; the rest
is BaseLLMOperator's."""

from collections.abc import Sequence
from typing import Any

from airflow_quail.operators.base import BaseLLMOperator
from quail.kinds.classify import ClassifySettings
from quail.kinds.filter import FilterSettings
from quail.kinds.join import JoinSettings
from quail.specs import OperatorSpec


class LLMFilterOperator(BaseLLMOperator):
    """Keeps the rows of `source` for which every predicate holds (chain mode asks a predicate only
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

    def inputs(self) -> list[tuple[str, str]]:
        return [(self.source, self.text_column)]

    def spec(self) -> OperatorSpec:
        return FilterSettings.parse({"input": self.source, "column": self.text_column, "predicates": self.predicates,
                                     "threshold": self.threshold, "limit": self.limit, "calibration": self.calibration,
                                     "cascade": self.cascade}, f"task {self.task_id!r}").spec(self.task_id, self.target)


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

    def inputs(self) -> list[tuple[str, str]]:
        return [(self.source, self.text_column)]

    def spec(self) -> OperatorSpec:
        return ClassifySettings.parse({"input": self.source, "column": self.text_column, "labels": self.labels,
                                       "question": self.question, "top_k": self.top_k,
                                       "calibration": self.calibration, "cascade": self.cascade},
                                      f"task {self.task_id!r}").spec(self.task_id, self.target)


class LLMJoinOperator(BaseLLMOperator):
    """The pairs of `left` and `right` rows that satisfy `condition`, with `p_yes`; columns are
    prefixed left_ and right_. Chain mode reads each left row once and rewinds past each right row.

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
    """

    template_fields: Sequence[str] = ("left", "right", "target", "condition", "review_output", "quail_plan")
    template_fields_renderers = {"quail_plan": "json"}
    settings = JoinSettings

    def __init__(self, *, left: str, right: str, left_column: str, right_column: str, condition: str,
                 right_name: str | None = None, threshold: float = 0.5, top_k: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.left, self.right, self.left_column, self.right_column = left, right, left_column, right_column
        self.condition, self.right_name, self.threshold, self.top_k = condition, right_name, threshold, top_k
        self._declare_assets(kwargs)

    def inputs(self) -> list[tuple[str, str]]:
        return [(self.left, self.left_column), (self.right, self.right_column)]

    def spec(self) -> OperatorSpec:
        return JoinSettings.parse({"left": self.left, "right": self.right, "left_column": self.left_column,
                                   "right_column": self.right_column, "condition": self.condition,
                                   "right_name": self.right_name, "threshold": self.threshold, "top_k": self.top_k,
                                   "calibration": self.calibration, "cascade": self.cascade},
                                  f"task {self.task_id!r}").spec(self.task_id, self.target)

