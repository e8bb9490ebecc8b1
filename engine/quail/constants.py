"""Numbers several layers share, defined once (torch-free)."""

PAGE_SIZE = 16  # tokens per KV page
DEFAULT_MAX_BATCH_TOKENS = 2048  # tokens in one forward pass, unless told otherwise
DEFAULT_PORT = 8815  # the worker's TCP port
