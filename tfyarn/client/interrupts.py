"""The client's signals (el_submit, tfyarn): SIGINT, SIGTERM and SIGHUP, handled explicitly.

Explicitly, because a background job of a script inherits SIGINT as ignored and Python
keeps that, so `kill -INT` from cron or Oozie would do nothing. Before anything runs, a
signal aborts at once (`Interrupted`); once processes or an application exist, signals
are only recorded and the backend's loop acts on them: the first asks for an orderly
stop, the second kills at once, later ones are ignored, so clean-up is never cut short.
Must not install handlers outside the main thread, nor exit the process itself.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tfyarn.core.errors import interrupt_exit, interrupt_words

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A signal arrived before anything was started (BaseException: no `except Exception`
    on the way may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(interrupt_words(signum))
        self.signum = signum
        self.exit_code = interrupt_exit(signum)


@dataclass
class Interrupts:
    """Signals received so far, and whether one should abort at once."""

    received: list[int] = field(default_factory=list)
    armed: bool = True

    def install(self) -> Interrupts:
        for sig in HANDLED:
            signal.signal(sig, self._handler)
        return self

    def _handler(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        if self.armed:
            raise Interrupted(signum)

    @contextmanager
    def deferred(self) -> Iterator[Interrupts]:
        """While processes or an application exist: record, never raise."""
        self.armed = False
        yield self

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None

    @property
    def count(self) -> int:
        return len(self.received)

    def words(self) -> str:
        return interrupt_words(self.first or signal.SIGINT)

    def exit_code(self) -> int:
        return interrupt_exit(self.first or signal.SIGINT)
