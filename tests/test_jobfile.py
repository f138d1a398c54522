"""Job files: `--dry-run` output submitted again (`tfyarn submit job.yaml`, `el_submit
--job`), checked as flags are, with typed flags overriding the file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tfyarn.api import jobfile
from tfyarn.api.options import ElSubmitArgs, from_el_submit
from tfyarn.core.errors import SpecError

FLAG_SETS = [  # what users type, across app types and the flags a file must carry
    dict(kind="tensorflow-ps", name="wd", exit_ps="True", files="./", ps="2",
         ps_cores="2", ps_memory="2g", workers="3", worker_cores="2", worker_gpus="1",
         worker_memory="1500", env=("A=1", "B=x=y"), timeout="60", queue="q", tags=("t1",),
         wait_time="3", heartbeat_timeout="45", am_memory="2048", am_vcores="2"),
    dict(kind="tensorflow-worker", workers="4", worker_gpus="1", workers_per_gpu="2",
         gpu_memory_fraction="0.3",
         max_restarts="2", restart_on="any", checkpoint_dir="ckpt", model_dir="out/model",
         files="data,train.py"),
    dict(kind="pytorch", workers="2", procs_per_node="2", python="/opt/py/bin/python3",
         node_label="gpu", force=True),
    dict(kind="tensorflow-mpi", workers="3", procs_per_node="4", files="data/."),
    dict(kind="standalone", enable_tensorboard="True", log_tensorboard="tb",
         tensorboard_linger="5", files="hdfs://nn:8020/user/me/data"),
]


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part-0").write_text("x\n")
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def write(spec, path) -> str:
    path.write_text(jobfile.dump(spec))
    return str(path)


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: f["kind"])
def test_flags_to_file_and_back_give_the_same_job(workdir, tmp_path_factory, flags):
    spec = from_el_submit(ElSubmitArgs(command=("python", "train.py", "--x", "1"), **flags),
                          str(workdir))
    path = write(spec, tmp_path_factory.mktemp("repo") / "job.yaml")
    assert jobfile.read(path) == spec
    assert jobfile.with_flags(path, {}, "/") == spec


def test_every_flag_says_how_a_job_file_gives_it_back():
    """One declaration per flag: each option of the table reads its value back from a
    job (what a job file is parsed as), but the client's own, which no job keeps."""
    from dataclasses import fields

    own = {f.name for f in fields(ElSubmitArgs)
           if "flag" in f.metadata and f.metadata.get("of") is None}
    assert own == {"interact", "conf", "principal", "keytab"}


def test_relative_paths_are_the_files_own_dir(workdir):
    text = yaml.safe_dump({**from_el_submit(ElSubmitArgs(command=("true",), files="train.py"),
                                            str(workdir)).describe(),
                           "files": [{"source": "train.py", "dest": "train.py"}]})
    (workdir / "job.yaml").write_text(text)
    spec = jobfile.with_flags(str(workdir / "job.yaml"), {}, "/")
    assert spec.files[0].source == str(workdir / "train.py")


def test_typed_flags_override_the_file(workdir):
    spec = from_el_submit(ElSubmitArgs(command=("python", "train.py"), **FLAG_SETS[0]),
                          str(workdir))
    path = write(spec, workdir / "job.yaml")
    over = jobfile.with_flags(path, {"workers": "5", "worker_memory": "3g",
                                     "command": ("python", "other.py")}, str(workdir))
    assert over.role("worker").instances == 4 and over.role("chief").resources.memory_mb == 3072
    assert over.command == "python other.py" and over.role("ps") == spec.role("ps")
    assert over.env == spec.env and over.yarn == spec.yarn


@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d.update(stop_grace_s=9.0), "stop_grace_s cannot be set"),
    (lambda d: d.update(colour="red"), "unknown field(s) colour"),
    (lambda d: d["roles"][1]["resources"].update(memory_mb=-5), "invalid resources"),
    (lambda d: d.update(app_type="tensorflow-pss"), "unknown app type"),
    (lambda d: d["containers"].pop(), "`containers:` does not match"),
    (lambda d: d.update(files=[{"source": "missing.txt", "dest": "missing.txt"}]),
     "missing.txt' does not exist"),
    (lambda d: d.pop("roles"), "not a tfyarn job"),
    (lambda d: d["roles"][1]["resources"].update(gpus=2), "cannot be set this way"),
])
def test_a_bad_file_is_one_error_naming_what(workdir, edit, words):
    data = from_el_submit(ElSubmitArgs(command=("true",), **FLAG_SETS[0]),
                          str(workdir)).describe()
    edit(data)
    (workdir / "job.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        jobfile.with_flags(str(workdir / "job.yaml"), {}, str(workdir))
    assert words in str(err.value) and "job.yaml" in str(err.value)


@pytest.mark.parametrize("text", ["- a\n- b\n", "a: [\n", ""])
def test_not_a_job_file(tmp_path, text):
    (tmp_path / "job.yaml").write_text(text)
    with pytest.raises(SpecError, match="job.yaml"):
        jobfile.read(str(tmp_path / "job.yaml"))


def test_cli_dry_run_of_a_file_prints_the_file(workdir):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    flags = ["-t", "tensorflow-ps", "-pn", "1", "-wn", "2", "-f", "./", "-x", "True"]
    first = subprocess.run([sys.executable, "-m", "tfyarn.cli", *flags, "--dry-run", "-c",
                            "python", "train.py"], cwd=workdir, env=env, capture_output=True,
                           text=True, check=True).stdout
    (workdir / "job.yaml").write_text(first)
    again = subprocess.run([sys.executable, "-m", "tfyarn", "submit", str(workdir / "job.yaml"),
                            "--dry-run"], cwd="/", env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first
    bad = subprocess.run([sys.executable, "-m", "tfyarn.cli", "--job", "nope.yaml"],
                         cwd=workdir, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("Error: --job: cannot read")
    assert "Traceback" not in bad.stderr


TF_CONFIG_SHAPE = ("import json, os; c = json.loads(os.environ['TF_CONFIG']); "
                   "print('TFCONF', json.dumps({'cluster': {k: len(v) for k, v in "
                   "sorted(c['cluster'].items())}, 'task': c['task']}, sort_keys=True))")


def tf_configs(stderr: str) -> list[str]:
    """Each task's TF_CONFIG without its addresses (ports differ from run to run)."""
    return sorted(line.split("TFCONF ", 1)[1] for line in stderr.splitlines() if "TFCONF " in line)


def test_a_job_file_from_dry_run_runs_the_same_local_job(el_submit, tmp_path):
    """flags -> --dry-run YAML -> `tfyarn submit job.yaml --local`: the same tasks with the
    same TF_CONFIG as the flags themselves ran."""
    import shlex

    flags = ["-t", "tensorflow-ps", "-pn", "1", "-wn", "3", "-x", "False", "--local"]  # all print
    command = ["-c", shlex.join(["python", "-c", TF_CONFIG_SHAPE])]
    direct = el_submit(*flags, *command)
    assert direct.returncode == 0, direct.stderr[-2000:]
    dry = el_submit(*flags, "--dry-run", *command)
    (tmp_path / "job.yaml").write_text(dry.stdout)
    from_file = subprocess.run([sys.executable, "-m", "tfyarn", "submit", "job.yaml", "--local"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120,
                               env={**os.environ, "TMPDIR": str(el_submit.tmpdir)})
    assert from_file.returncode == 0, from_file.stderr[-2000:]
    assert tf_configs(from_file.stderr) == tf_configs(direct.stderr)
    assert len(tf_configs(direct.stderr)) == 4  # ps, chief, 2 workers


def test_acls_round_trip_through_a_job_file(tmp_path):
    """--view-acls/--modify-acls come back from the job file --dry-run printed."""
    from tfyarn.api import jobfile
    from tfyarn.api.options import ElSubmitArgs, from_el_submit

    spec = from_el_submit(ElSubmitArgs(kind="standalone", command=("true",),
                                       view_acls=("alice,group:ml",), modify_acls=("bob",)),
                          str(tmp_path))
    (tmp_path / "job.yaml").write_text(jobfile.dump(spec))
    again = jobfile.read(str(tmp_path / "job.yaml"))
    assert (again.yarn.view_acls, again.yarn.modify_acls) == (("alice", "group:ml"), ("bob",))
