"""The job model: el_submit flags -> JobSpec, validation, round trips, topology."""

from __future__ import annotations

import json

import pytest

from tfyarn.api.options import ElSubmitArgs, from_el_submit, join_command, parse_memory
from tfyarn.core import tfconfig
from tfyarn.core.errors import SpecError
from tfyarn.core.jobspec import JobSpec, acl_admits, yarn_acl
from tfyarn.core.tfconfig import Task


def spec(tmp_path, **kw) -> JobSpec:
    kw.setdefault("command", ("python", "train.py"))
    return from_el_submit(ElSubmitArgs(**kw), str(tmp_path))


def test_seed_command_maps_to_ps_and_chief(tmp_path):
    s = spec(tmp_path, kind="tensorflow-ps", name="wide_and_deep", mode="local",
             exit_ps="True", files="./", ps="1", ps_cores="1", ps_memory="2000",
             workers="1", worker_cores="1", worker_gpus="1", worker_memory="2000")
    assert [(r.name, r.instances) for r in s.roles] == [("ps", 1), ("chief", 1)]
    assert s.role("chief").resources.gpus == 1 and s.role("ps").resources.gpus == 0
    assert s.role("ps").resources.memory_mb == 2000 and s.stop_ps_when_done
    assert s.files[0].dest == "" and s.files[0].source == str(tmp_path)
    assert s.tasks() == (Task("ps", 0), Task("chief", 0))


@pytest.mark.parametrize(("app_type", "pn", "wn", "expected"), [
    ("tensorflow-ps", "2", "3", [("ps", 2), ("chief", 1), ("worker", 2)]),
    ("tensorflow-worker", None, "3", [("worker", 3)]),
    ("standalone", None, "1", [("worker", 1)]),
])
def test_topologies(tmp_path, app_type, pn, wn, expected):
    s = spec(tmp_path, kind=app_type, ps=pn, workers=wn)
    assert [(r.name, r.instances) for r in s.roles] == expected


@pytest.mark.parametrize(("text", "mb"), [("2000", 2000), ("2g", 2048), ("512m", 512),
                                          ("1.5G", 1536), ("4gb", 4096)])
def test_memory_units(text, mb):
    assert parse_memory("-wm", text, 1) == mb


@pytest.mark.parametrize(("kw", "flag"), [
    ({"ps": "-1"}, "-pn"), ({"workers": "0"}, "-wn"), ({"worker_memory": "abc"}, "-wm"),
    ({"kind": "tensorflow"}, "-t"), ({"kind": "standalone", "workers": "2"}, "-wn"),
    ({"exit_ps": "maybe"}, "-x"), ({"command": ()}, "-c"), ({"files": "nope.py"}, "-f"),
    ({"mode": "docker"}, "-m docker"), ({"mode": "virtual-env", "mode_arg": "gone.tgz"}, "-m_arg"),
    ({"env": ("NOEQUALS",)}, "--env"), ({"wait_time": "0"}, "-wait_time"),
    ({"kind": "pytorch", "workers_per_gpu": "2"}, "-wnpg"), ({"workers_per_gpu": "2"}, "-wnpg"),
    ({"enable_tensorboard": "true"}, "-enable_tensorboard"), ({"timeout": "0"}, "--timeout"),
    ({"kind": "tensorflow-worker", "ps": "1"}, "-pn"), ({"conf": "nodir"}, "-conf"),
])
def test_bad_input_names_the_flag(tmp_path, kw, flag):
    with pytest.raises(SpecError) as err:
        spec(tmp_path, **kw)
    assert flag in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["True", "true", "1", "yes"])
def test_bool_spellings(tmp_path, value):
    assert spec(tmp_path, exit_ps=value).stop_ps_when_done


def test_json_round_trip(tmp_path):
    (tmp_path / "data").mkdir()
    s = spec(tmp_path, kind="tensorflow-ps", ps="2", workers="3", files="data",
             env=("A=1", "B=x=y"), timeout="60", queue="q", tags=("t1",), worker_gpus="2")
    assert JobSpec.from_json(s.to_json()) == s
    assert dict(s.env) == {"A": "1", "B": "x=y"} and s.files[0].dest == "data"
    assert json.loads(s.to_json())["register_timeout_s"] == 600


def test_virtualenv_alias_and_absolute_archive(tmp_path):
    (tmp_path / "env.tar.gz").write_bytes(b"")
    s = spec(tmp_path, mode="virtualenv", mode_arg="env.tar.gz")
    assert s.runtime.mode == "virtual-env" and s.runtime.arg == str(tmp_path / "env.tar.gz")


def test_command_words_join_into_one_shell_line():
    assert join_command(("echo hi", "--epochs", "3")) == "echo hi --epochs 3"
    assert join_command(("python a.py && echo done",)) == "python a.py && echo done"


def test_tf_config_and_cluster_spec():
    addrs = {Task("ps", 1): "h:2", Task("ps", 0): "h:1", Task("chief", 0): "h:3"}
    cluster = tfconfig.cluster_spec(addrs)
    assert cluster == {"ps": ["h:1", "h:2"], "chief": ["h:3"]}
    env = tfconfig.tf_env(cluster, Task("ps", 1), "job")
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "ps", "index": 1}
    assert env["TFYARN_TASK_INDEX"] == "1" and env["TFYARN_JOB_ID"] == "job"
    with pytest.raises(ValueError):
        tfconfig.cluster_spec({Task("worker", 1): "h:1"})
    assert Task.parse("worker:12") == Task("worker", 12)


def test_acls_admit_as_yarn_reads_them():
    """--view-acls' form (users, group:NAME, *) and yarn.admin.acl's (`users groups`)."""
    assert acl_admits(("bob", "group:ml"), "bob", []) and acl_admits(("group:ml",), "al", ["ml"])
    assert not acl_admits(("bob", "group:ml"), "al", ["ops"])
    assert acl_admits(("*",), "anyone", []) and not acl_admits(("*",), "", [])
    assert yarn_acl("*") == ("*",) and yarn_acl("") == () and yarn_acl(" ") == ()
    assert yarn_acl("root,yarn hadoop,ops") == ("root", "yarn", "group:hadoop", "group:ops")
    assert yarn_acl(" admins") == ("group:admins",)
