"""The one redaction rule: what tfyarn prints, serves or keeps shows no secret.

A secret is (a) the value of a setting whose name looks like one (`*token*`, `*secret*`,
`*password*`, `*key*`, `*credential*`, and the names a site adds in tfyarn.yaml's
`redact:`) written `NAME=value`, `"NAME": "value"`, or `NAME: value` opening a line; (b)
a token in a URL (`delegation=`, `token=`, as WebHDFS and tfyarn's own pages carry
them); (c) the value of every such `--env` setting of the job, wherever it appears (a
task that prints its API key bare). Like Spark's `spark.redaction.regex`, but applied to
free text as well as to settings, and to values known by the job. Must not do I/O (core:
stdlib only).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

NAMES = ("token", "secret", "password", "passwd", "key", "credential")
URL_PARAMS = ("delegation", "token")
SHOWN = "*********(redacted)"
MIN_VALUE = 4  # shorter values are not hunted for bare: "1" would blank every digit


def _setting(names: Iterable[str]) -> re.Pattern[str]:
    alts = "|".join(f"(?:{n})" for n in names)
    # NAME=value, NAME: value, "NAME": "value", --NAME value is not a setting (a flag)
    return re.compile(
        rf"""(?ix)
        (?P<name>["']?[\w.\-]*(?:{alts})[\w.\-]*["']?)
        (?P<sep>\s*[=:]\s*)
        (?P<value>"[^"]*"|'[^']*'|[^\s,;&"'}}\]]+)""")


_NOT_SECRET = re.compile(r"(?:Error|Exception|Warning)[\"']?$")  # KeyError: 'x' is no secret
_URL = re.compile(rf"(?i)(?P<name>[?&](?:{'|'.join(URL_PARAMS)})=)(?P<value>[^&\s\"'#]+)")


@dataclass(frozen=True)
class Redactor:
    """The rule with a site's extra names (regexes) and a job's secret values."""

    names: tuple[str, ...] = NAMES
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_setting", _setting(self.names))
        ordered = sorted({v for v in self.values if len(v) >= MIN_VALUE}, key=len, reverse=True)
        object.__setattr__(self, "_values",
                           re.compile("|".join(re.escape(v) for v in ordered)) if ordered
                           else None)

    def secret_name(self, name: str) -> bool:
        """Whether a setting called `name` holds a secret (`--env API_TOKEN=...`)."""
        return any(re.search(n, name, re.IGNORECASE) for n in self.names)

    def with_env(self, env: Iterable[tuple[str, str]]) -> Redactor:
        """This rule, also hiding the values of `env`'s secret-named settings."""
        found = tuple(v for k, v in env if self.secret_name(k))
        return Redactor(self.names, (*self.values, *found)) if found else self

    def __call__(self, text: str) -> str:
        if not text:
            return text
        values: re.Pattern[str] | None = self._values  # type: ignore[attr-defined]
        if values is not None:
            text = values.sub(SHOWN, text)
        text = _URL.sub(lambda m: m["name"] + SHOWN, text)
        return self._setting.sub(_hide, text)  # type: ignore[attr-defined]

    def lines(self, lines: Iterable[str]) -> tuple[str, ...]:
        return tuple(self(x) for x in lines)


def _hide(m: re.Match[str]) -> str:
    value, name = m["value"], m["name"]
    if _NOT_SECRET.search(name):
        return m[0]
    line_start = m.string.rfind("\n", 0, m.start()) + 1
    if ":" in m["sep"] and not name.startswith(("'", '"')) \
            and m.string[line_start:m.start()].strip():
        return m[0]  # prose ("--env API_TOKEN: the file..."), not a `name: value` line
    if value.startswith(("'", '"')):
        return f"{m['name']}{m['sep']}{value[0]}{SHOWN}{value[0]}"
    if value == SHOWN or value.startswith(SHOWN):
        return m[0]
    return f"{m['name']}{m['sep']}{SHOWN}"


def site_rule(extra: Iterable[str]) -> Redactor:
    """The rule with tfyarn.yaml's `redact:` names added (each a regex matched against a
    setting's name, case-insensitive)."""
    extra = tuple(extra)
    return Redactor((*NAMES, *extra)) if extra else DEFAULT


DEFAULT = Redactor()


def redact(text: str) -> str:
    """`text` under the default rule."""
    return DEFAULT(text)
