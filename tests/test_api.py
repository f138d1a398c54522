"""The Python API in this process, as a notebook uses it: real local jobs (a background
`--local` client each), real processes, real process-table checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import interrupting
import pytest
from conftest import job_processes

import tfyarn
from tfyarn.protocol.taskstate import State


@pytest.fixture(autouse=True)
def tmpdir_env(tmp_path, monkeypatch):
    """Job dirs in the test's own dir, as el_submit's fixture has them."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)


def test_a_local_job_from_python_logs_each_line_once_and_ends_with_its_outcome(capfd):
    job = tfyarn.submit(kind="tensorflow-worker", workers=3, local=True,
                        command="for i in 1 2 3; do echo line-$i-of-$TFYARN_TASK_INDEX; done")
    assert job.id.startswith("local_")
    lines = [x for x in job.logs(follow=True) if x.startswith("line-")]
    assert sorted(lines) == sorted(f"line-{i}-of-{t}" for i in (1, 2, 3) for t in range(3))
    outcome = job.wait()
    assert outcome.state == "SUCCEEDED" and outcome.message == "all 3 tasks exited with code 0"
    assert [(str(s.task), s.state) for s in job.tasks()] == [
        (f"worker:{i}", State.SUCCEEDED) for i in range(3)]
    assert job.status().final_status == "SUCCEEDED"
    assert "SUCCEEDED" in capfd.readouterr().err  # the client's progress, on our stderr
    assert job_processes(job.id) == []


def test_a_local_jobs_model_dir_outlives_its_job_dir(tmp_path):
    write = 'mkdir -p "$TFYARN_MODEL_DIR" && echo w > "$TFYARN_MODEL_DIR/saved_model.pb"'
    job = tfyarn.submit(kind="standalone", local=True, command=write)
    assert job.wait().state == "SUCCEEDED"
    model = job.model_dir
    assert os.listdir(model) == ["saved_model.pb"]
    assert os.listdir(os.path.dirname(model)) == ["model"]  # the rest of the job dir went
    given = tfyarn.submit(kind="standalone", local=True, command=write, model_dir="out/m")
    assert given.model_dir == str(tmp_path / "out" / "m")
    given.wait()
    assert os.listdir(tmp_path / "out" / "m") == ["saved_model.pb"]


def test_bad_options_raise_the_flags_words_as_a_value_error(el_submit):
    with pytest.raises(ValueError) as bad:
        tfyarn.submit(kind="tensorflow-worker", workers=0, command="true", local=True)
    assert isinstance(bad.value, tfyarn.SpecError)
    cli = el_submit("-t", "tensorflow-worker", "-wn", "0", "--local", "-c", "true")
    assert cli.stderr.strip() == f"Error: {bad.value}"  # the one parser's words
    with pytest.raises(tfyarn.SpecError, match=r"unknown option 'wrokers' \(did you mean "
                                               r"workers\?\)"):
        tfyarn.submit(kind="tensorflow-worker", wrokers=2, command="true", local=True)
    with pytest.raises(tfyarn.SpecError, match="-x: expected True or False, got 'maybe'"):
        tfyarn.submit(exit_ps="maybe", command="true", local=True)
    assert [p for p in os.listdir(os.environ["TMPDIR"]) if p.startswith("tfyarn-")] == []


def test_python_values_are_the_flags_values(tmp_path):
    from tfyarn.api.submit import job_spec

    (tmp_path / "a.py").write_text("")
    (tmp_path / "data").mkdir()
    _, spec = job_spec(command=["python", "a.py"], kind="tensorflow-ps", ps=1, workers=2,
                       worker_memory="2g", worker_gpus=0, exit_ps=True,
                       files=["a.py", tmp_path / "data"], env={"A": "1", "B": "x=y"},
                       tags=["t1", "t2"], max_restarts=2)
    assert [(r.name, r.instances) for r in spec.roles] == [("ps", 1), ("chief", 1),
                                                            ("worker", 1)]
    assert spec.roles[2].resources.memory_mb == 2048
    assert spec.stop_ps_when_done and spec.max_restarts == 2
    assert [f.dest for f in spec.files] == ["a.py", "data"]
    assert spec.env == (("A", "1"), ("B", "x=y")) and spec.yarn.tags == ("t1", "t2")
    assert spec.command == "python a.py"


def test_a_failed_task_is_job_failed_naming_it_with_its_stderr():
    job = tfyarn.submit(kind="tensorflow-worker", workers=2, local=True,
                        command='[ "$TFYARN_TASK_INDEX" = 1 ] && { echo boom-1 >&2; exit 3; }; '
                                "true")
    with pytest.raises(tfyarn.JobFailed) as failed:
        job.wait()
    text = str(failed.value)
    assert text.splitlines()[0] == f"job {job.id} FAILED: worker:1 exited with code 3"
    assert "  boom-1" in text and failed.value.exit_code == 1
    assert failed.value.outcome.task == "worker:1"
    assert job_processes(job.id) == []


def test_run_returns_the_chiefs_value_of_a_function_defined_here():
    def place(scale, offset=0):
        import json

        config = json.loads(os.environ["TF_CONFIG"])
        return config["task"], scale * 2 + offset, len(config["cluster"]["worker"])

    assert tfyarn.run(place, 20, kwargs={"offset": 2}, kind="tensorflow-ps", ps=1, workers=3,
                      local=True) == ({"type": "chief", "index": 0}, 42, 2)


class Refused(Exception):
    """Defined in the test: it travels by value and comes back as itself."""


def test_run_raises_the_tasks_own_exception_with_its_traceback():
    def refuse():
        if os.environ["TFYARN_TASK_INDEX"] == "1":
            raise Refused("worker 1 refuses")
        return "fine"

    with pytest.raises(Refused, match="worker 1 refuses") as raised:
        tfyarn.run(refuse, kind="tensorflow-worker", workers=2, local=True)
    note = raised.value.__notes__[0]
    assert note.startswith("worker:1 raised it; its traceback:\nTraceback (most recent")
    assert ", in refuse\n" in note and note.endswith("Refused: worker 1 refuses")
    assert isinstance(raised.value.__cause__, tfyarn.JobFailed)


@pytest.fixture
def python_sigint():
    with interrupting.python_sigint():
        yield


def test_run_refuses_what_cannot_be_called_or_sent_before_submitting(tmp_path):
    """Not callable, or holding what cannot be pickled (a lock): SpecError naming `fn`,
    and no job started (no job dir, no env packed)."""
    import threading

    lock = threading.Lock()
    with pytest.raises(tfyarn.SpecError, match=r"^fn: .*None.* is not callable"):
        tfyarn.run(None, kind="tensorflow-worker", workers=2, local=True)
    with pytest.raises(tfyarn.SpecError, match=r"^fn: .* cannot be sent to the tasks"):
        tfyarn.run(lambda: lock.acquire(), kind="tensorflow-worker", workers=2, local=True,
                   environment="current")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_ctrl_c_in_wait_stops_the_job_and_leaves_nothing(python_sigint):
    """KeyboardInterrupt in wait() (Jupyter's interrupt, here a real SIGINT to this
    process) stops the job as el_submit's Ctrl-C does, and is raised again."""
    job = tfyarn.submit(kind="tensorflow-worker", workers=2, local=True, command="sleep 300")
    failed = interrupting.interrupt_once_running(job, 2, 60, 0.05)
    with pytest.raises(KeyboardInterrupt):
        job.wait()
    assert not failed, f"job.tasks() from another thread failed: {failed[0]!r}"
    assert job.status().final_status == "KILLED"
    assert job_processes(job.id) == []


def test_the_ctrl_c_test_passes_with_sigint_ignored_as_nohup_leaves_it():
    """`nohup pytest ... &` (or cron) starts Python with SIGINT ignored: the ctrl-c test
    sets the handling it relies on, so it passes there too instead of hanging. The inner
    pytest runs in this test's slot (`scripts/test-suites`): taking one of its own, it
    waited for the other, held by an integration test, past the timeout (a CI run)."""
    from conftest import REPO
    from locks import SLOTS

    test = f"{REPO}/tests/test_api.py::test_ctrl_c_in_wait_stops_the_job_and_leaves_nothing"
    env = {k: v for k, v in os.environ.items() if k != SLOTS}
    out = subprocess.run(["bash", "-c", f'trap "" INT; exec "$0" -m pytest -q -p '
                          f'no:cacheprovider {test}', sys.executable],
                         capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-3000:]


def test_attach_reads_a_job_started_by_el_submit(el_submit):
    started = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                                "-wn", "2", "--local", "-c", "sleep 300"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    job_id = started.stdout.readline().strip()
    job = tfyarn.attach(job_id)
    deadline = time.monotonic() + 60
    while [s.state for s in job.tasks()] != [State.RUNNING] * 2:
        assert time.monotonic() < deadline, job.tasks()
        time.sleep(0.05)
    assert job.status().state == "RUNNING" and "worker:1" in job._repr_html_()
    job.kill()  # no client of ours: the driver is asked through the store
    assert started.wait(timeout=60) == 3  # el_submit's exit code for KILLED
    assert job_processes(job_id) == []


def test_the_api_imports_nothing_heavy():
    code = ("import sys, tfyarn; tfyarn.submit; tfyarn.run; tfyarn.attach; "
            "print(sorted(m for m in ('skein', 'grpc', 'tensorflow', 'torch', 'click', "
            "'cloudpickle', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_the_readme_names_every_option():
    from conftest import REPO

    from tfyarn.api.options import OPTIONS

    readme = (REPO / "README.md").read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    for o in OPTIONS:
        assert f"`{o.field}`" in readme and f"`{o.flag}`" in readme, o


def test_the_notebook_example_runs_as_a_script():
    """examples/notebook/census_api.py: submit census with the API, follow its logs, wait
    and read the accuracy (locally, 2 epochs)."""
    from conftest import REPO

    out = subprocess.run([sys.executable, str(REPO / "examples" / "notebook" / "census_api.py")],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "CENSUS_EPOCHS": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SUCCEEDED - chief:0 finished" in out.stdout, out.stdout
    accuracy = float(out.stdout.rsplit("eval_accuracy=", 1)[1].split()[0])
    assert accuracy > 0.8
    assert re.search(r"progress rows: [1-9]\d*; last loss 0\.\d+ at step \d+", out.stdout)
    plot = out.stdout.split("loss plot: ", 1)[1].split()[0]  # from job.metrics()
    with open(plot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_notebook_example_runs_as_a_notebook(tmp_path):
    """The same file opened as a notebook (jupytext, as VS Code/Jupyter users open it) and
    executed cell by cell in a real ipykernel (nbclient): no `__file__`, the kernel's
    own sys.argv, its cwd the notebook's dir; it reaches the same accuracy."""
    jupytext = pytest.importorskip("jupytext", reason="jupytext: pip install -e '.[test]'")
    nbclient = pytest.importorskip("nbclient", reason="nbclient: pip install -e '.[test]'")
    from conftest import REPO

    folder = REPO / "examples" / "notebook"
    notebook = jupytext.read(folder / "census_api.py")
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(folder)}})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CENSUS_EPOCHS", "2")
        client.execute()
    out = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                  for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    assert "SUCCEEDED - chief:0 finished" in out, out[-3000:]
    assert float(out.rsplit("eval_accuracy=", 1)[1].split()[0]) > 0.8
    assert re.search(r"progress rows: [1-9]\d*; last loss 0\.\d+ at step \d+", out)
    images = [o for cell in notebook.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 1  # the loss plotted from job.metrics()


CALLER = """
import os, sys, tfyarn

def where():
    return sys.prefix

print("RESULT", tfyarn.run(where, kind="tensorflow-worker", workers=2,
                           environment="current", **eval(sys.argv[1])))
"""


def test_run_ships_the_callers_own_env(tmp_path):
    """environment='current': the caller's venv is packed once (then reused) and the
    tasks run in it, unpacked, not on the nodes' python."""
    from venvs import small_venv

    venv = small_venv(tmp_path)
    (tmp_path / "caller.py").write_text(CALLER)
    cache = tmp_path / "cache"

    def call() -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "python"), "caller.py", "{'local': True}"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "TFYARN_CACHE": str(cache)})

    first = call()
    assert first.returncode == 0, first.stderr[-3000:]
    prefix = first.stdout.split("RESULT ", 1)[1].strip()
    assert prefix.endswith("/env") and prefix != str(venv), prefix  # unpacked in the job dir
    assert "packing this env" in first.stderr
    archives = list((cache / "envs").glob("*.tar.gz"))
    assert len(archives) == 1
    again = call()
    assert again.returncode == 0 and "packing this env" not in again.stderr, again.stderr
    assert list((cache / "envs").glob("*.tar.gz")) == archives


def test_a_packed_env_is_the_same_bytes_every_time(tmp_path):
    """Byte-identical archives: the HDFS cache, keyed by content, uploads one once."""
    from tfyarn.api.packenv import _pack

    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "tool").write_text("#!/bin/sh\n")
    (src / "lib64").symlink_to("bin")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "x.pyc").write_bytes(b"\0")
    _pack(str(src), str(tmp_path / "a.tar.gz"))
    os.utime(src / "bin" / "tool", (1, 1))  # a later mtime changes nothing
    _pack(str(src), str(tmp_path / "b.tar.gz"))
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    import tarfile

    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert set(names) == {"bin", "bin/tool", "lib64"} and names["lib64"].issym()


PROGRESSING = """import time, tfyarn
for step in range(1, 61):
    tfyarn.progress(step, total=60, loss=1.0 / step)
    time.sleep(0.1)
"""


def test_wait_shows_the_live_line_in_a_notebook_cell_and_metrics_are_rows(tmp_path):
    """In a real ipykernel (nbclient): `job.wait(progress=True)` shows the live line as
    one output updated in place; `job.metrics()` returns the reported series as rows
    (also after the job's dir is gone: from its kept page), and the job's HTML view
    carries the plots."""
    nbclient = pytest.importorskip("nbclient", reason="nbclient: pip install -e '.[test]'")
    nbformat = pytest.importorskip("nbformat", reason="nbformat: pip install -e '.[test]'")
    (tmp_path / "train.py").write_text(PROGRESSING)
    cells = [
        "import tfyarn\n"
        f"job = tfyarn.submit(kind='tensorflow-worker', workers=2, local=True, "
        f"heartbeat_timeout='5', files=[{str(tmp_path / 'train.py')!r}], "
        "command='python train.py')",
        "outcome = job.wait(progress=True)",
        "rows = job.metrics()\n"
        "print('ROWS', len(rows), sorted(rows[-1]), rows[-1]['step'])",
        "job",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env = {"TMPDIR": str(tmp_path), "TFYARN_HISTORY_DIR": str(tmp_path / "kept")}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("HADOOP_CONF_DIR", raising=False)
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    waited = nb.cells[1].outputs
    shown = [o for o in waited if o.get("output_type") == "display_data"]
    assert len(shown) == 1, waited  # one output, updated in place
    text = shown[0]["data"]["text/plain"]
    # the two workers step on their own: the last look may find them at one step or at
    # two (the line then names the slowest and the fastest)
    assert re.match(r"training: step \d+( \(worker:\d\) - \d+ \(worker:\d\))?/60 · "
                    r"[\d.]+ steps/s · loss [\d.]+", text), text
    printed = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    found = re.search(r"ROWS (\d+) \[(.*)\] (\d+)", printed)
    assert found and int(found[1]) >= 4 and found[3] == "60", printed
    assert found[2] == "'attempt', 'loss', 'step', 'task', 'time'", printed
    view = nb.cells[3].outputs[0]["data"]["text/html"]
    assert 'id="plot-metric-loss"' in view and 'id="plot-attempts"' in view, view[:2000]
