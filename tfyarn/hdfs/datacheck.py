"""`tfyarn check-data`: the data pre-flight that catches what breaks CSV readers in TF.

The seed's "Expect 15 fields but have 0 in record 0" is a blank line (UCI's adult.data
ends with one); adult.test starts with a non-CSV line. Owns the pure check of lines
(blank lines, field-count mismatches, header-like lines, with line numbers) and reading
local or hdfs:// files for it (hdfs:// over WebHDFS, address from HADOOP_CONF_DIR).
Must not change the files it checks.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tfyarn.core.errors import SpecError

SAMPLE = 1000  # lines whose most common field count is "expected" when --fields is not given
SHOWN = 10  # findings shown per kind and file


@dataclass(frozen=True)
class Finding:
    line: int
    kind: str  # "blank", "fields", "header"
    detail: str


def _numeric(field: str) -> bool:
    try:
        float(field)
        return True
    except ValueError:
        return False


def expected_fields(lines: list[str]) -> int:
    counts = collections.Counter(len(x.split(",")) for x in lines[:SAMPLE] if x.strip())
    return counts.most_common(1)[0][0] if counts else 0


def check_lines(lines: list[str], fields: int | None = None) -> list[Finding]:
    """Every line a CSV reader expecting `fields` fields (default: the most common count)
    would choke on."""
    want = fields or expected_fields(lines)
    numeric_cols = _numeric_columns(lines, want)
    out = []
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            out.append(Finding(n, "blank", "blank line"))
            continue
        parts = line.split(",")
        if len(parts) != want:
            out.append(Finding(n, "fields", f"{len(parts)} fields, expected {want}: "
                               f"{line[:60]!r}"))
        elif numeric_cols and not any(_numeric(parts[i].strip()) for i in numeric_cols):
            out.append(Finding(n, "header", f"looks like a header (no number where the other "
                               f"lines have them): {line[:60]!r}"))
    return out


def _numeric_columns(lines: list[str], want: int) -> list[int]:
    """Columns numeric in nearly every sampled line of the expected width (sampled from
    the second line on: the first is the usual place of a header)."""
    rows = [x.rstrip("\r\n").split(",") for x in lines[1:SAMPLE] if x.strip()]
    rows = [r for r in rows if len(r) == want]
    if len(rows) < 3:
        return []
    return [i for i in range(want)
            if sum(_numeric(r[i].strip()) for r in rows) >= 0.9 * len(rows)]


def read_lines(path: str, conf_dir: str | None, user: str) -> list[str]:
    if path.startswith(("hdfs://", "webhdfs://")):
        return _hdfs_lines(path, conf_dir, user)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readlines()
    except OSError as exc:
        raise SpecError(f"check-data: cannot read {path}: {exc.strerror}") from None


def _hdfs_lines(uri: str, conf_dir: str | None, user: str) -> list[str]:
    from tfyarn.hdfs.webhdfs import client_for, failing_as, hdfs_path

    client = client_for(uri, conf_dir, user)
    with failing_as(f"check-data: cannot read {uri} over WebHDFS"), \
            client.read(hdfs_path(uri), encoding="utf-8") as f:
        return f.read().splitlines(keepends=True)


def report(path: str, findings: list[Finding]) -> Iterator[str]:
    by_kind: dict[str, list[Finding]] = collections.defaultdict(list)
    for f in findings:
        by_kind[f.kind].append(f)
    for kind, items in by_kind.items():
        for f in items[:SHOWN]:
            yield f"{path}:{f.line}: {f.detail}"
        if len(items) > SHOWN:
            yield f"{path}: ... {len(items) - SHOWN} more {kind} lines"


def check_paths(paths: Iterable[str], fields: int | None, conf_dir: str | None,
                user: str) -> tuple[list[str], int]:
    """Report lines for every path and the number of findings."""
    lines_out, total = [], 0
    for path in paths:
        findings = check_lines(read_lines(path, conf_dir, user), fields)
        total += len(findings)
        lines_out += list(report(path, findings)) or [f"{path}: clean"]
    return lines_out, total
