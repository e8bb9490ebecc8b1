"""One thread at a time drives the engine. Threads that post work at once (the worker's jobs) are
served by whichever finds no one driving: it runs the inbox and steps until its own work is done,
then hands over. All engine state is touched only by the driving thread."""

import threading
from collections import deque
from collections.abc import Callable
from typing import Any


class Driver:
    def __init__(self, step: Callable[[], None]):
        self._step = step
        self.inbox: deque[Callable[[], None]] = deque()
        self._turn = threading.Condition()
        self._driving = False

    def drive(self, task: Callable[[], None], until: Callable[[], bool]) -> None:
        """Posts `task`, then steps (or waits for the thread that does) until `until()`."""
        with self._turn:
            self.inbox.append(task)
            while not until():
                if not self._driving:
                    self._driving = True
                    break
                self._turn.wait()
            else:
                return
        try:
            while True:
                while self.inbox:
                    self.inbox.popleft()()
                if until():
                    return
                self._step()
                with self._turn:
                    self._turn.notify_all()
        finally:
            with self._turn:
                self._driving = False
                self._turn.notify_all()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Runs fn between steps, on the driving thread; returns its value or raises its error."""
        box: list = []

        def task() -> None:
            try:
                box.append((fn(), None))
            except Exception as e:
                box.append((None, e))

        self.drive(task, lambda: bool(box))
        value, error = box[0]
        if error is not None:
            raise error
        return value
