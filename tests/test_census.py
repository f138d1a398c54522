"""The census Wide & Deep example, run the way users run it: real TF, real UCI data."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CENSUS, DATA, job_processes

pytestmark = pytest.mark.tf
SEED = ["-t", "tensorflow-ps", "-a", "wide_and_deep", "-m", "local", "-x", "True", "-f", "./",
        "-pn", "1", "-pc", "1", "-pm", "2000", "-wn", "1", "-wc", "1", "-wg", "1", "-wm", "2000"]


@pytest.fixture
def workdir(tmp_path):
    """The user's folder: the script plus the UCI files, as in the EMR walkthrough."""
    assert (DATA / "adult.data").exists(), f"UCI Adult data expected in {DATA}"
    d = tmp_path / "census"
    d.mkdir()
    shutil.copy(CENSUS, d)
    for name in ("adult.data", "adult.test"):
        shutil.copy(DATA / name, d)
    return d


def accuracy(stderr: str) -> float:
    found = re.findall(r"^\[chief:0\] eval_accuracy=(\d\.\d+)$", stderr, re.M)
    assert found, stderr[-3000:]
    return float(found[-1])


def test_real_files_quirks_are_handled():
    spec = importlib.util.spec_from_file_location("census", CENSUS)
    census = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(census)
    train, test = (census.read_rows(str(DATA / f"adult.{s}")) for s in ("data", "test"))
    assert (len(train), len(test)) == (32561, 16281)
    _, labels = census.Encoder(train).transform(test)
    assert 0.2 < labels.mean() < 0.3  # '>50K.' in adult.test counts as positive


def test_the_shipped_gzipped_data_is_the_uci_data():
    spec = importlib.util.spec_from_file_location("census", CENSUS)
    census = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(census)
    for name in ("adult.data", "adult.test"):
        shipped = census.read_text(str(CENSUS.parent / name))  # no such file: its .gz
        assert shipped == (DATA / name).read_text(encoding="utf-8"), name


def test_seed_command_verbatim_in_a_copy_of_the_example(el_submit, tmp_path):
    """A user's fresh clone: the example's own dir, its gzipped data, nothing else."""
    clone = shutil.copytree(CENSUS.parent, tmp_path / "census")
    out = el_submit(*SEED, "--local", "-c", "python", "census_single.py", cwd=clone, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "trained on 32561 rows, evaluated on 16281" in out.stderr
    assert accuracy(out.stderr) >= 0.83


def test_seed_command_local(el_submit, workdir):
    out = el_submit(*SEED, "--local", "-c", "python", "census_single.py", cwd=workdir, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert accuracy(out.stderr) >= 0.83
    assert "ps:0: exit code -15 (stopped)" in out.stderr  # -x True stopped the ps
    assert job_processes(out.stdout.strip()) == []
    # the chief exported its model to the job dir's model/, which outlived the job dir
    model = re.search(r"^tfyarn: model \(TFYARN_MODEL_DIR\): (\S+)$", out.stderr, re.M)
    assert model and model[1].endswith("/model"), out.stderr[-2000:]
    assert sorted(os.listdir(Path(model[1]).parent)) == ["model"]
    assert (Path(model[1]) / "saved_model.pb").exists()
    scored = subprocess.run([sys.executable, "census_single.py", "--score", model[1]],
                            cwd=workdir, capture_output=True, text=True, timeout=300)
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert f"eval_accuracy={accuracy(out.stderr):.4f}" in scored.stdout


def test_parameter_server_strategy_with_workers(el_submit, workdir):
    out = el_submit("-t", "tensorflow-ps", "-x", "True", "-f", "./", "-pn", "1", "-wn", "2",
                    "--local", "-c", "python", "census_single.py", "--epochs", "4",
                    cwd=workdir, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[worker:0] serving as worker:0" in out.stderr
    assert accuracy(out.stderr) >= 0.83
    assert job_processes(out.stdout.strip()) == []


def test_synthetic_standalone(el_submit, tmp_path):
    shutil.copy(CENSUS, tmp_path)
    out = el_submit("-t", "standalone", "-f", "census_single.py", "--local",
                    "-c", "python census_single.py --synthetic", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"^\[worker:0\] eval_accuracy=0\.[7-9]\d+$", out.stderr, re.M)


def test_multi_worker_mirrored(el_submit, workdir, tmp_path):
    model = tmp_path / "exported"
    out = el_submit("-t", "tensorflow-worker", "-wn", "2", "-f", "./", "--local",
                    "--model-dir", str(model),
                    "-c", "python", "census_single.py", "--epochs", "3", cwd=workdir, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    # worker 0 alone exports (a plain copy of the synchronized model), to --model-dir
    assert re.findall(r"^\[(worker:\d)\] model exported to (\S+)$", out.stderr, re.M) == [
        ("worker:0", str(model))]
    assert f"tfyarn: model (TFYARN_MODEL_DIR): {model}" in out.stderr
    assert (model / "saved_model.pb").exists() and (model / "encoder.json").exists()
    found = dict(re.findall(r"^\[(worker:\d)\] eval_accuracy=(\d\.\d+)$", out.stderr, re.M))
    assert set(found) == {"worker:0", "worker:1"}
    assert found["worker:0"] == found["worker:1"]  # one synchronized model, not two copies
    assert float(found["worker:0"]) >= 0.83


# worker:0 (not the chief) dies by SIGKILL in attempt 0, once the first checkpoint is saved
KILL_WORKER_AFTER_CHECKPOINT = (
    'if [ "$TFYARN_ATTEMPT" = 0 ] && [ "$TFYARN_TASK_TYPE" = worker ]; then '
    '(until [ -e "$TFYARN_CHECKPOINT_DIR/checkpoint" ]; do sleep 0.2; done; kill -9 $$) & fi; '
    "exec python census_single.py --epochs 4")
PS_WITH_WORKER = ("-t", "tensorflow-ps", "-x", "True", "-f", "./", "-pn", "1", "-wn", "2",
                  "--local")


def test_restart_resumes_from_the_checkpoint(el_submit, workdir):
    out = el_submit(*PS_WITH_WORKER, "--max-restarts", "2", "-c", KILL_WORKER_AFTER_CHECKPOINT,
                    cwd=workdir, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "attempt 2/3: restarting after worker:0 was killed by SIGKILL" in out.stderr
    resumed = re.findall(r"^\[chief:0\] resumed from epoch (\d+)$", out.stderr, re.M)
    assert resumed and int(resumed[0]) >= 1, out.stderr[-3000:]
    assert accuracy(out.stderr) >= 0.83
    assert job_processes(out.stdout.strip()) == []


def test_same_failure_without_restarts_fails(el_submit, workdir):
    out = el_submit(*PS_WITH_WORKER, "-c", KILL_WORKER_AFTER_CHECKPOINT, cwd=workdir,
                    timeout=400)
    assert out.returncode == 1
    assert "FAILED: worker:0 was killed by SIGKILL" in out.stderr
    assert "resumed from epoch" not in out.stderr
    assert job_processes(out.stdout.strip()) == []


def test_scalars_for_tensorboard(el_submit, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    shutil.copy(CENSUS, tmp_path)
    out = el_submit("-t", "standalone", "-f", "census_single.py", "--local",
                    "-enable_tensorboard", "True", "-log_tensorboard", "tb",
                    "-c", "python census_single.py --synthetic --epochs 2", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Tensors("epoch_loss")] == [1, 2]
    assert [e.step for e in events.Tensors("eval_accuracy")] == [2]


def test_at_a_preemption_notice_the_chief_saves_holds_and_the_rerun_resumes_there(workdir):
    """The census as a task told of YARN's notice (its TFYARN_PREEMPTION_FILE touched, as
    the launcher does): it saves at the step it is at and holds; SIGKILLed there (YARN's
    kill), it is run again and resumes from that step, mid-epoch."""
    told = workdir / ".tfyarn-preempting"
    told.write_text("YARN's preemption notice for worker-0 (strict)\n")
    env = {**os.environ, "TFYARN_PREEMPTION_FILE": str(told)}
    args = [sys.executable, "census_single.py", "--epochs", "1", "--checkpoint-dir",
            str(workdir / "ckpt")]
    proc = subprocess.Popen(args, cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("saved a checkpoint at step"):
            break
    proc.kill()
    proc.wait(timeout=30)
    assert seen and seen[-1] == "saved a checkpoint at step 1 after YARN's preemption notice\n", \
        "".join(seen[-20:])
    told.unlink()
    again = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from epoch 0 step 1 (saved at YARN's preemption notice)" in again.stdout
    assert float(re.findall(r"^eval_accuracy=(\d\.\d+)$", again.stdout, re.M)[-1]) >= 0.8
