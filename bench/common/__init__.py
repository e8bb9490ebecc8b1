"""What the benchmarks share: the results format (results.py), the documents and workloads they run
on (documents.py, workloads.py, labelled.py, tiny.py), the systems Quail is measured against
(systems.py), and quality metrics (metrics.py)."""
