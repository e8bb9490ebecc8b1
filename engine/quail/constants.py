"""Numbers several layers share, defined once (torch-free)."""

PAGE_SIZE = 16  # tokens per KV page
MECHANISMS = ("rewind", "sharing", "retention", "store")  # the forms of reuse Stats and Prediction count
_RETIRED_MECHANISMS = {"prefix": "sharing", "answers": "store"}  # their names before #49


def mechanisms_of(reused: dict) -> dict:
    """Tokens reused by mechanism, read back from JSON an older Quail may have written (stats staged
    by a worker, an XCom manifest, a bench result): its "prefix" is "sharing", its "answers" "store"."""
    return {_RETIRED_MECHANISMS.get(k, k): v for k, v in reused.items()}
DEFAULT_MAX_BATCH_TOKENS = 2048  # tokens in one forward pass on a CPU, unless told otherwise
DEFAULT_CUDA_MAX_BATCH_TOKENS = 8192  # on a GPU: enough rows to fill its matmuls (bench/README.md, "GPU check")
DEFAULT_PORT = 8815  # the worker's TCP port
DEFAULT_MAX_QUEUED = 64  # unfinished jobs of one DAG a worker holds (Worker._admit)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90  # of the free device memory after the weights: the arena and one pass
DEVICE_HELP = "auto (CUDA when there is one), cpu, cuda or cuda:N"
