import sys
import time

from tqdm import tqdm


class Progress:
    """A stderr bar of rows done, with the engine's tokens/s."""

    def __init__(self, rows: int | None, what: str):
        self.bar = tqdm(total=rows, unit="row", desc=what, file=sys.stderr, dynamic_ncols=True, leave=True)
        self.tokens = 0
        self.start = time.perf_counter()

    def __call__(self, rows: int, tokens: int) -> None:
        self.tokens += tokens
        rate = self.tokens / max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix_str(f"{rate:,.0f} tok/s", refresh=False)
        self.bar.update(rows)

    def close(self) -> None:
        self.bar.close()
