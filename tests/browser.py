"""A real headless browser (Debian's chromium) for the page tests, local and on YARN."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def make_browser(tmp_path: Path) -> Callable[[str], str]:
    """`browser(url)` -> the DOM chromium rendered; `browser.shot(url, path)` a PNG.
    CI sets TFYARN_REQUIRE_BROWSER=1 (it installs chromium), so there it never skips."""
    if CHROMIUM is None:
        if os.environ.get("TFYARN_REQUIRE_BROWSER"):
            pytest.fail("chromium is missing (apt-get install chromium)")
        pytest.skip("no chromium here (apt-get install chromium)")
    profile = ["--user-data-dir=" + str(tmp_path / "chromium")]

    def dom(url: str) -> str:
        out = subprocess.run([CHROMIUM, *FLAGS, *profile, "--dump-dom", url],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    def shot(url: str, path: Path, height: int = 520) -> None:
        subprocess.run([CHROMIUM, *FLAGS, *profile, f"--window-size=1100,{height}",
                        f"--screenshot={path}", url], capture_output=True, timeout=60)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    dom.shot = shot
    return dom


def cells(dom: str, row_class: str) -> dict[str, list[str]]:
    """first cell -> the row's cells (tags stripped), for each `<tr class=row_class>`."""
    out = {}
    for row in re.findall(rf'<tr class="{row_class}">(.*?)</tr>', dom, re.S):
        texts = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        out[texts[0]] = texts
    return out


def links(dom: str, row_class: str) -> dict[str, str]:
    """first cell's text -> its link, for each `<tr class=row_class>` whose first cell links."""
    out = {}
    for row in re.findall(rf'<tr class="{row_class}">(.*?)</tr>', dom, re.S):
        found = re.match(r'<td><a href="([^"]*)">([^<]*)</a>', row)
        if found:
            out[found[2]] = found[1]
    return out


def history_server(env: dict, *args: str) -> tuple[subprocess.Popen, str]:
    """`tfyarn history --port 0 ARGS` started; (process, its URL)."""
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "tfyarn", "history", "--port", "0", *args],
                            env=env, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    if not line.startswith("tfyarn: history: "):
        proc.kill()
        raise AssertionError(line + proc.stderr.read())
    return proc, line.split(": ", 2)[2].strip()


def join(url: str, rel: str) -> str:
    """`rel` opened from `url` as its owner does: a local page's `?token=` kept (a browser
    keeps it as a cookie; each headless chromium here starts without cookies)."""
    base, _, query = url.partition("?")
    return base + rel + (f"?{query}" if query else "")
