from airflow_quail.operators.llm import (
    LLMClassifyOperator,
    LLMExtractOperator,
    LLMFilterOperator,
    LLMJoinOperator,
    LLMMapOperator,
)

__all__ = ["LLMFilterOperator", "LLMClassifyOperator", "LLMJoinOperator", "LLMExtractOperator", "LLMMapOperator"]
