"""The job page in a real headless browser (Debian's chromium): during a local job, and
after a failure (served from that job's kept store by the same page server)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import job_processes

from tfyarn.core.jobspec import JobSpec
from tfyarn.protocol import kv as kvmod
from tfyarn.runtime.jobpage import JobPage, read_view

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser(tmp_path):
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

    def shot(url: str, path: Path) -> None:
        subprocess.run([CHROMIUM, *FLAGS, *profile, "--window-size=1100,520",
                        f"--screenshot={path}", url], capture_output=True, timeout=60)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    dom.shot = shot
    return dom


def rows(dom: str) -> dict[str, list[str]]:
    """task -> its cells, from the rendered table."""
    out = {}
    for row in re.findall(r'<tr class="task">(.*?)</tr>', dom, re.S):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        out[cells[0]] = cells
    return out


def test_page_during_a_job_and_after_its_failure(browser, tmp_path):
    stop = tmp_path / "stop"
    steps = ("import time, tfyarn; [tfyarn.progress(i, loss=1 / i) or time.sleep(0.1) "
             "for i in range(1, 8)]; time.sleep(300)")  # worker:0 reports steps 1-7
    cmd = (f'if [ "$TFYARN_TASK_INDEX" = 1 ]; then while [ ! -e {stop} ]; do sleep 0.2; done; '
           f'echo "worker one gives up" >&2; exit 3; fi; {sys.executable} -c "{steps}"')
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                             "2", "-a", "census<&>", "--local", "-c", cmd], cwd=tmp_path,
                            env={**os.environ, "TMPDIR": str(tmp_path)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    job = proc.stdout.readline().strip()
    url, seen = None, []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("tfyarn: job page: "):
            url = line.split(": ", 2)[2].strip()
        if url and "cluster spec published" in "".join(seen):
            break
    assert url and url.startswith("http://127.0.0.1:"), "".join(seen)
    deadline = time.monotonic() + 60
    while True:  # both tasks' processes have started, worker:0's step 7 came (a heartbeat)
        dom = browser(url)
        table = rows(dom)
        if [c[2] for c in table.values()] == ["running", "running"] and \
                table["worker:0"][4].startswith("step 7 ") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert set(table) == {"worker:0", "worker:1"}, dom
    assert [c[2] for c in table.values()] == ["running", "running"], dom
    assert re.match(r"127\.0\.0\.1:\d+$", table["worker:0"][1])
    assert re.fullmatch(r"step 7 \(\d+\.\d/s\)", table["worker:0"][4]), table  # progress
    assert table["worker:1"][4] == ""  # never reported
    assert 'id="state" class="RUNNING"' in dom and "<h1>census&lt;&amp;&gt;</h1>" in dom
    assert 'http-equiv="refresh"' in dom
    log = browser(url + "logs/worker-0")
    assert "worker:0: registered at" in log
    browser.shot(url, tmp_path / "running.png")

    stop.touch()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and job_processes(job) == []
    # the failed job's dir is kept: the page over its store says how it ended
    root = next(tmp_path.glob(f"tfyarn-{job}-*"))
    spec = JobSpec.from_json((root / "job.json").read_text())
    store = kvmod.DirKV(str(root / "kv"))
    page = JobPage(lambda: read_view(spec, store, job, time.monotonic(),
                                     lambda t: f"logs/{spec.container_of(t).name}"))
    after = page.start("127.0.0.1")
    try:
        dom = browser(after)
        browser.shot(after, tmp_path / "failed.png")
    finally:
        page.stop()
    table = rows(dom)
    assert table["worker:1"][2] == "failed" and table["worker:1"][3].startswith("exit 3")
    assert table["worker:0"][2] == "stopped"
    assert 'id="state" class="FAILED"' in dom and "worker:1 exited with code 3" in dom
    assert "worker one gives up" in re.search(r"<pre id=\"tail\">(.*?)</pre>", dom, re.S)[1]
    assert 'http-equiv="refresh"' not in dom  # a final page stays put
    goodput = re.search(r"<ul id=\"goodput\">(.*?)</ul>", dom, re.S)[1]
    assert re.search(r"goodput \d+%: ", goodput) and "FAILED (permanent): steps 1-7" in goodput
