"""Training as its users see it (#47): el_submit's live line on a real pseudo-terminal
(`script`) and off one, the plots of the live and the kept page of a job that restarted
once in a real headless Chromium, the history listing's final metric, and the bound on
what a week-long job's page keeps."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from browser import cells, history_server, join, make_browser
from conftest import REPO, job_processes

from tfyarn.core.policy import SERIES_TASK_MAX, StepLog, attempt_time, goodput
from tfyarn.core.records import JobView, Outcome, StepReport, Training
from tfyarn.core.tfconfig import Task
from tfyarn.core.training import live_line, metric_rows
from tfyarn.runtime import steps
from tfyarn.runtime.jobpage import render

ARTIFACTS = Path(os.environ.get("TFYARN_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))

# 100 steps of 0.05 s, loss and accuracy every step, total=100; worker:1 also reports a
# made-up metric only at step 10 (kept as its latest from then on)
TRAIN = """import os, time, tfyarn
task = int(os.environ["TFYARN_TASK_INDEX"])
for step in range(1, 101):
    extra = {"lr": 0.5} if task == 1 and step == 10 else {}
    tfyarn.progress(step, total=100, loss=1.0 / step, accuracy=1 - 1.0 / step, **extra)
    time.sleep(0.05)
"""


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {**os.environ, "TMPDIR": str(tmp_path), "TFYARN_HISTORY_DIR": str(tmp_path / "kept"),
           **more}
    env.pop("HADOOP_CONF_DIR", None)
    return env


def _artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


def test_live_line_in_place_on_a_terminal_and_only_the_id_on_stdout(tmp_path):
    """Under a real pseudo-terminal (`script`), stderr gets the line drawn in place
    (carriage return, cleared line) again and again as the steps move, with the total,
    steps/s, the metrics and an ETA; stdout, redirected to a file, only the job id."""
    if shutil.which("script") is None:
        pytest.skip("no `script` (util-linux) here")
    (tmp_path / "train.py").write_text(TRAIN)
    out = tmp_path / "stdout"
    cmd = (f"{sys.executable} -m tfyarn.cli -t tensorflow-worker -wn 2 --local "
           f"--heartbeat-timeout 5 -f train.py -c 'python train.py' > {out}")
    run = subprocess.run(["script", "-qec", cmd, "/dev/null"], cwd=tmp_path,
                         env=_env(tmp_path, COLUMNS="200"), capture_output=True, timeout=180)
    tty = run.stdout.decode(errors="replace")
    assert run.returncode == 0, tty[-3000:]
    assert re.fullmatch(r"local_\w+\n", out.read_text()), out.read_text()
    drawn = re.findall(r"\r\x1b\[Ktfyarn: training: ([^\r\n]*)", tty)
    shown = [d for d in drawn if d.startswith("step ")]
    assert len({d.split(" ")[1] for d in shown}) >= 2, drawn  # it moved: several steps
    line = shown[-1]
    assert re.fullmatch(r"step (\d+|\d+ \(worker:.\) - \d+ \(worker:.\))/100 · \d+\.\d "
                        r"steps/s · accuracy [\d.]+ loss [\d.]+ (· ETA [\d.]+ s )?· attempt 1/1",
                        line), line
    assert any("ETA" in d for d in shown), shown
    assert "tfyarn: job local_" in tty and "SUCCEEDED" in tty
    # the final lines start on a cleared line: the last line drawn never runs into them
    assert re.search(r"\r\x1b\[Ktfyarn: job local_\w+ SUCCEEDED", tty), tty[-2000:]


def test_plain_lines_off_a_terminal(tmp_path):
    """stderr a pipe (cron): plain `tfyarn: training:` lines every TFYARN_PROGRESS_S, no
    carriage return or escape anywhere; stdout only the id."""
    (tmp_path / "train.py").write_text(TRAIN)
    out = subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                          "2", "--local", "--heartbeat-timeout", "5", "-f", "train.py", "-c",
                          "python train.py"], cwd=tmp_path, capture_output=True, text=True,
                         env=_env(tmp_path, TFYARN_PROGRESS_S="1"), timeout=180)
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"local_\w+\n", out.stdout)
    assert "\r" not in out.stderr and "\x1b" not in out.stderr
    lines = [x for x in out.stderr.splitlines() if x.startswith("tfyarn: training: ")]
    assert lines and all(re.match(r"tfyarn: training: step [^·]*/100 · .* · attempt 1/1$", x)
                         for x in lines), lines
    assert len(set(lines)) == len(lines)  # a line only when it changed


def test_no_line_when_turned_off_or_never_reported(tmp_path):
    """TFYARN_PROGRESS_S=0: no line; a job whose tasks never report steps: no line."""
    (tmp_path / "train.py").write_text(TRAIN)
    quiet = subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                            "--local", "--heartbeat-timeout", "5", "-f", "train.py", "-c",
                            "python train.py"], cwd=tmp_path, capture_output=True, text=True,
                           env=_env(tmp_path, TFYARN_PROGRESS_S="0"), timeout=180)
    silent = subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                             "--local", "-c", "sleep 2"], cwd=tmp_path, capture_output=True,
                            text=True, env=_env(tmp_path, TFYARN_PROGRESS_S="0.5"), timeout=180)
    for out in (quiet, silent):
        assert out.returncode == 0, out.stderr
        assert "training:" not in out.stderr, out.stderr


# attempt 0: steps 1-40, then worker:1 is killed (retryable); attempt 1 resumes at 20 and
# steps on until the file STOP appears, then ends at the next multiple of 10
RESTARTING = """import os, pathlib, sys, time, tfyarn
task, attempt = int(os.environ["TFYARN_TASK_INDEX"]), int(os.environ["TFYARN_ATTEMPT"])
stop = pathlib.Path(sys.argv[1])
step = 20 if attempt else 0
while True:
    step += 1
    tfyarn.progress(step, total=400, loss=2.0 / step + 0.1 * task)
    time.sleep(0.05)
    if attempt == 0 and task == 1 and step == 40:
        os.kill(os.getpid(), 9)
    if attempt and stop.exists() and step % 10 == 0:
        break
"""


def _plots(dom: str) -> dict[str, str]:
    """figure id -> its SVG, for the training section's figures."""
    return dict(re.findall(r'<figure id="([^"]+)">(.*?)</figure>', dom, re.S))


def test_plots_on_the_live_and_the_kept_page_of_a_job_that_restarted(tmp_path):
    """Chromium renders the live page during the second attempt and the kept page after:
    the loss over steps (a line per task and attempt), steps/s over time and the
    attempts' timeline (the first FAILED with its lost time, the second RUNNING, then
    SUCCEEDED); the history listing shows the final loss. Screenshots kept as artifacts."""
    browser = make_browser(tmp_path)
    (tmp_path / "train.py").write_text(RESTARTING)
    stop = tmp_path / "stop"
    env = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                             "-wn", "2", "--local", "--max-restarts", "1", "--heartbeat-timeout",
                             "5", "-f", "train.py", "-c", f"python train.py {stop}"],
                            cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    job = proc.stdout.readline().strip()
    url = None
    for line in proc.stderr:
        if line.startswith("tfyarn: job page: "):
            url = line.split(": ", 2)[2].strip()
            break
    assert url, job
    deadline = time.monotonic() + 120
    while True:  # the second attempt's reports have reached the page
        dom = browser(url)
        figs = _plots(dom)
        timeline = figs.get("plot-attempts", "")
        if ('class="attempt RUNNING"' in timeline and "(attempt 2)" in
                figs.get("plot-metric-loss", "")) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    browser.shot(url, _artifact("training-live.png"), 1700)
    stop.touch()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert job_processes(job) == []
    for title in ("worker:0 (attempt 1)", "worker:1 (attempt 1)", "worker:0 (attempt 2)"):
        assert f"<title>{title}</title>" in figs["plot-metric-loss"], title
    assert 'class="attempt FAILED"' in timeline and 'class="lost"' in timeline, timeline
    assert "<polyline" in figs["plot-rate"]
    assert 'id="plot-metric-loss"' in dom and "loss over steps" in dom

    history, listing = history_server(env)
    try:
        kept = join(listing, f"job/{job}/")
        dom = browser(kept)
        browser.shot(kept, _artifact("training-kept.png"), 1700)
        listed = browser(listing)
        browser.shot(listing, _artifact("training-history.png"))
    finally:
        history.terminate()
        history.wait(timeout=30)
    figs = _plots(dom)
    assert set(figs) >= {"plot-metric-loss", "plot-rate", "plot-attempts"}, set(figs)
    rects = re.findall(r'class="attempt (\w+)"', figs["plot-attempts"])
    assert rects == ["FAILED", "SUCCEEDED"], rects
    assert figs["plot-metric-loss"].count("<polyline") == 4  # 2 tasks x 2 attempts
    assert re.search(r"goodput \d+%", figs["plot-attempts"])
    items = re.findall(r"<li>(attempt \d: [^<]*)</li>", dom)
    assert items[0].startswith("attempt 1: FAILED (retryable)") and "lost" in items[0], items
    assert items[1].startswith("attempt 2: SUCCEEDED"), items
    row = cells(listed, "job")[job]
    assert re.fullmatch(r"loss 0\.\d+", row[-1]), row  # the final metric, worker:0's


def test_a_million_steps_keep_a_small_page(tmp_path):
    """A task reporting 1,000,000 steps: its job's kept page stays under 512 KB (the
    series is down-sampled, not every step), and so does a page built from a week of
    heartbeats (a report every 5 s: ~125,000) of each of 4 tasks over 1,000,000 steps,
    seen one by one, with a restart."""
    prog = ("import tfyarn\nfor s in range(1, 1_000_001):\n"
            "    tfyarn.progress(s, total=1_000_000, loss=1.0 / s, accuracy=1 - 1.0 / s)\n")
    (tmp_path / "million.py").write_text(prog)
    out = subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                          "--local", "--heartbeat-timeout", "5", "-f", "million.py", "-c",
                          "python million.py"], cwd=tmp_path, capture_output=True, text=True,
                         env=_env(tmp_path), timeout=300)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip()
    page = tmp_path / "kept" / f"{job}.json"
    view = JobView.from_json(page.read_text())
    assert view.training is not None and view.training.logs[-1].series["worker:0"].steps[-1] \
        == 1_000_000
    assert page.stat().st_size < 512 << 10 and len(render(view)) < 512 << 10

    logs, spans, t0 = [], [], 1.0e9
    tasks = [Task("worker", i) for i in range(4)]
    for attempt, (first, last) in enumerate(((1, 400_000), (300_000, 1_000_000))):
        log = StepLog()
        for s in range(first, last + 1, 8):  # 8 steps a heartbeat
            log.observe({t: StepReport(s, t0 + s, 1.0, {"loss": 1.0 / s, "accuracy": 0.5},
                                       first, t0 + first, 1_000_000) for t in tasks})
        outcome = Outcome("FAILED" if attempt == 0 else "SUCCEEDED", "", cause="retryable")
        spans.append((attempt_time(attempt, t0 + first, t0 + last, outcome, log), log))
        logs.append(log)
        assert all(len(x.times) <= SERIES_TASK_MAX for x in log.series.values())
    training = Training(goodput(spans, 1_000_000.0), tuple(log.shown(True) for log in logs),
                        t0)
    big = JobView("week", "tensorflow-worker", "local_x", "SUCCEEDED", "11 days", 1, 2, (),
                  training=training, refresh=False)
    html = render(big)
    assert len(big.to_json()) < 512 << 10 and len(html) < 512 << 10, (len(big.to_json()),
                                                                      len(html))
    rows = metric_rows(training)
    assert rows[-1]["step"] == 1_000_000 and {"task", "attempt", "step", "time", "loss",
                                              "accuracy"} <= set(rows[-1])


def test_a_metric_is_kept_until_reported_again_and_total_read_back(tmp_path):
    """`progress(step, total=, **metrics)`: the record holds the total, and a metric
    reported once (an epoch's loss) stays the latest until reported again."""
    path = tmp_path / "steps"
    reporter = steps._open(str(path))
    reporter.write(1, 10, {"loss": 0.5})
    reporter.write(2, 10, {})
    r = steps.read(str(path), None)
    assert (r.step, r.total, dict(r.metrics)) == (2, 10, {"loss": 0.5})
    reporter.write(3, None, {"acc": 0.9})
    r = steps.read(str(path), None)
    assert (r.step, r.total, dict(r.metrics)) == (3, None, {"loss": 0.5, "acc": 0.9})


def test_the_line_names_the_slowest_and_fastest_task_and_the_eta():
    reports = {"worker:0": StepReport(120, 0.0, 2.0, {"loss": 0.25}, 0, 0.0, 600),
               "chief:0": StepReport(150, 0.0, 3.0, {"loss": 0.125, "acc": 0.875}, 0, 0.0, 600)}
    assert live_line(reports, 1, 3) == ("step 120 (worker:0) - 150 (chief:0)/600 · 2.0 steps/s · "
                                        "acc 0.875 loss 0.125 · ETA 4 min 00 s · attempt 2/3")
    assert live_line({}, 0, 1) is None


def test_a_forged_metric_name_is_escaped_on_the_page():
    """A metric's name is the task's to choose: it reaches the page as text only."""
    log = StepLog()
    for s in (1, 2):
        log.observe({Task("worker", 0): StepReport(s, float(s), 1.0,
                                                   {"<script>alert(1)</script>": 1.0 / s})})
    t = Training(goodput([(attempt_time(0, 0.0, 3.0, None, log), log)], 3.0),
                 (log.shown(True),), 0.0)
    html = render(JobView("n", "t", "j", "RUNNING", "3 s", 0, 1, (), training=t))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    line = live_line({"worker:0": StepReport(5, 0.0, 1.0, {"\x1b]0;title\x07": 1.0})}, 0, 1)
    assert line == "step 5 · 1.0 steps/s · ?]0;title? 1 · attempt 1/1"  # shown, not acted on
    uneven = replace(t, logs=(replace(t.logs[0], times=t.logs[0].times[:1]),))
    assert "plot-rate" in render(JobView("n", "t", "j", "RUNNING", "3 s", 0, 1, (),
                                         training=uneven))  # a forged page: cut, not a 500


def test_the_line_says_a_new_attempt_has_not_reported_yet(tmp_path):
    """From a real local store: gang 0's reports make the line; gang 1 (the restart)
    has none yet, so the line says so, where a job that never reported shows none."""
    import io

    from tfyarn.client.liveline import PLAIN, LiveLine
    from tfyarn.protocol import kv as kvmod

    store = kvmod.DirKV(str(tmp_path / "kv"))
    out = io.StringIO()
    line = LiveLine(out, PLAIN, every_s=0.0)
    line.look(store, 0, 0, 2)
    assert out.getvalue() == ""  # nothing reported: no line
    kvmod.Scoped(store, 0).put(kvmod.steps_key(Task("worker", 0)),
                               StepReport(7, 1.0, 2.0, {"loss": 0.5}, 0, 0.0, 70).to_json())
    line.look(store, 0, 0, 2)
    store.put(kvmod.PHASE, "stopping")  # the gang stops: the line is cleared, not redrawn
    line.look(store, 0, 0, 2)
    assert line.text is None
    store.put(kvmod.PHASE, "registering")  # the restart
    line.look(store, 1, 1, 2)
    assert out.getvalue().splitlines() == [
        "tfyarn: training: step 7/70 · 2.0 steps/s · loss 0.5 · ETA 31 s · attempt 1/2",
        "tfyarn: training: attempt 2/2: no step reported yet"]


def test_the_series_kept_follow_task_order_as_tasks_first_report_late():
    """A gang's first 16 tasks in task order keep series, whichever reported first: the
    order is taken again whenever a task reports for the first time (not every tick),
    and a log restored from what was kept (a later AM attempt) takes it too."""
    from tfyarn.core.policy import SERIES_TASKS

    def tick(log: StepLog, step: int, indexes) -> None:
        log.observe({Task("worker", i): StepReport(step, float(step), 1.0, {}, 0, 0.0)
                     for i in indexes})

    log = StepLog()
    tick(log, 1, range(10, 30))
    assert sorted(log.series) == sorted(f"worker:{i}" for i in range(10, 26))
    tick(log, 2, range(10, 30))
    tick(log, 3, range(0, 30))  # worker:0-9 start late: they displace worker:16-25
    assert set(log.series) == {f"worker:{i}" for i in range(SERIES_TASKS)}
    again = StepLog.of(log.kept())
    tick(again, 4, range(30, 32))
    assert set(again.series) == {f"worker:{i}" for i in range(SERIES_TASKS)}
    assert [len(again.series[f"worker:{i}"].steps) for i in (0, 10)] == [1, 3]
