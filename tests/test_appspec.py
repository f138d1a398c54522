"""JobSpec -> skein ApplicationSpec: read the generated spec, run the generated scripts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tarfile

import pytest
import skein

from tfyarn.api.options import ElSubmitArgs, from_el_submit
from tfyarn.client import appspec, staging
from tfyarn.core.errors import SpecError
from tfyarn.core.settings import Settings
from tfyarn.hdfs import jni


def job(tmp_path, **kw):
    kw.setdefault("command", ("python", "train.py"))
    return from_el_submit(ElSubmitArgs(**kw), str(tmp_path))


def build(spec, tmp_path, defaults: appspec.ClusterDefaults | None = None):
    stage_dir = tmp_path / "stage"
    stage_dir.mkdir(exist_ok=True)
    staged = staging.stage(spec, str(stage_dir))
    return staged, appspec.application_dict(spec, staged, defaults or appspec.ClusterDefaults())


def test_seed_job_spec(tmp_path):
    (tmp_path / "census_single.py").write_text("print(1)\n")
    spec = job(tmp_path, kind="tensorflow-ps", name="wide_and_deep", exit_ps="True",
               files="./", ps="1", ps_cores="1", ps_memory="2000", workers="1",
               worker_cores="1", worker_gpus="1", worker_memory="2000", queue="ml",
               node_label="gpu", am_memory="2g", tags=("team-a",))
    _, app = build(spec, tmp_path)
    assert set(app["services"]) == {"ps-0", "chief-0"}
    chief, ps = app["services"]["chief-0"], app["services"]["ps-0"]
    assert chief["resources"] == {"memory": 2000, "vcores": 1, "gpus": 1}
    assert ps["resources"] == {"memory": 2000, "vcores": 1, "gpus": 0}
    assert chief["instances"] == 1 and chief["max_restarts"] == 0 and chief["node_label"] == "gpu"
    # a failed container must not end the app: the driver decides, and restarts gangs
    assert chief["allow_failures"] and ps["allow_failures"]
    assert '--tasks chief:0 --gpus auto --kv skein: --attempt "${TFYARN_ATTEMPT:-0}"' in \
        chief["script"]
    assert "--tasks ps:0 --gpus auto --kv skein:" in ps["script"]
    assert app["master"]["resources"] == {"memory": 2048, "vcores": 1}
    assert 'runpy.run_module("tfyarn.runtime.driver"' in app["master"]["script"]
    assert app["master"]["script"].endswith(" --job tfyarn-job.json --kv skein:\n")
    staged = appspec.Staged("/stage/job.json")  # el_submit follows the job: the driver waits
    watched = appspec.application_dict(spec, staged, appspec.ClusterDefaults(), watched=True)
    assert watched["master"]["script"].endswith(" --kv skein: --watched\n")
    assert (app["name"], app["queue"], app["tags"]) == ("wide_and_deep", "ml", ["team-a", "tfyarn"])
    assert chief["files"][appspec.JOB_FILE]["type"] == "file"
    assert app["max_attempts"] == 2  # YARN's and Spark's default: a lost AM resumes the job
    spec = job(tmp_path, kind="standalone", am_attempts="1")
    assert build(spec, tmp_path)[1]["max_attempts"] == 1
    # skein itself accepts and round-trips it
    spec_obj = skein.ApplicationSpec.from_dict(app)
    assert skein.ApplicationSpec.from_yaml(spec_obj.to_yaml()) == spec_obj
    assert spec_obj.services["chief-0"].resources.gpus == 1
    assert spec_obj.services["chief-0"].allow_failures


@pytest.mark.parametrize(("kw", "services"), [
    ({"kind": "tensorflow-ps", "ps": "2", "workers": "3"},
     {"ps-0", "ps-1", "chief-0", "worker-0", "worker-1"}),
    ({"kind": "tensorflow-worker", "workers": "3"}, {"worker-0", "worker-1", "worker-2"}),
    ({"kind": "standalone"}, {"worker-0"}),
])
def test_every_app_type(tmp_path, kw, services):
    _, app = build(job(tmp_path, **kw), tmp_path)
    assert set(app["services"]) == services
    for name, svc in app["services"].items():
        task = name.replace("-", ":")
        assert f"--tasks {task} " in svc["script"]  # the index is explicit, never derived
    skein.ApplicationSpec.from_dict(app)


def test_memory_growth_declares_a_service_per_grown_size(tmp_path):
    """--memory-growth 1.5 under a 4096 MB queue limit: each container's grown sizes are
    services of no instance (skein sizes containers by service); the driver adds to them."""
    from dataclasses import replace

    spec = job(tmp_path, kind="tensorflow-ps", workers="2", worker_memory="2000",
               ps_memory="1024", max_restarts="3", memory_growth="1.5")
    spec = replace(spec, yarn=replace(spec.yarn, max_memory_mb=4096))
    _, app = build(spec, tmp_path)
    services = app["services"]
    assert {n: (s["instances"], s["resources"]["memory"]) for n, s in services.items()} == {
        "ps-0": (1, 1024), "ps-0-mem1536": (0, 1536), "ps-0-mem2304": (0, 2304),
        "ps-0-mem3456": (0, 3456),
        "chief-0": (1, 2000), "chief-0-mem3072": (0, 3072), "chief-0-mem4096": (0, 4096),
        "worker-0": (1, 2000), "worker-0-mem3072": (0, 3072), "worker-0-mem4096": (0, 4096)}
    assert services["worker-0-mem3072"]["script"] == services["worker-0"]["script"]
    assert '--memory-mb "${TFYARN_MEMORY_MB:-0}"' in services["worker-0"]["script"]
    skein.ApplicationSpec.from_dict(app)


def test_local_mode_uses_python_option(tmp_path):
    _, app = build(job(tmp_path, python="/opt/py/bin/python3.11"), tmp_path)
    script = app["services"]["chief-0"]["script"]
    assert "exec /opt/py/bin/python3.11 -c " in script
    assert 'runpy.run_module("tfyarn.runtime.launcher"' in script
    assert "VIRTUAL_ENV" not in script and "YARN_CONTAINER_RUNTIME_TYPE" not in str(app)


def test_an_absolute_python_is_the_commands_python(tmp_path):
    """`--python /abs/bin/python -c python ...`: the container's PATH finds that one first."""
    spec = job(tmp_path, python=sys.executable)
    out = bash(appspec.runtime_setup(spec) + "command -v python3", tmp_path,
               {"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == os.path.join(os.path.dirname(sys.executable), "python3")
    assert appspec.runtime_setup(job(tmp_path, python="python3")) == ""  # a name: PATH's


def test_virtual_env_local_archive(tmp_path):
    (tmp_path / "env.tar.gz").write_bytes(b"x")
    _, app = build(job(tmp_path, mode="virtual-env", mode_arg="env.tar.gz"), tmp_path)
    for section in (app["master"], app["services"]["chief-0"]):
        assert section["files"]["env"] == {"source": str(tmp_path / "env.tar.gz"),
                                           "type": "archive"}
        assert 'PATH="$PWD/env/bin:$PATH"' in section["script"]
        assert "exec ./env/bin/python -c " in section["script"]


def test_virtual_env_hdfs_archive_is_used_in_place(tmp_path):
    spec = job(tmp_path, mode="virtual-env", mode_arg="hdfs:///envs/tf.tar.gz")
    _, app = build(spec, tmp_path)
    assert app["services"]["ps-0"]["files"]["env"]["source"] == "hdfs:///envs/tf.tar.gz"


def test_docker_mode_with_yarns_runtime(tmp_path):
    defaults = appspec.ClusterDefaults(docker_mounts=("/etc/hadoop/conf:/etc/hadoop/conf:ro",),
                                       docker_runtime="yarn")
    _, app = build(job(tmp_path, mode="docker", mode_arg="tf:2.21", env=("A=1",)), tmp_path,
                   defaults)
    assert "--docker-runtime yarn" in app["services"]["chief-0"]["script"]
    env = app["services"]["chief-0"]["env"]
    assert env["YARN_CONTAINER_RUNTIME_TYPE"] == "docker"
    assert env["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] == "tf:2.21"
    assert env["YARN_CONTAINER_RUNTIME_DOCKER_CONTAINER_NETWORK"] == "host"
    assert env["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] == "/etc/hadoop/conf:/etc/hadoop/conf:ro"
    assert "A" not in env  # --env travels in the job JSON, never through launch_container.sh
    assert "YARN_CONTAINER_RUNTIME_TYPE" not in app["master"]["env"]  # the AM stays on the node


def test_docker_mode_with_tfyarns_runtime_asks_yarn_for_no_docker(tmp_path):
    """Without YARN's runtime the container is an ordinary one on the node; its launcher
    runs the task in the image with `docker run`, the site's network and mounts given."""
    defaults = appspec.ClusterDefaults(docker_mounts=("/data:/data:ro",), docker_network="host",
                                       docker_runtime="tfyarn")
    _, app = build(job(tmp_path, mode="docker", mode_arg="tf:2.21"), tmp_path, defaults)
    service = app["services"]["chief-0"]
    assert not [k for k in service["env"] if k.startswith("YARN_CONTAINER_RUNTIME")]
    assert ("--docker-image tf:2.21 --docker-runtime tfyarn --docker-network host "
            "--docker-mount /data:/data:ro") in service["script"]


def test_staging_files_and_dirs(tmp_path):
    proj = tmp_path / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "pkg" / "m.py").write_text("m")
    (proj / "top.py").write_text("t")
    (proj / ".git").mkdir()
    (proj / ".git" / "HEAD").write_text("ref")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.csv").write_text("1,2")
    spec = job(proj, files="./,../data,top.py")
    staged, app = build(spec, tmp_path)
    files = app["services"]["chief-0"]["files"]
    assert files["top.py"] == {"source": str(proj / "top.py"), "type": "file"}
    assert files["data"]["type"] == "archive" and files[".tfyarn-files-0"]["type"] == "archive"
    assert staged.link_contents == (".tfyarn-files-0",)
    with tarfile.open(files[".tfyarn-files-0"]["source"]) as tar:
        assert sorted(tar.getnames()) == ["pkg/m.py", "top.py"]  # .git excluded
    with tarfile.open(files["data"]["source"]) as tar:
        assert tar.getnames() == ["d.csv"]


def test_upload_limit_and_force(tmp_path):
    (tmp_path / "big.bin").write_bytes(b"0" * (2 * 1024 * 1024))
    spec = job(tmp_path, files="big.bin")
    limited = spec.__class__(**{**spec.__dict__, "yarn": spec.yarn.__class__(max_upload_mb=1)})
    with pytest.raises(SpecError, match="--force"):
        build(limited, tmp_path)
    assert build(job(tmp_path, files="big.bin", force=True), tmp_path)[0].resources


def bash(script: str, cwd, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True)


def task_hadoop(env: dict[str, str]) -> dict[str, str]:
    hadoop = jni.TaskHadoop(env)
    try:
        return hadoop.env()
    finally:
        hadoop.close()


def test_task_hadoop_gives_the_jars_hadoops_own_glob_gives(sandbox):
    """The sandbox's real Hadoop 3.3.6: a task's CLASSPATH holds what `hadoop classpath
    --glob` prints (without running it: that is a JVM), then what was there."""
    env = {"PATH": "/usr/bin:/bin", "HADOOP_HOME": sandbox["HADOOP_HOME"],
           "HADOOP_CONF_DIR": sandbox["HADOOP_CONF_DIR"], "JAVA_HOME": sandbox["JAVA_HOME"],
           "CLASSPATH": "/mine.jar", "LD_LIBRARY_PATH": "/x"}
    got = task_hadoop(env)
    glob = subprocess.run([f"{sandbox['HADOOP_HOME']}/bin/hadoop", "classpath", "--glob"],
                          env=env, capture_output=True, text=True, check=True).stdout.strip()
    entries = got["CLASSPATH"].split(":")
    assert entries[-1] == "/mine.jar"
    assert sorted(entries[:-1]) == sorted(glob.split(":")) and len(entries) > 100
    assert got["LD_LIBRARY_PATH"] == \
        f"{sandbox['JAVA_HOME']}/lib/server:{sandbox['HADOOP_HOME']}/lib/native:/x"
    assert got["HADOOP_HDFS_HOME"] == got["HADOOP_HOME"] == sandbox["HADOOP_HOME"]


def test_task_hadoop_expands_wildcards_as_java_does(tmp_path):
    """`dir/*` is the dir's .jar and .JAR files (Java's rule; a path with a space too);
    other entries stay as they are; HADOOP_HOME is the `hadoop` found on PATH's."""
    home, lib = tmp_path / "hadoop", tmp_path / "my lib"
    (home / "bin").mkdir(parents=True)
    lib.mkdir()
    for name in ("a.jar", "B.JAR", "notes.txt", "c.jar.bak"):
        (lib / name).write_text("")
    (home / "bin" / "hadoop").write_text(
        f'#!/bin/sh\n[ "$1" = classpath ] && echo "/h/etc:{lib}/*:/h/none/*:/h/x.jar"\n')
    (home / "bin" / "hadoop").chmod(0o755)
    got = task_hadoop({"PATH": f"{home}/bin:/usr/bin:/bin"})
    assert got["CLASSPATH"] == f"/h/etc:{lib}/a.jar:{lib}/B.JAR:/h/x.jar"
    assert got["HADOOP_HOME"] == str(home) and got["LD_LIBRARY_PATH"] == f"{home}/lib/native"


def test_task_hadoop_without_hadoop_adds_nothing(tmp_path):
    assert task_hadoop({"PATH": "/usr/bin:/bin"}) == {}


def test_the_container_scripts_give_the_launcher_and_tensorboard_the_hadoop_env(tmp_path):
    """Worked out by the launcher (tensorboard) in Python, no longer by the start script."""
    spec = job(tmp_path, kind="tensorflow-worker", workers="1", enable_tensorboard="True",
               log_tensorboard="hdfs:///user/me/tb")
    _, app = build(spec, tmp_path)
    assert " --hadoop-env " in app["services"]["worker-0"]["script"]
    assert app["services"]["tensorboard"]["script"].endswith(" --hadoop-env\n")
    assert "classpath" not in app["services"]["worker-0"]["script"]


def test_link_contents_puts_the_dir_in_the_working_dir(tmp_path):
    src = tmp_path / ".tfyarn-files-0"
    (src / "sub").mkdir(parents=True)
    (src / "a.py").write_text("a")
    (src / ".hidden").write_text("h")
    (tmp_path / "a.py").write_text("already here wins")
    out = bash(appspec.link_contents((".tfyarn-files-0",)), tmp_path, {"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert os.path.islink(tmp_path / "sub") and os.path.islink(tmp_path / ".hidden")
    assert (tmp_path / "a.py").read_text() == "already here wins"


def test_run_module_runs_it_as_dash_m_or_says_what_is_missing(tmp_path):
    """The container's one interpreter runs the module as `-m` would (its __main__ block,
    its arguments), where tfyarn and skein are found; else it fails at once, saying why."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bad = bash(appspec.run_module(str(venv / "bin" / "python"), "tfyarn.runtime.launcher",
                                  "worker:1") + " --help", tmp_path, {"PATH": "/usr/bin:/bin"})
    assert bad.returncode == 1, bad
    assert f"tfyarn: worker:1: cannot import tfyarn and skein with {venv}/bin/python on " \
           f"{socket.gethostname()}: install tfyarn on every node" in bad.stderr
    good = bash(appspec.run_module(sys.executable, "tfyarn.runtime.launcher", "worker:1")
                + " --help", tmp_path, {"PATH": "/usr/bin:/bin"})
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("usage: python -m tfyarn.runtime.launcher")  # main() ran
    ended = bash(appspec.run_module(sys.executable, "tfyarn.runtime.driver", "driver")
                 + " --job /nonexistent --kv dir:/nonexistent", tmp_path, {"PATH": "/usr/bin:/bin"})
    assert ended.returncode != 0 and "/nonexistent" in ended.stderr, ended  # its args, its end


def test_site_defaults_from_conf_file(tmp_path):
    conf = tmp_path / "tfyarn.yaml"
    conf.write_text("docker:\n  network: bridge\n  mounts: [/a:/a:ro]\nenv:\n  X: 1\n")
    d = staging.load_defaults(Settings(conf_file=str(conf), home=str(tmp_path)))
    assert d == appspec.ClusterDefaults("bridge", ("/a:/a:ro",), "tfyarn", {"X": "1"})
    assert staging.load_defaults(Settings(home=str(tmp_path))) == \
        appspec.ClusterDefaults(docker_runtime="tfyarn")  # `auto` on a cluster of unknown kind


def test_docker_runtime_auto_follows_the_clusters_yarn_site(tmp_path):
    """`auto` (the default) is YARN's Docker runtime only where the NodeManagers run the
    LinuxContainerExecutor with docker allowed; the sandbox's real yarn-site.xml has not."""
    lce = tmp_path / "lce"
    lce.mkdir()
    (lce / "yarn-site.xml").write_text(
        '<?xml version="1.0"?><configuration>'
        "<property><name>yarn.nodemanager.container-executor.class</name><value>"
        "org.apache.hadoop.yarn.server.nodemanager.LinuxContainerExecutor</value></property>"
        "<property><name>yarn.nodemanager.runtime.linux.allowed-runtimes</name>"
        "<value>default,docker</value></property></configuration>")
    settings = Settings(home=str(tmp_path))
    assert staging.load_defaults(settings, str(lce)).docker_runtime == "yarn"
    sandbox_conf = os.environ.get("HADOOP_CONF_DIR")
    if sandbox_conf:
        assert staging.load_defaults(settings, sandbox_conf).docker_runtime == "tfyarn"
    conf = tmp_path / "tfyarn.yaml"
    conf.write_text("docker:\n  runtime: tfyarn\n")
    pinned = Settings(conf_file=str(conf), home=str(tmp_path))
    assert staging.load_defaults(pinned, str(lce)).docker_runtime == "tfyarn"  # the site's word
    conf.write_text("docker:\n  runtime: podman\n")
    with pytest.raises(SpecError, match="docker: runtime: 'podman' is not one of auto, tfyarn"):
        staging.load_defaults(pinned)


def test_f_from_hdfs_is_localized_by_yarn_not_uploaded(tmp_path):
    from tfyarn.api.options import ElSubmitArgs, from_el_submit
    from tfyarn.client import staging

    spec = from_el_submit(ElSubmitArgs(command=("true",), kind="standalone",
                                       files="hdfs://nn:9000/ml/code,hdfs:///ml/adult.data"),
                          str(tmp_path))
    stage_dir = tmp_path / "stage"
    stage_dir.mkdir()
    staged = staging.stage(spec, str(stage_dir))
    assert staged.resources == (("code", "hdfs://nn:9000/ml/code", "file"),
                                ("adult.data", "hdfs:///ml/adult.data", "file"))
    assert sorted(p.name for p in stage_dir.iterdir()) == ["tfyarn-job.json"]  # no archive


def test_tensorboard_is_a_side_service(tmp_path):
    spec = job(tmp_path, kind="tensorflow-worker", workers="2", enable_tensorboard="True",
               log_tensorboard="hdfs:///user/me/tb")
    _, app = build(spec, tmp_path)
    tb = app["services"]["tensorboard"]
    assert tb["allow_failures"] and tb["resources"]["gpus"] == 0
    assert 'runpy.run_module("tfyarn.runtime.tensorboard"' in tb["script"]
    assert " --job tfyarn-job.json --kv skein: --python " in tb["script"]
    assert spec.tensorboard_dir == "hdfs:///user/me/tb"
    assert [c.name for c in spec.containers()] == ["worker-0", "worker-1"]  # not a task
    skein.ApplicationSpec.from_dict(app)
    _, plain = build(job(tmp_path, kind="standalone"), tmp_path)
    assert "tensorboard" not in plain["services"]


def test_an_application_is_its_owners_alone_unless_acls_add_others(tmp_path):
    """skein's ACLs are always on: the owner alone by default; --view-acls users see the
    web UI too; tfyarn.yaml's `acls:` are added to the job's (docs/security.md, C1)."""
    _, app = build(job(tmp_path), tmp_path)
    assert app["acls"] == {"enable": True, "view_users": [], "view_groups": [],
                           "modify_users": [], "modify_groups": [], "ui_users": []}
    spec = job(tmp_path, view_acls=("alice,group:ml", "bob,alice"), modify_acls=("oncall",))
    acls = skein.ApplicationSpec.from_dict(build(spec, tmp_path)[1]).acls
    assert (acls.enable, acls.view_users, acls.view_groups) == (True, ["alice", "bob"], ["ml"])
    assert (acls.modify_users, acls.ui_users) == (["oncall"], ["alice", "bob"])
    conf = tmp_path / "tfyarn.yaml"
    conf.write_text("acls:\n  view: [group:ml-team]\n  modify: oncall,bob\n")
    site = staging.load_defaults(Settings(conf_file=str(conf), home=str(tmp_path)))
    from tfyarn.client.yarnsubmit import with_site_acls

    merged = with_site_acls(job(tmp_path, view_acls=("alice",)).yarn, site)
    assert merged.view_acls == ("group:ml-team", "alice")
    assert merged.modify_acls == ("oncall", "bob")
    conf.write_text("acls:\n  view: [alice bob]\n")
    with pytest.raises(SpecError, match=r"acls: view: 'alice bob' is not a user name"):
        staging.load_defaults(Settings(conf_file=str(conf), home=str(tmp_path)))


@pytest.mark.parametrize("flag, value, words", [
    ("--view-acls", "alice bob", "--view-acls: 'alice bob' is not a user name, group:NAME or *"),
    ("--modify-acls", "alice,,bob", "--modify-acls: an empty entry in 'alice,,bob'"),
    ("--view-acls", "group:", "--view-acls: 'group:' is not a user name"),
])
def test_bad_acls_are_one_error_line(tmp_path, flag, value, words):
    out = subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "standalone", flag, value,
                          "--dry-run", "-c", "true"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"Error: {words}") and len(out.stderr.splitlines()) == 1, \
        out.stderr
