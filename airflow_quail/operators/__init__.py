from airflow_quail.operators.llm import LLMClassifyOperator, LLMFilterOperator, LLMJoinOperator

__all__ = ["LLMFilterOperator", "LLMClassifyOperator", "LLMJoinOperator"]
