"""Page ids with reference counts. A page is free when no sequence holds it."""

import numpy as np

from quail.constants import PAGE_SIZE


class PageError(RuntimeError):
    """A page was freed twice or used after it was freed: always an engine bug, never user input."""


class ArenaFull(RuntimeError):
    """No free page is left."""


class PageArena:
    def __init__(self, num_pages: int, page_size: int = PAGE_SIZE) -> None:
        if num_pages < 1:
            raise ValueError(f"an arena needs at least one page, got {num_pages}")
        self.num_pages = num_pages
        self.page_size = page_size
        self._refs = np.zeros(num_pages, dtype=np.int32)
        # a stack of free page ids in one array (4 bytes a page, not a Python int each), low ids on top
        self._free = np.arange(num_pages - 1, -1, -1, dtype=np.int32)
        self._top = num_pages

    @property
    def num_free(self) -> int:
        return self._top

    @property
    def num_used(self) -> int:
        return self.num_pages - self._top

    def rebuild(self, live: list[list[int]]) -> None:
        """Reference counts from the sequences still alive, after others were abandoned mid-job;
        every page none of them holds is free again."""
        self._refs[:] = 0
        for pages in live:
            np.add.at(self._refs, np.asarray(pages, dtype=np.int64), 1)
        free = np.flatnonzero(self._refs == 0)[::-1]
        self._top = len(free)
        self._free[: self._top] = free

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    def allocate(self) -> int:
        if not self._top:
            raise ArenaFull(f"all {self.num_pages} pages are in use")
        self._top -= 1
        page = int(self._free[self._top])
        self._refs[page] = 1
        return page

    def refcount(self, page: int) -> int:
        return int(self._refs[page])

    def incref(self, page: int) -> None:
        if self._refs[page] <= 0:
            raise PageError(f"page {page} is used after it was freed")
        self._refs[page] += 1

    def decref(self, page: int) -> None:
        if self._refs[page] <= 0:
            raise PageError(f"page {page} is freed twice")
        self._refs[page] -= 1
        if self._refs[page] == 0:
            self._free[self._top] = page
            self._top += 1

    def check_live(self, pages: np.ndarray | list[int]) -> None:
        pages = np.asarray(pages, dtype=np.int64)
        if pages.size and (self._refs[pages] <= 0).any():
            dead = pages[self._refs[pages] <= 0]
            raise PageError(f"pages {dead.tolist()} are used after they were freed")
