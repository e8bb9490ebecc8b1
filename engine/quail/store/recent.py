"""The answers a store found lately, kept in memory, and the one path by which both backends look
answers up: what is held, then what the database holds for the rest, each value checked, and the
last use of those not recorded lately written back (the bound forgets the least recently used).

Answers never change under their key, so what is held is never stale; a key not found is not held,
since another process may store it at any time."""

import threading
import time
from collections.abc import Callable, Iterable

from quail.store.signing import Signer
from quail.store.values import Rejected, fits

RECENT = 1 << 16  # answers held: a window's prediction and its run look up the same keys

Row = tuple[bytes, object, object]  # a key, its stored value and its last use, as the database gives them


class Recent:
    def __init__(self, touch_every: float = 3600.0) -> None:
        """touch_every: seconds; an answer's last use is recorded no more often, so that looking up
        seldom means writing."""
        self.touch_ns = int(touch_every * 1e9)
        self._held: dict[bytes, tuple[list, int]] = {}  # key -> (answer, last use)
        self._lock = threading.Lock()  # a worker's job threads share a store

    def get(self, keys: list[bytes], width: int, signed_by: Signer | None, read: Callable[[list[bytes]], Iterable[Row]],
            touch: Callable[[list[bytes], int], bool] | None = None) -> tuple[dict[bytes, list], Rejected]:
        """The answers among `keys` of this width, and the stored values rejected on the way.
        read: the stored rows of the keys not held (a backend's lookup). touch: records the keys'
        use at a time, True when it did (a backend's write); None, and their use is not recorded."""
        now = time.time_ns()
        seen = Rejected()
        if missing := self._missing(keys):
            for k, value, used in read(missing):
                if (answer := seen.checked(signed_by, bytes(k), value, width)) is not None:
                    with self._lock:
                        # a last use that is no time is as good as none: it is written anew
                        self._held[bytes(k)] = (answer, used if type(used) is int else 0)
        with self._lock:
            found = {k: hit[0] for k in keys if (hit := self._held.get(k)) is not None and fits(hit[0], width)}
            # in key order: two writers of overlapping keys never deadlock
            stale = sorted(k for k in found if self._held[k][1] < now - self.touch_ns)
        if touch is not None and stale and touch(stale, now):
            self._used(stale, now)
        return found, seen

    def _missing(self, keys: list[bytes]) -> list[bytes]:
        """The keys not held, each once; what is held is forgotten first once it passes RECENT answers."""
        with self._lock:
            if len(self._held) > RECENT:
                self._held.clear()
            return [k for k in dict.fromkeys(keys) if k not in self._held]

    def _used(self, keys: list[bytes], now: int) -> None:
        with self._lock:
            self._held.update((k, (self._held[k][0], now)) for k in keys if k in self._held)

    def put(self, items: Iterable[tuple[bytes, list]], now: int) -> None:
        """Answers just stored, used `now`."""
        with self._lock:
            self._held.update((k, (list(v), now)) for k, v in items)

    def clear(self) -> None:
        """Forgets what is held: the store forgot answers, and what is held is the store's."""
        with self._lock:
            self._held.clear()

    def __len__(self) -> int:
        return len(self._held)
