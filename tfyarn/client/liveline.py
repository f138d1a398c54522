"""The live line on training: what el_submit (local and YARN) and `Job.wait(progress=)`
show while a job trains, from the tasks' step reports in the job's store
(`core.training.live_line` words it).

On a terminal it is one line on stderr, rewritten in place (each `say` line clears it
first; task output relayed to the terminal is written above it); off a terminal, a plain
`tfyarn: training: ...` line every LIVE_PLAIN_S when it changed, so a cron log stays
readable; in a notebook, one output cell updated in place. Must not write stdout (it
carries the job id only) nor fail the job it shows: a store that does not answer skips
a look.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from tfyarn.core.errors import StoreGone
from tfyarn.core.records import RecordError
from tfyarn.core.say import CLEAR_LINE
from tfyarn.core.settings import Settings
from tfyarn.core.timing import LIVE_LINE_S, LIVE_PLAIN_S
from tfyarn.core.training import live_line
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate

TTY, PLAIN, CELL = "tty", "plain", "cell"


@dataclass
class LiveLine:
    """One job's line, drawn on `out` (TTY or PLAIN) or through `cell` (CELL: a
    notebook's output, given the line's text)."""

    out: IO[str] | None
    mode: str
    cell: Callable[[str], None] | None = None
    every_s: float = LIVE_LINE_S
    text: str | None = None  # the last line drawn or printed (None: none now)
    reported: bool = False  # some task reported a step (a later attempt's wait is said)
    looked: float = -1e9
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def on(cls, out: IO[str] | None, settings: Settings) -> LiveLine | None:
        """The line for `out` (stderr): in place on a terminal, plain lines off one (every
        TFYARN_PROGRESS_S); None when it is closed or TFYARN_PROGRESS_S is 0."""
        plain_s = LIVE_PLAIN_S if settings.progress_s is None else settings.progress_s
        if out is None or plain_s == 0:
            return None
        try:
            tty = out.isatty()
        except (OSError, ValueError):
            return None
        return cls(out, TTY) if tty else cls(out, PLAIN, every_s=plain_s)

    def look(self, store: kvmod.KV, gang: int, attempt: int, attempts: int,
             now: float | None = None) -> None:
        """Read the running gang's step reports (at most every `every_s`) and show them;
        while the gang stops, clear the line (it would only go stale)."""
        now = time.monotonic() if now is None else now
        if now - self.looked < self.every_s:
            return
        self.looked = now
        try:
            if store.get(kvmod.PHASE) == "stopping":
                self.end()
                return
            reports = taskstate.read_steps(kvmod.Scoped(store, gang))
        except (StoreGone, RecordError, OSError):
            return  # the job's end, or a store away for a moment: the next look
        text = live_line({str(t): r for t, r in reports.items()}, attempt, attempts)
        self.reported = self.reported or text is not None
        if text is None and self.reported:  # a new attempt: no report of it yet
            text = f"attempt {attempt + 1}/{attempts}: no step reported yet"
        if text is not None:
            self.show(text)

    def show(self, text: str) -> None:
        with self.lock:
            if self.mode == PLAIN:
                if text != self.text:
                    self._write(f"tfyarn: training: {text}\n")
            elif self.mode == CELL:
                if self.cell is not None and text != self.text:
                    self.cell(f"training: {text}")
            else:
                self._write(self._drawn(text))
            self.text = text

    def _drawn(self, text: str) -> str:
        width = shutil.get_terminal_size((100, 24)).columns - 1
        line = f"tfyarn: training: {text}"
        return CLEAR_LINE + (line if len(line) <= width else line[:max(width - 1, 0)] + "…")

    @classmethod
    def in_cell(cls) -> LiveLine | None:
        """A notebook's line: one output updated in place (IPython's display), when this
        runs in a Jupyter kernel; else None."""
        try:
            from IPython import get_ipython  # type: ignore[attr-defined]
            from IPython.display import Pretty, display
        except ImportError:
            return None
        shell = get_ipython()
        if shell is None or not hasattr(shell, "kernel"):
            return None
        handle: Any = None

        def cell(text: str) -> None:
            nonlocal handle
            if handle is None:
                handle = display(Pretty(text), display_id=True)
            else:
                handle.update(Pretty(text))

        return cls(None, CELL, cell)

    def around(self, write: Callable[[], object]) -> None:
        """Others' output (relayed task lines, a background client's), written by
        `write`: on a terminal the line is cleared first and drawn again after."""
        with self.lock:
            drawn = self.mode == TTY and self.text is not None
            if drawn:
                self._write(CLEAR_LINE)
            write()
            if drawn and self.text is not None:
                self._write(self._drawn(self.text))

    def above(self, out: IO[bytes] | None) -> IO[bytes] | None:
        """`out` for others' output (relayed task output): on a terminal, each write
        clears the line first and draws it again after."""
        if out is None or self.mode != TTY:
            return out
        return _Above(self, out)  # type: ignore[return-value]

    def end(self) -> None:
        """The job ended: a line in place is cleared (the final lines follow)."""
        with self.lock:
            if self.mode == TTY and self.text is not None:
                self._write(CLEAR_LINE)
            self.text = None

    def _write(self, s: str) -> None:
        if self.out is None:
            return
        try:
            self.out.write(s)
            self.out.flush()
        except (OSError, ValueError):
            self.out = None  # a closed terminal: the job goes on without its line


@dataclass
class _Above:
    """A binary stream whose writes go above the live line."""

    line: LiveLine
    out: IO[bytes]

    def write(self, data: bytes) -> int:
        self.line.around(lambda: (self.out.write(data), self.out.flush()))
        return len(data)

    def flush(self) -> None:
        self.out.flush()
