"""YARN's report on one application, typed: `AppReport`, with `YarnState` and
`FinalStatus` (YARN's own enums' values).

The ResourceManager answers in two shapes, its REST API's JSON (`from_rest`) and skein's
report object (`from_skein`, read by attribute: this module imports no skein); both
become the same record, so no caller compares YARN's strings or reads its dicts.
Must not do I/O (core: stdlib only).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class _Named(str, Enum):
    """An enum whose str() and format() are YARN's word for it (as printed before)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class YarnState(_Named):
    """YARN's YarnApplicationState."""

    NEW = "NEW"
    NEW_SAVING = "NEW_SAVING"
    SUBMITTED = "SUBMITTED"
    ACCEPTED = "ACCEPTED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    UNKNOWN = ""  # a shape this tfyarn does not know (a newer YARN): shown as given

    @property
    def terminal(self) -> bool:
        """The application ended (its final status is set)."""
        return self in (YarnState.FINISHED, YarnState.FAILED, YarnState.KILLED)

    @classmethod
    def of(cls, raw: object) -> YarnState:
        return _member(cls, raw)


class FinalStatus(_Named):
    """YARN's FinalApplicationStatus."""

    UNDEFINED = "UNDEFINED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    ENDED = "ENDED"

    @classmethod
    def of(cls, raw: object) -> FinalStatus:
        return _member(cls, raw, FinalStatus.UNDEFINED)


def _member(cls: Any, raw: object, default: Any = None) -> Any:
    """The member named by `raw` (a string, or skein's enum, whose str() is its name)."""
    name = getattr(raw, "name", None) or str(raw or "")
    try:
        return cls(name.upper())
    except ValueError:
        return default if default is not None else cls("")


ALL_STATES = tuple(s.value for s in YarnState if s is not YarnState.UNKNOWN)
ACTIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")


@dataclass(frozen=True)
class AppReport:
    """One application as the ResourceManager reports it. `started_ms`, `finished_ms`:
    epoch ms (0 when not known); `log_aggregation`: YARN's word, "" where the answer has
    none (skein's)."""

    app_id: str
    name: str = ""
    state: YarnState = YarnState.UNKNOWN
    final_status: FinalStatus = FinalStatus.UNDEFINED
    diagnostics: str = ""
    tracking_url: str = ""
    host: str = ""
    user: str = ""
    kind: str = ""  # the application type
    started_ms: int = 0
    log_aggregation: str = ""
    finished_ms: int = 0  # when YARN had its AM end: 0 while it runs, or still ends

    @property
    def ended(self) -> bool:
        return self.state.terminal

    @classmethod
    def from_rest(cls, app: Mapping[str, Any]) -> AppReport:
        """From one `app` of the RM's REST answer (`/ws/v1/cluster/apps[/ID]`)."""
        host = str(app.get("amHostHttpAddress") or "").rsplit(":", 1)[0]
        return cls(str(app.get("id", "")), str(app.get("name") or ""),
                   YarnState.of(app.get("state")), FinalStatus.of(app.get("finalStatus")),
                   str(app.get("diagnostics") or ""), str(app.get("trackingUrl") or ""),
                   host, str(app.get("user") or ""), str(app.get("applicationType") or ""),
                   _int(app.get("startedTime")), str(app.get("logAggregationStatus") or ""),
                   _int(app.get("finishedTime")))

    @classmethod
    def from_skein(cls, rep: Any) -> AppReport:
        """From skein's ApplicationReport (its attributes; skein is not imported here)."""
        host = str(getattr(rep, "host", "") or "")

        def millis(at: object) -> int:
            return int(at.timestamp() * 1000) if isinstance(at, datetime.datetime) \
                else _int(at)

        return cls(str(getattr(rep, "id", "")), str(getattr(rep, "name", "") or ""),
                   YarnState.of(getattr(rep, "state", None)),
                   FinalStatus.of(getattr(rep, "final_status", None)),
                   str(getattr(rep, "diagnostics", "") or ""),
                   str(getattr(rep, "tracking_url", "") or ""),
                   "" if host == "N/A" else host, str(getattr(rep, "user", "") or ""), "",
                   millis(getattr(rep, "start_time", None)), "",
                   millis(getattr(rep, "finish_time", None)))


def _int(raw: object) -> int:
    try:
        return int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0
