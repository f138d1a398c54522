"""The job page in a real headless browser (Debian's chromium): during a local job, and
after its failure, kept and served by `tfyarn history`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from browser import cells, history_server, join, links, make_browser
from conftest import job_processes


@pytest.fixture
def browser(tmp_path):
    return make_browser(tmp_path)


def rows(dom: str) -> dict[str, list[str]]:
    """task -> its cells, from the rendered table."""
    return cells(dom, "task")


def test_page_during_a_job_and_after_its_failure(browser, tmp_path):
    stop = tmp_path / "stop"
    steps = ("import time, tfyarn; [tfyarn.progress(i, loss=1 / i) or time.sleep(0.1) "
             "for i in range(1, 8)]; time.sleep(300)")  # worker:0 reports steps 1-7
    cmd = (f'if [ "$TFYARN_TASK_INDEX" = 1 ]; then while [ ! -e {stop} ]; do sleep 0.2; done; '
           f'echo "worker one gives up" >&2; exit 3; fi; {sys.executable} -c "{steps}"')
    env = {**os.environ, "TMPDIR": str(tmp_path), "TFYARN_HISTORY_DIR": str(tmp_path / "kept")}
    env.pop("HADOOP_CONF_DIR", None)  # `tfyarn history`: local jobs only
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                             "2", "-a", "census<&>", "--local", "-c", cmd], cwd=tmp_path,
                            env=env, text=True,
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
    log = browser(join(url, "logs/worker-0"))
    assert "worker:0: registered at" in log
    browser.shot(url, tmp_path / "running.png")
    history, listing = history_server(env)
    try:
        listed = browser(listing)  # the running job, linked to its live page
        assert cells(listed, "job")[job][4] == "RUNNING", listed
        assert links(listed, "job")[job] == url

        stop.touch()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1 and job_processes(job) == []
        listed = browser(listing)  # now its kept page: the driver saved it at the end
        row = cells(listed, "job")[job]
        assert row[1:5] == ["census&lt;&amp;&gt;", "tensorflow-worker", row[3], "FAILED"], row
        assert links(listed, "job")[job] == f"job/{job}/"
        kept = join(listing, f"job/{job}/")
        dom = browser(kept)
        browser.shot(kept, tmp_path / "failed.png")
        log = browser(join(kept, "logs/worker-1"))  # the page's relative log link, from the job dir
    finally:
        history.terminate()
        history.wait(timeout=30)
    table = rows(dom)
    assert table["worker:1"][2] == "failed" and table["worker:1"][3].startswith("exit 3")
    assert table["worker:0"][2] == "stopped"
    assert table["worker:0"][4].startswith("step 7 ")  # the progress it had reached
    assert 'id="state" class="FAILED"' in dom and "worker:1 exited with code 3" in dom
    assert "worker one gives up" in re.search(r"<pre id=\"tail\">(.*?)</pre>", dom, re.S)[1]
    assert 'http-equiv="refresh"' not in dom  # a final page stays put
    goodput = re.search(r"<ul id=\"goodput\">(.*?)</ul>", dom, re.S)[1]
    assert re.search(r"goodput \d+%: ", goodput) and "FAILED (permanent): steps 1-7" in goodput
    assert "worker one gives up" in log
