"""tfyarn on a real YARN cluster (pytest integration --yarn). Containers stay <= 1 GB."""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest
from conftest import (
    APP_ID,
    DATA,
    REPO,
    aggregated_logs,
    final_state,
    packed_env,
    py,
    yarn_cli,
)

from tfyarn.hdfs import plugin as hdfs
from tfyarn.hdfs import siteconf

pytestmark = [pytest.mark.yarn, pytest.mark.concurrent]
SMALL = ["-pm", "1024", "-wm", "1024"]
JVM_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN|ERROR) ", re.M)  # log4j's
# -ppn 2: two ranks (torch or TF, ~550 MB each) share a container, which the NodeManager
# kills over its memory (the sandbox checks it, as Hadoop does by default)
TWO_RANKS = ["-pm", "1024", "-wm", "2048"]
DUMP = ("import json, os; print('DUMP ' + json.dumps({'tf': json.loads(os.environ['TF_CONFIG']),"
        " 'type': os.environ['TFYARN_TASK_TYPE'], 'index': os.environ['TFYARN_TASK_INDEX']}))")


def test_seed_census_command(el_submit, tmp_path):
    work = tmp_path / "census"
    work.mkdir()
    shutil.copy(REPO / "examples" / "census" / "census_single.py", work)
    for name in ("adult.data", "adult.test"):
        shutil.copy(DATA / name, work)
    out, app_id = el_submit("-t", "tensorflow-ps", "-a", "wide_and_deep", "-m", "local", "-x",
                            "True", "-f", "./", "-pn", "1", "-pc", "1", "-pm", "1024", "-wn", "1",
                            "-wc", "1", "-wm", "1024", "-c", "python", "census_single.py",
                            cwd=work)
    assert out.returncode == 0, out.stderr
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    assert not JVM_LINE.search(out.stderr), "the skein driver's log reached el_submit's stderr"
    chief = aggregated_logs(app_id, "chief:0")
    acc = [float(x) for x in re.findall(r"eval_accuracy=(\d\.\d+)", chief)]
    assert acc and acc[-1] >= 0.83, chief[-3000:]


def test_tf_config_consistent_across_containers(el_submit):
    out, app_id = el_submit("-t", "tensorflow-ps", "-pn", "2", "-wn", "3", "-x", "False", *SMALL,
                            "-c", py(DUMP))
    assert out.returncode == 0, out.stderr
    text = aggregated_logs(app_id)
    dumps = [json.loads(line.split("DUMP ", 1)[1]) for line in text.splitlines() if "DUMP " in line]
    assert len(dumps) == 5  # -pn 2 -wn 3: two ps, the chief and two workers
    cluster = dumps[0]["tf"]["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == {"ps": 2, "chief": 1, "worker": 2}
    assert all(d["tf"]["cluster"] == cluster for d in dumps)
    assert len({(d["type"], d["index"]) for d in dumps}) == 5


def test_failing_worker(el_submit):
    cmd = ('if [ "$TFYARN_TASK_TYPE:$TFYARN_TASK_INDEX" = worker:1 ]; then '
           'echo "worker one is broken" >&2; exit 3; fi; sleep 600')
    out, app_id = el_submit("-t", "tensorflow-ps", "-pn", "1", "-wn", "3", "-x", "True", *SMALL,
                            "-c", cmd, timeout=600)
    assert out.returncode == 1, out.stderr
    assert "worker:1 exited with code 3" in out.stderr and "worker one is broken" in out.stderr
    assert f"tfyarn logs {app_id} --task worker:1" in out.stderr
    assert final_state(app_id).endswith("/FAILED")
    assert app_id not in yarn_cli("application", "-list", "-appStates", "RUNNING")


def watching(tmp_path, apps, *args: str) -> tuple[subprocess.Popen, str]:
    """el_submit in the background, once its job trains (or 5 minutes passed)."""
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", *args, *SMALL, "--python",
                             sys.executable, "-c", "sleep 600"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    app_id = proc.stdout.readline().strip()
    assert APP_ID.match(app_id), f"no application id on stdout: {app_id!r}"
    apps.append(app_id)
    deadline, seen = time.monotonic() + 300, []
    for line in proc.stderr:
        seen.append(line)
        if "training" in line:
            return proc, app_id
        assert time.monotonic() < deadline, "not training after 300 s:\n" + "".join(seen)
    raise AssertionError("el_submit ended before its job trained:\n" + "".join(seen))


def test_ctrl_c_kills_the_application(tmp_path, apps):
    proc, app_id = watching(tmp_path, apps, "-t", "tensorflow-worker", "-wn", "2")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    assert proc.returncode == 130
    assert final_state(app_id).endswith("/KILLED")


def test_detach_status_logs_kill(el_submit):
    out, app_id = el_submit("-t", "standalone", "--detach", *SMALL, "-c", "sleep 600",
                            timeout=300)
    assert out.returncode == 0 and app_id
    tfyarn = [sys.executable, "-m", "tfyarn"]
    deadline = time.monotonic() + 300
    while "RUNNING" not in subprocess.run([*tfyarn, "status", app_id], capture_output=True,
                                          text=True).stdout:
        assert time.monotonic() < deadline
        time.sleep(3)
    logs = subprocess.run([*tfyarn, "logs", app_id], capture_output=True, text=True)
    assert logs.returncode == 0 and "containerlogs" in logs.stdout
    assert app_id in subprocess.run([*tfyarn, "ls"], capture_output=True, text=True).stdout
    from proctable import carrying  # the AM's JVM runs with a short-lived JVM's options
    am = [p.cmdline for p in carrying(f"SKEIN_APPLICATION_ID={app_id}")  # (skein patch 0014)
          if p.comm == "java" and "com.anaconda.skein.ApplicationMaster" in p.cmdline]
    assert len(am) == 1 and {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= \
        set(am[0].split()), am
    assert subprocess.run([*tfyarn, "kill", app_id], capture_output=True).returncode == 0
    assert final_state(app_id).endswith("/KILLED")


def test_virtual_env_archive(el_submit, tmp_path):
    """As a user must: an env with tfyarn installed in it, packed. Its other packages
    (skein, TF) come from this runner's site-packages through a .pth file, which holds on
    a single node (the sandbox); tfyarn itself is a real, non-editable install."""
    packed_env(tmp_path)
    out, app_id = el_submit("-t", "standalone", "-m", "virtual-env", "-m_arg", "env.tar.gz",
                            *SMALL, "-c", py("import sys; print('PREFIX', sys.prefix)"),
                            cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert re.search(r"PREFIX \S+/env\b", aggregated_logs(app_id, "worker:0"))


def test_impossible_request_unchecked_fails_with_a_reason(el_submit, tmp_path):
    """Where the ResourceManager's REST API does not answer, el_submit cannot refuse an
    impossible container before submitting (integration/test_gpus.py: it does): it says
    so, submits, and the job fails with YARN's reason within -wait_time."""
    conf = tmp_path / "conf"
    shutil.copytree(os.environ["HADOOP_CONF_DIR"], conf)
    site = conf / "yarn-site.xml"
    site.write_text(site.read_text().replace(
        "</configuration>", "<property><name>yarn.resourcemanager.webapp.address</name>"
        "<value>127.0.0.1:9</value></property></configuration>"))
    out, app_id = el_submit("-t", "standalone", "-wait_time", "1", "-wm", "1000g", "-c", "true",
                            timeout=600, env={"HADOOP_CONF_DIR": str(conf)})
    assert out.returncode == 1, out.stderr
    assert "could not read what the cluster can give" in out.stderr
    assert "submitting unchecked" in out.stderr
    assert re.search(r"never registered|maximum|Invalid resource|exceeds", out.stderr, re.I), \
        out.stderr


# ---------------------------------------------------------------- every way a job ends

DAEMON = "setsid sleep 300 & sleep 300"


def _running_with_daemons(app_id: str, n_tasks: int) -> None:
    from conftest import node_processes, wait_until

    wait_until(lambda: len([p for p in node_processes(app_id) if "sleep 300" in p]) >= 2 * n_tasks,
               300, f"{n_tasks} tasks and their daemons of {app_id}")


def _ended(app_id: str) -> str:
    from conftest import wait_until

    wait_until(lambda: final_state(app_id).split("/")[0] in ("FINISHED", "FAILED", "KILLED"),
               180, f"{app_id} to end")
    return final_state(app_id)


def test_sigkill_of_a_task_launcher_leaves_nothing(el_submit):
    from conftest import launcher_pid, node_processes, wait_until

    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", "--detach", *SMALL,
                            "-c", DAEMON, timeout=300)
    assert out.returncode == 0, out.stderr
    _running_with_daemons(app_id, 2)
    os.kill(launcher_pid(app_id, "worker:1"), signal.SIGKILL)
    assert _ended(app_id).endswith("/FAILED")
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app")


def test_yarn_kill_leaves_no_daemon(el_submit):
    from conftest import node_processes, wait_until

    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", "--detach", *SMALL,
                            "-c", DAEMON, timeout=300)
    _running_with_daemons(app_id, 2)
    yarn_cli("application", "-kill", app_id)
    assert _ended(app_id).endswith("/KILLED")
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app")


def test_frozen_launcher_fails_the_job_as_lost(el_submit, tmp_path, apps):
    from conftest import launcher_pid, node_processes, wait_until

    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                             "2", "--heartbeat-timeout", "10", *SMALL, "--python", sys.executable,
                             "-c", "sleep 600"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    app_id = proc.stdout.readline().strip()
    apps.append(app_id)
    wait_until(lambda: len([p for p in node_processes(app_id) if "sleep 600" in p]) >= 2, 300,
               "tasks running")
    os.kill(launcher_pid(app_id, "worker:0"), signal.SIGSTOP)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "worker:0: launcher lost (no heartbeat for" in err
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app")


def test_sigterm_to_el_submit_kills_the_application(tmp_path, apps):
    proc, app_id = watching(tmp_path, apps, "-t", "standalone")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err, err
    assert final_state(app_id).endswith("/KILLED")


def test_lifecycle_commands_on_a_finished_app(el_submit):
    out, app_id = el_submit("-t", "standalone", *SMALL, "-c", "echo finished-fine")
    assert out.returncode == 0, out.stderr
    tfyarn = [sys.executable, "-m", "tfyarn"]
    status = subprocess.run([*tfyarn, "status", app_id], capture_output=True, text=True)
    assert status.returncode == 0 and "final status: SUCCEEDED" in status.stdout
    assert "finished-fine" in aggregated_logs(app_id, "worker:0")
    kill = subprocess.run([*tfyarn, "kill", app_id], capture_output=True, text=True)
    assert kill.returncode == 0 and "already ended" in kill.stderr
    ls = subprocess.run([*tfyarn, "ls", "--all"], capture_output=True, text=True)
    assert app_id in ls.stdout
    assert "Traceback" not in aggregated_logs(app_id)  # no launcher lingers past the AM


def test_env_bytes_and_c_rule_match_local_mode(el_submit):
    values = {"Q": 'say "hi"', "B": "`uname`", "S": "$(id) ${HOME}", "U": "ünï 日本"}
    probe = ("import json, os; print('ENV ' + json.dumps({k: os.environ[k] for k in "
             f"{sorted(values)!r}}}))")
    args = [a for k, v in values.items() for a in ("--env", f"{k}={v}")]
    out, app_id = el_submit("-t", "standalone", *args, *SMALL, "-c", py(probe), ";",
                            "echo", "'two  spaces'", "$TFYARN_TASK_TYPE")
    assert out.returncode == 0, out.stderr
    text = aggregated_logs(app_id, "worker:0")
    line = next(x for x in text.splitlines() if x.startswith("ENV "))
    assert json.loads(line[4:]) == values
    assert "two  spaces worker" in text


FEED_PROBE = """
import json, time
from tfyarn.protocol import kv
store = kv.open_kv("skein:")
store.put("probe/old", "0")
feed = store.feed(["", "probe"])
first = feed.next(5)
store.put("probe/new", "1")
store.put("elsewhere/x", "2")
store.put("toplevel", "3")
got, deadline = {}, time.monotonic() + 20
while not {"probe/new", "toplevel"} <= set(got) and time.monotonic() < deadline:
    got.update(feed.next(1))
feed.close()
print("FEED " + json.dumps({"first": sorted(first), "got": sorted(got)}))
"""


def test_the_drivers_feed_is_skeins_put_events(el_submit):
    """The driver follows the store on YARN by skein's put events: a feed gives what is
    there, then each put under the dirs it follows (and at the top), nothing else."""
    out, app_id = el_submit("-t", "standalone", *SMALL, "-c", py(FEED_PROBE))
    assert out.returncode == 0, out.stderr
    line = next(x for x in aggregated_logs(app_id, "worker:0").splitlines()
                if x.startswith("FEED "))
    seen = json.loads(line[5:])
    assert "probe/old" in seen["first"] and "tasks" in seen["first"]  # top-level: the driver's
    assert not any(k.startswith("gang/") for k in seen["first"])
    assert {"probe/new", "toplevel"} <= set(seen["got"])
    assert "elsewhere/x" not in seen["got"] and "probe/old" not in seen["got"]


def test_failure_message_shows_the_traceback(el_submit):
    code = "import sys\nfor i in range(50): print('noise', i, file=sys.stderr)\nraise KeyError('k')"
    out, app_id = el_submit("-t", "standalone", *SMALL, "-c", py(code))
    assert out.returncode == 1
    assert "last stderr lines of worker:0:\n  Traceback (most recent call last):" in out.stderr
    assert "KeyError: 'k'" in out.stderr
    # the final status, read though the job failed before el_submit's first look (the
    # driver's --watched); YARN's diagnostics would have the same words but no --task
    assert f"tfyarn logs {app_id} --task worker:0" in out.stderr


# ---------------------------------------------------------------- allreduce and packing (#7)

RANK_SEE = ("import json, os; print('RANKSEE ' + json.dumps({k: os.environ.get(k) for k in "
            "('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'HOROVOD_RANK', "
            "'HOROVOD_LOCAL_RANK', 'HOROVOD_GLOO_RENDEZVOUS_ADDR', 'CUDA_VISIBLE_DEVICES')}))")


def _rank_dumps(app_id: str) -> list[dict]:
    text = aggregated_logs(app_id)
    return [json.loads(x.split("RANKSEE ", 1)[1]) for x in text.splitlines() if "RANKSEE " in x]


def test_tensorflow_mpi_ranks_on_yarn(el_submit):
    out, app_id = el_submit("-t", "tensorflow-mpi", "-wn", "2", "-ppn", "2", *TWO_RANKS,
                            "-c", py(RANK_SEE))
    assert out.returncode == 0, out.stderr
    dumps = _rank_dumps(app_id)
    assert sorted(int(d["RANK"]) for d in dumps) == [0, 1, 2, 3]
    assert {d["WORLD_SIZE"] for d in dumps} == {"4"}
    assert all(d["HOROVOD_RANK"] == d["RANK"] and d["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
               for d in dumps)
    assert {d["CUDA_VISIBLE_DEVICES"] for d in dumps} == {""}  # -wg 0: CPU


def test_horovod_allreduce_on_yarn(el_submit):
    pytest.importorskip("horovod.torch")
    code = ("import horovod.torch as hvd, torch; hvd.init(); "
            "t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum); "
            "print(f'HVD rank={hvd.rank()} size={hvd.size()} sum={t.item():g}')")
    out, app_id = el_submit("-t", "tensorflow-mpi", "-wn", "2", "-ppn", "2", *TWO_RANKS,
                            "-c", py(code))
    assert out.returncode == 0, out.stderr
    got = sorted(x.split("HVD ", 1)[1] for x in aggregated_logs(app_id).splitlines()
                 if x.startswith("HVD ") or "] HVD " in x or " HVD " in x)
    assert got == [f"rank={r} size=4 sum=10" for r in range(4)]


def test_pytorch_ddp_on_yarn(el_submit, tmp_path):
    shutil.copy(REPO / "examples" / "pytorch" / "ddp.py", tmp_path)
    out, app_id = el_submit("-t", "pytorch", "-wn", "2", *SMALL, "-f", "ddp.py",
                            "-c", "python", "ddp.py", "--steps", "10", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = aggregated_logs(app_id)
    assert len(re.findall(r"rank=\d size=2 local_rank=\d allreduced=3", text)) == 2
    assert len(set(re.findall(r"checksum=(\S+)", text))) == 1


def test_a_failing_rank_on_yarn_names_it(el_submit):
    cmd = 'if [ "$RANK" = 2 ]; then exit 9; fi; sleep 600'
    out, app_id = el_submit("-t", "tensorflow-mpi", "-wn", "2", "-ppn", "2", *TWO_RANKS,
                            "-c", cmd,
                            timeout=600)
    assert out.returncode == 1 and "(rank 2) exited with code 9" in out.stderr, out.stderr
    assert final_state(app_id).endswith("/FAILED")



# ---------------------------------------------------------------- HDFS (#8)


def hdfs_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["hdfs", "dfs", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def hdfs_dir():
    """A fresh dir on the cluster's HDFS, removed afterwards."""
    path = f"/tmp/tfyarn-it-{uuid.uuid4().hex[:12]}"  # two tests may start at once
    assert hdfs_cli("-mkdir", "-p", path).returncode == 0
    yield path
    hdfs_cli("-rm", "-r", "-f", "-skipTrash", path)


def test_census_trains_from_hdfs_on_yarn(el_submit, tmp_path, hdfs_dir):
    assert hdfs_cli("-put", str(DATA / "adult.data"), str(DATA / "adult.test"),
                    hdfs_dir).returncode == 0
    shutil.copy(REPO / "examples" / "census" / "census_single.py", tmp_path)
    out, app_id = el_submit("-t", "tensorflow-ps", "-x", "True", "-f", "census_single.py",
                            *SMALL, "-c", "python", "census_single.py", "--data-dir",
                            f"hdfs://{hdfs_dir}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    acc = [float(x) for x in re.findall(r"eval_accuracy=(\d\.\d+)",
                                        aggregated_logs(app_id, "chief:0"))]
    assert acc and acc[-1] >= 0.83
    # the chief exported its model to the default model dir on HDFS; TF reads it back
    # through the plugin on the gateway and scores adult.test the same
    model = f"hdfs:///user/{getpass.getuser()}/.tfyarn/models/{app_id}"
    assert f"tfyarn: model dir (TFYARN_MODEL_DIR): {model}\n" in out.stderr
    try:
        scored = subprocess.run(
            [sys.executable, "census_single.py", "--score", model, "--data-dir", str(DATA)],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env=_gateway_tf_env())
        assert scored.returncode == 0, scored.stderr[-3000:]
        assert f"eval_accuracy={acc[-1]:.4f}" in scored.stdout
    finally:
        hdfs_cli("-rm", "-r", "-f", "-skipTrash", model.replace("hdfs://", ""))


def _gateway_tf_env() -> dict[str, str]:
    """What a TF process on the gateway needs to read hdfs:// through the plugin: the hook,
    and libhdfs's JVM (Hadoop's CLASSPATH, libjvm's dir), as the containers get them."""
    from tfyarn.hdfs import jni

    env = {**os.environ, **jni.client_env(os.environ),
           "LD_LIBRARY_PATH": f"{os.environ['JAVA_HOME']}/lib/server"}
    return {**env, **hdfs.plugin_env(env)}


def test_tfrecords_and_a_checkpoint_on_hdfs(el_submit, hdfs_dir):
    code = (
        "import tensorflow as tf\n"
        f"d = 'hdfs://{hdfs_dir}'\n"
        "tf.io.gfile.makedirs(d + '/rec')\n"
        "with tf.io.TFRecordWriter(d + '/rec/r.tfrecord') as w:\n"
        "    [w.write(f'r{i}'.encode()) for i in range(50)]\n"
        "n = sum(1 for _ in tf.data.TFRecordDataset(d + '/rec/r.tfrecord'))\n"
        "v = tf.Variable([1.0, 2.0]); c = tf.train.Checkpoint(v=v); c.save(d + '/ck/m')\n"
        "v.assign([0.0, 0.0]); c.restore(tf.train.latest_checkpoint(d + '/ck'))\n"
        "print('HDFSOK', n, v.numpy().tolist(), tf.io.gfile.glob(d + '/rec/*'))\n")
    out, app_id = el_submit("-t", "standalone", *SMALL, "-c", py(code))
    assert out.returncode == 0, out.stderr
    line = next(x for x in aggregated_logs(app_id, "worker:0").splitlines() if "HDFSOK" in x)
    assert "HDFSOK 50 [1.0, 2.0]" in line and "r.tfrecord" in line


def test_f_from_hdfs_on_yarn(el_submit, hdfs_dir, tmp_path):
    (tmp_path / "cfg.txt").write_text("lr=0.1")
    assert hdfs_cli("-put", str(tmp_path / "cfg.txt"), hdfs_dir).returncode == 0
    out, app_id = el_submit("-t", "standalone", "-f", f"hdfs://{hdfs_dir}/cfg.txt", *SMALL,
                            "-c", "cat cfg.txt")
    assert out.returncode == 0, out.stderr
    assert "lr=0.1" in aggregated_logs(app_id, "worker:0")


def test_resubmit_with_the_same_env_uploads_nothing(el_submit, tmp_path):
    test_virtual_env_archive(el_submit, tmp_path)  # builds env.tar.gz and submits once
    out, app_id = el_submit("-t", "standalone", "-m", "virtual-env", "-m_arg", "env.tar.gz",
                            *SMALL, "-c", "true", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "-m_arg: cached on HDFS, nothing uploaded" in out.stderr


def test_check_data_on_hdfs(hdfs_dir):
    assert hdfs_cli("-put", str(DATA / "adult.data"), hdfs_dir).returncode == 0
    out = subprocess.run([sys.executable, "-m", "tfyarn", "check-data",
                          f"hdfs://{hdfs_dir}/adult.data"], capture_output=True, text=True)
    assert out.returncode == 1 and "adult.data:32562: blank line" in out.stdout, out.stderr


# ---------------------------------------------------------------- restarts in place (#9)

# blocks in attempt 0 only, so a restarted gang finishes; every task records its attempt
ONCE = ('echo "attempt $TFYARN_ATTEMPT ckpt $TFYARN_CHECKPOINT_DIR"; '
        'if [ "$TFYARN_ATTEMPT" = 0 ]; then sleep 300; fi')


def as_owner(url: str) -> str:
    """A proxied URL as the job's owner opens it on a cluster with simple authentication
    and YARN ACLs (the sandbox's): with `user.name` (anonymous is refused)."""
    import pwd

    return f"{url}{'&' if '?' in url else '?'}user.name={pwd.getpwuid(os.geteuid()).pw_name}"


def _submit_in_background(tmp_path, apps, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", *args[:args.index("-c")],
                             "--python", sys.executable, *args[args.index("-c"):]],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    app_id = proc.stdout.readline().strip()
    apps.append(app_id)
    return proc, app_id


def _yarn_container_id(app_id: str, service: str) -> str:
    import skein

    with skein.Client() as client:
        containers = client.connect(app_id).get_containers(services=[service])
    return containers[0].yarn_container_id


def _restarted_and_succeeded(proc: subprocess.Popen, app_id: str, task: str) -> None:
    from conftest import node_processes, wait_until

    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert re.search(rf"attempt 2/2: restarting after {re.escape(task)} was ", err), err
    assert final_state(app_id).endswith("/SUCCEEDED")
    logs = aggregated_logs(app_id)
    assert logs.count("attempt 1 ckpt hdfs:///user/") == 2, logs[-5000:]
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app")


def test_container_killed_by_yarn_restarts_the_gang(tmp_path, apps):
    from conftest import node_processes, wait_until

    proc, app_id = _submit_in_background(tmp_path, apps, "-t", "tensorflow-worker", "-wn", "2",
                                         "--max-restarts", "1", *SMALL, "-c", ONCE)
    wait_until(lambda: len([p for p in node_processes(app_id) if "sleep 300" in p]) >= 2, 300,
               "attempt 0 running")
    yarn_cli("container", "-signal", _yarn_container_id(app_id, "worker-1"), "FORCEFUL_SHUTDOWN")
    _restarted_and_succeeded(proc, app_id, "worker:1")


def test_kill_9_of_a_launcher_restarts_the_gang(tmp_path, apps):
    from conftest import launcher_pid, node_processes, wait_until

    proc, app_id = _submit_in_background(tmp_path, apps, "-t", "tensorflow-worker", "-wn", "2",
                                         "--max-restarts", "1", *SMALL, "-c", ONCE)
    wait_until(lambda: len([p for p in node_processes(app_id) if "sleep 300" in p]) >= 2, 300,
               "attempt 0 running")
    os.kill(launcher_pid(app_id, "worker:0"), signal.SIGKILL)
    _restarted_and_succeeded(proc, app_id, "worker:0")


def test_memory_kill_fails_with_the_memory_message_and_is_not_retried(el_submit):
    from conftest import yarn_site

    if yarn_site("yarn.nodemanager.pmem-check-enabled", "true") != "true":
        pytest.skip("this cluster never kills a container over its memory "
                    "(yarn.nodemanager.pmem-check-enabled=false; the sandbox: "
                    "it is on unless SANDBOX_PMEM_CHECK=false)")
    # over any container size YARN may round -wm 256 up to (minimum allocation 1 GB)
    hog = py("import time; b = b'x' * (1600 << 20); time.sleep(120)")
    out, app_id = el_submit("-t", "standalone", "-wm", "256", "--max-restarts", "2", "-c", hog,
                            timeout=600)
    assert out.returncode == 1, out.stderr
    assert "container killed for exceeding its memory: raise -wm (now 256 MB)" in out.stderr
    assert "restarting" not in out.stderr
    assert final_state(app_id).endswith("/FAILED")


def test_memory_growth_restarts_a_memory_killed_worker_larger_and_it_succeeds(el_submit):
    """--memory-growth 2: worker:1 needs about 700 MB and asks 512; YARN kills it, the
    driver restarts the gang in the same application with 1024 MB workers (skein's
    service of that size), and the job SUCCEEDS. The task checks the size it was told."""
    from conftest import yarn_site

    if yarn_site("yarn.nodemanager.pmem-check-enabled", "true") != "true":
        pytest.skip("this cluster never kills a container over its memory")
    hog = ("import os, time; i = os.environ['TFYARN_TASK_INDEX']; "
           "a = os.environ['TFYARN_ATTEMPT']; m = os.environ.get('TFYARN_MEMORY_MB'); "
           "print('attempt', a, 'memory', m, flush=True); "
           "assert a == '0' or m == '1024', m; "
           "b = b'x' * (700 << 20) if i == '1' else b''; time.sleep(8)")
    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", "-wm", "512",
                            "--max-restarts", "2", "--memory-growth", "2", "-c", py(hog),
                            timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "--memory-growth: memory kills restart with worker 512 \u2192 1024 \u2192 2048 MB " \
        "(the queue's largest container is 4096 MB)" in out.stderr
    assert "attempt 2/3: worker memory 512 \u2192 1024 MB after worker:1 was killed for " \
        "memory (-wm x --memory-growth 2)" in out.stderr, out.stderr[-4000:]
    assert final_state(app_id) == "FINISHED/SUCCEEDED"


def test_a_stalled_worker_is_restarted_by_stall_timeout_and_succeeds(el_submit, tmp_path):
    """worker:1 deadlocks after step 50 in attempt 0: alive, heartbeating, no progress.
    --stall-timeout fails the attempt naming it and its last step, the gang restarts in
    the same application and resumes from its checkpoints (a dir every node of the
    sandbox sees) to SUCCEEDED. Its page, kept in HDFS at the end, opens from `tfyarn
    history` in a browser, and `tfyarn status --tasks` prints its table."""
    from programs import STALLS  # tests/ (on the path: conftest), the local test's too

    (tmp_path / "train.py").write_text(STALLS)
    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", *SMALL, "--max-restarts",
                            "1", "--stall-timeout", "10", "--checkpoint-dir",
                            str(tmp_path / "ckpt"), "-f", str(tmp_path / "train.py"), "-c",
                            "python train.py", timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "attempt 2/2: restarting after training stalled: worker:1 at step 50: no " \
        "progress for " in out.stderr, out.stderr[-4000:]
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-0", "step-1"]
    # the goodput table: attempt 1 trained from step 0 and lost what attempt 2 did again
    # (from its checkpoint at step 40); attempt 2 resumed there
    assert re.search(r"goodput \d+%: ", out.stderr), out.stderr[-3000:]
    assert re.search(r" 1\. \S+-\S+ FAILED \(retryable\): steps 0-79, lost [\d.]+ s; "
                     r"steps/s worker:0 [\d.]+/s, worker:1 [\d.]+/s", out.stderr), out.stderr
    assert re.search(r" 2\. \S+-\S+ SUCCEEDED: steps 40-79", out.stderr), out.stderr
    _kept_page_of(app_id, tmp_path)


# 100 steps of 0.1 s (loss, total=100); a line of output every 25 steps
STEPS_100 = """import os, time, tfyarn
for step in range(1, 101):
    tfyarn.progress(step, total=100, loss=1.0 / step)
    if step % 25 == 0:
        print(f"at step {step}", flush=True)
    time.sleep(0.1)
"""


def test_the_live_line_on_yarn_with_interact(tmp_path, apps):
    """el_submit on YARN under a real pseudo-terminal (`script`), with -interact: the
    live line is drawn in place as the steps move (of the total, with the loss and an
    ETA), the tasks' relayed lines are written above it (never glued to it), and stdout
    carries only the application id."""
    if shutil.which("script") is None:
        pytest.skip("no `script` (util-linux) here")
    (tmp_path / "train.py").write_text(STEPS_100)
    out = tmp_path / "stdout"
    cmd = (f"{sys.executable} -m tfyarn.cli -t tensorflow-worker -wn 2 {' '.join(SMALL)} "
           f"-interact True --heartbeat-timeout 5 -f train.py --python {sys.executable} "
           f"-c 'python train.py' > {out}")
    run = subprocess.run(["script", "-qec", cmd, "/dev/null"], cwd=tmp_path, timeout=600,
                         env={**os.environ, "COLUMNS": "200"}, capture_output=True)
    app_id = out.read_text().strip()
    if app_id:
        apps.append(app_id)
    tty = run.stdout.decode(errors="replace")
    assert run.returncode == 0, tty[-4000:]
    assert re.fullmatch(r"application_\d+_\d+", app_id), out.read_text()
    drawn = [d for d in re.findall(r"\r\x1b\[Ktfyarn: training: ([^\r\n]*)", tty)
             if d.startswith("step ")]
    assert len({d.split(" ")[1] for d in drawn}) >= 2, tty[-4000:]  # it moved
    assert all(re.search(r"/100 · [\d.]+ steps/s · loss [\d.]+ .*· attempt 1/1$", d)
               for d in drawn), drawn
    assert any("ETA" in d for d in drawn), drawn
    assert re.search(r"\[worker:0\] at step 50", tty), tty[-4000:]  # -interact's relay
    assert not re.search(r"tfyarn: training: [^\r\n]*(\[worker|tfyarn:)", tty), tty[-4000:]
    assert final_state(app_id) == "FINISHED/SUCCEEDED"


def _kept_page_of(app_id: str, tmp_path) -> None:
    """The stalled-then-restarted job's kept page: `status --tasks`, and `tfyarn history`
    in headless chromium (the listing, then the page its link opens)."""
    from browser import cells, history_server, join, links, make_browser

    status = subprocess.run([sys.executable, "-m", "tfyarn", "status", app_id, "--tasks"],
                            capture_output=True, text=True, timeout=120)
    kept = status.stdout.split("tasks (its kept page", 1)[-1]
    assert re.search(r"worker:1 +127\.0\.0\.\d+:\d+ +exited 0 step 79 ", kept), status.stdout
    assert "FAILED (retryable): steps 0-79" in kept and "training stalled" in kept
    browser = make_browser(tmp_path)
    server, url = history_server({**os.environ, "TFYARN_HISTORY_DIR": str(tmp_path / "h")})
    try:
        listing = browser(url)
        assert cells(listing, "job")[app_id][4] == "SUCCEEDED", listing
        page = browser(join(url, links(listing, "job")[app_id]))
    finally:
        server.terminate()
        server.wait(timeout=30)
    rows = cells(page, "task")
    assert [rows[t][2] for t in ("worker:0", "worker:1")] == ["exited 0", "exited 0"], page
    assert all("/node/containerlogs/" in c for c in re.findall(r'href="([^"]+)">log<', page))
    assert "FAILED (retryable): steps 0-79" in re.search(r'<ul id="goodput">(.*?)</ul>',
                                                        page, re.S)[1]
    assert "training stalled: worker:1 at step 50" in page  # the earlier attempt
    figures = dict(re.findall(r'<figure id="([^"]+)">(.*?)</figure>', page, re.S))
    assert set(figures) == {"plot-metric-loss", "plot-rate", "plot-attempts"}, set(figures)
    assert re.findall(r'class="attempt (\w+)"', figures["plot-attempts"]) == \
        ["FAILED", "SUCCEEDED"]
    assert "<title>worker:1 (attempt 1)</title>" in figures["plot-metric-loss"]
    assert re.fullmatch(r"loss 0\.\d+", cells(listing, "job")[app_id][-1])  # final metric


def test_status_lists_attempts_while_restarted_gang_runs(tmp_path, apps):
    from conftest import launcher_pid, node_processes, wait_until

    forever = 'if [ "$TFYARN_ATTEMPT" = 1 ]; then sleep 600; fi; sleep 300'
    proc, app_id = _submit_in_background(tmp_path, apps, "-t", "standalone", "--max-restarts",
                                         "1", *SMALL, "-c", forever)
    wait_until(lambda: any("sleep 300" in p for p in node_processes(app_id)), 300, "attempt 0")
    os.kill(launcher_pid(app_id, "worker:0"), signal.SIGKILL)
    wait_until(lambda: any("sleep 600" in p for p in node_processes(app_id)), 300, "attempt 1")
    status = subprocess.run([sys.executable, "-m", "tfyarn", "status", app_id, "--tasks"],
                            capture_output=True, text=True, timeout=120)
    assert "attempt 1: FAILED: worker:0 was killed" in status.stdout, status.stdout
    assert "attempt 2: running" in status.stdout
    yarn_cli("application", "-kill", app_id)
    proc.communicate(timeout=120)


# ---------------------------------------------------------------- TensorBoard (#10)


def _tensorboard_url(proc: subprocess.Popen, seen: list[str]) -> str:
    deadline = time.monotonic() + 300
    for line in proc.stderr:
        seen.append(line)
        found = re.match(r"^tfyarn: TensorBoard: (http://\S+)$", line.rstrip("\n"))
        if found:
            return found.group(1)
        assert time.monotonic() < deadline, "".join(seen)
    raise AssertionError("".join(seen))


def _http_status(url: str) -> int | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def test_tensorboard_side_task_on_yarn(tmp_path, apps, hdfs_dir):
    stop = tmp_path / "stop"  # the single node's file system, as the /proc checks assume
    wait = (f'until [ -e {stop} ]; do sleep 1; done; echo "tbdir=$TFYARN_TENSORBOARD_DIR"')
    proc, app_id = _submit_in_background(
        tmp_path, apps, "-t", "tensorflow-worker", "-wn", "2", *SMALL, "-enable_tensorboard",
        "True", "-log_tensorboard", f"{hdfs_dir}/tb", "-c", wait)
    seen: list[str] = []
    url = _tensorboard_url(proc, seen)
    assert _http_status(url) == 200
    assert _http_status(url.split("?")[0]) == 403  # not without the run's token
    stop.touch()
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, "".join(seen) + err
    assert final_state(app_id).endswith("/SUCCEEDED")
    assert _http_status(url) is None
    assert aggregated_logs(app_id).count(f"tbdir={hdfs_dir}/tb") == 2



def test_a_failing_worker_ends_the_app_with_a_tensorboard_side_task(tmp_path, apps, hdfs_dir):
    """Once the driver has its verdict, the application is FINISHED/FAILED within 30 s,
    whatever the TensorBoard side task, the page or gRPC streams are doing."""
    # worker:1 crashes once the side task has published its URL (it is up), not on a timer
    up = py("from tfyarn.protocol import kv; kv.open_kv('skein:').wait('tensorboard', 300)")
    crash = f'if [ "$TFYARN_TASK_INDEX" = 1 ]; then {up}; kill -ABRT $$; fi; sleep 600'
    proc, app_id = _submit_in_background(
        tmp_path, apps, "-t", "tensorflow-worker", "-wn", "2", *SMALL, "-enable_tensorboard",
        "True", "-log_tensorboard", f"{hdfs_dir}/tb", "-c", crash)
    seen: list[str] = []
    for line in proc.stderr:  # until the tasks train and the side task is up
        seen.append(line)
        if any("training" in x for x in seen) and any("TensorBoard: http" in x for x in seen):
            break
    trained = time.monotonic()
    assert any("TensorBoard: http" in x for x in seen), "".join(seen)  # it was up
    _, err = proc.communicate(timeout=300)
    said = "".join(seen) + err  # the verdict may come before or after the last of those
    assert proc.returncode == 1, said
    assert "worker:1" in said and "SIGABRT" in said, said
    assert final_state(app_id) == "FINISHED/FAILED"
    assert time.monotonic() - trained < 30 + 15, "".join(seen) + err  # the rule, polls


def test_job_page_through_the_resourcemanager_proxy(tmp_path, apps):
    import urllib.request

    proc, app_id = _submit_in_background(tmp_path, apps, "-t", "tensorflow-ps", "-pn", "1",
                                         "-wn", "2", *SMALL, "-c", "sleep 600")
    page, tracking, training, deadline = None, None, False, time.monotonic() + 300
    for line in proc.stderr:
        if line.startswith("tfyarn: tracking URL: "):
            tracking = line.split(": ", 2)[2].strip()
        if line.startswith("tfyarn: job page: "):
            page = line.split(": ", 2)[2].strip()
        training = training or "training" in line  # said before the page's URL or after
        if (page and training) or time.monotonic() > deadline:
            break
    assert page and tracking, page
    with urllib.request.urlopen(as_owner(page), timeout=30) as resp:  # the view ACL's
        html = resp.read().decode()
    for task in ("ps:0", "chief:0", "worker:0"):
        assert f"<td>{task}</td>" in html, html
    assert "running" in html and "containerlogs" in html  # NodeManager log links
    with urllib.request.urlopen(as_owner(tracking), timeout=30) as resp:  # not skein's 500
        overview = resp.read().decode()
    assert "tfyarn job" in overview  # skein's page links ours
    for service in ("ps-0", "chief-0", "worker-0"):
        assert service in overview, overview
    yarn_cli("application", "-kill", app_id)
    proc.communicate(timeout=120)


# two tasks print 1,000 numbered lines each over ~15 s (a pause every 100 lines: the live
# view asks every 2 s, so lines come across 7 or more of its reads)
LINES = 1000
NUMBERED = (f'for i in $(seq 1 {LINES}); do echo "n $i of $TFYARN_TASK_TYPE:$TFYARN_TASK_INDEX"; '
            'if [ $((i % 100)) = 0 ]; then sleep 1.5; fi; done')


def assert_every_numbered_line_once_in_order(text: str, tasks: tuple[str, ...]) -> None:
    for task in tasks:
        got = re.findall(rf"^\[{re.escape(task)}\] (n \d+ of \S+)$", text, re.M)
        assert got == [f"n {i} of {task}" for i in range(1, LINES + 1)], \
            f"{task}: {len(got)} lines; first wrong: " + next(
                (f"#{k}: {x!r}" for k, x in enumerate(got) if x != f"n {k + 1} of {task}"), "-")
    assert "LogType:" not in text and "End of LogType" not in text  # no Hadoop framing


def test_interact_streams_task_lines(el_submit):
    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", *SMALL, "-interact", "True",
                            "-c", NUMBERED, timeout=600)
    assert out.returncode == 0, out.stderr[-5000:]
    assert_every_numbered_line_once_in_order(out.stderr, ("worker:0", "worker:1"))
    assert not JVM_LINE.search(out.stderr), "the skein driver's log reached el_submit's stderr"


def test_logs_follow_a_running_app(el_submit):
    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", "--detach", *SMALL,
                            "-c", NUMBERED, timeout=300)
    assert out.returncode == 0, out.stderr
    follow = subprocess.run([sys.executable, "-m", "tfyarn", "logs", app_id, "--follow"],
                            capture_output=True, text=True, timeout=600)
    assert follow.returncode == 0, follow.stderr
    assert_every_numbered_line_once_in_order(follow.stdout, ("worker:0", "worker:1"))
    assert f"{app_id} ended" in follow.stderr


# ---------------------------------------------------------------- soak (#16)

SOAK_JOBS = 12  # 24 until CI neared its 90 minutes: a one-in-six fault still fails 89% of runs


@pytest.mark.exclusive  # a warm skein driver, the user's one
def test_a_soak_of_short_jobs_has_no_failure(apps, tmp_path):
    """12 short two-task jobs, four at a time: the random SIGABRT / TLS corruption of
    starting tasks under live gRPC channels killed about one job in six. The defect was
    in the containers (launchers starting tasks); the jobs are submitted through a warm
    skein driver, so two dozen client JVMs do not take the 2 cores the containers need."""

    tfyarn = [sys.executable, "-m", "tfyarn"]
    warm = subprocess.run([*tfyarn, "skein-driver", "start"], capture_output=True, text=True,
                          timeout=120)
    assert warm.returncode == 0, warm.stderr
    try:
        _soak(apps, tmp_path)
    finally:
        subprocess.run([*tfyarn, "skein-driver", "stop"], capture_output=True, timeout=120)


def _soak(apps, tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> tuple[int, str, str]:
        cmd = [sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn", "2",
               "-a", f"soak-{i}", "-wm", "256", "--am-memory", "512", "--python",
               sys.executable, "-c", 'echo "soak $TFYARN_TASK_INDEX"']
        r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        app_id = r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""
        if r.returncode != 0 and APP_ID.match(app_id):
            apps.append(app_id)  # teardown: killed if alive, its logs printed
        return r.returncode, app_id, r.stderr

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(SOAK_JOBS)))
    failed = [(app_id, err[-1500:]) for rc, app_id, err in results if rc != 0]
    assert not failed, f"{len(failed)}/{SOAK_JOBS} failed:\n" + "\n\n".join(
        f"{a}:\n{e}" for a, e in failed)


# ---------------------------------------------------------------- job files, status (#17)

TF_CONFIG_SHAPE = ("import json, os; c = json.loads(os.environ['TF_CONFIG']); "
                   "print('TFCONF', json.dumps({'cluster': {k: len(v) for k, v in "
                   "sorted(c['cluster'].items())}, 'task': c['task'], 'memory': "
                   "os.environ['SKEIN_RESOURCE_MEMORY'], 'vcores': "
                   "os.environ['SKEIN_RESOURCE_VCORES']}, sort_keys=True))")


def tf_configs(app_id: str) -> list[str]:
    """Each task's TF_CONFIG (addresses left out) and its container's resources, from
    the aggregated logs."""
    text = aggregated_logs(app_id)
    return sorted(line.split("TFCONF ", 1)[1] for line in text.splitlines()
                  if line.startswith("TFCONF "))


def test_a_job_file_from_dry_run_runs_the_same_job_on_yarn(el_submit, apps, tmp_path):
    """flags -> --dry-run YAML -> `tfyarn submit job.yaml`: the same containers (their
    resources, seen from inside) and the same TF_CONFIG as the flags themselves ran."""
    flags = ["-t", "tensorflow-ps", "-pn", "1", "-pm", "768", "-wn", "2", "-wm", "1024",
             "-wc", "2", "-x", "True"]
    # -x True stops the ps and the worker once the chief exits: the chief waits until
    # both have printed
    printed = tmp_path / "printed"
    printed.mkdir(mode=0o777)
    mark = f"{printed}/$TFYARN_JOB_ID"
    cmd = (f"{py(TF_CONFIG_SHAPE)} && touch {mark}.$TFYARN_TASK_TYPE && "
           f'if [ "$TFYARN_TASK_TYPE" = chief ]; then '
           f"until [ -e {mark}.ps ] && [ -e {mark}.worker ]; do sleep 0.05; done; fi")
    direct, direct_id = el_submit(*flags, "-c", cmd, timeout=600)
    assert direct.returncode == 0, direct.stderr
    dry = subprocess.run([sys.executable, "-m", "tfyarn.cli", *flags, "--python", sys.executable,
                          "--dry-run", "-c", cmd], cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    (tmp_path / "job.yaml").write_text(dry.stdout)
    again = subprocess.run([sys.executable, "-m", "tfyarn", "submit", "job.yaml"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    file_id = again.stdout.strip().splitlines()[0] if again.stdout.strip() else ""
    if APP_ID.match(file_id):
        apps.append(file_id)
    assert again.returncode == 0, again.stderr
    first, second = tf_configs(direct_id), tf_configs(file_id)
    assert first == second and len(first) == 3, (first, second)
    assert {json.loads(x)["memory"] for x in first} == {"768", "1024"}


def test_status_tasks_lists_12_workers_in_natural_order(apps, tmp_path):
    """`tfyarn status APP --tasks` while a 12-task job runs (6 containers of 2 ranks: the
    sandbox has 8 vcores): every task, in natural order (worker:2 before worker:10), each
    running, never `None`."""
    cmd = [sys.executable, "-m", "tfyarn.cli", "-t", "pytorch", "-wn", "6", "-ppn", "2",
           "-wm", "512", "--am-memory", "512", "--detach", "--python", sys.executable,
           "-c", "sleep 600"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    app_id = out.stdout.strip()
    assert out.returncode == 0 and APP_ID.match(app_id), out.stderr
    apps.append(app_id)
    deadline, lines = time.monotonic() + 300, []
    while time.monotonic() < deadline:
        status = subprocess.run([sys.executable, "-m", "tfyarn", "status", app_id, "--tasks"],
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        lines = status.stdout.split("tasks:\n", 1)[-1].splitlines() if "tasks:" in \
            status.stdout else []
        if len(lines) == 12 and all(x.split()[2] == "running" for x in lines):
            break
        time.sleep(2)  # polling a cluster's state, not ordering events
    assert [x.split()[0] for x in lines] == [f"worker:{i}" for i in range(12)], lines
    assert all(x.split()[2] == "running" for x in lines), lines
    assert all("None" not in x for x in lines)
    subprocess.run([sys.executable, "-m", "tfyarn", "kill", app_id], capture_output=True,
                   timeout=300, check=True)
    assert final_state(app_id).endswith("/KILLED")


# ---------------------------------------------------------------- Spark to training (#18)


def test_census_from_spark_on_yarn_trains_from_hdfs(apps, tmp_path):
    """The seed flow: Spark turns the Adult CSV into committed TFRecord shards on HDFS
    (its executors write over WebHDFS; Spark itself runs local[2] here: Spark on this
    YARN is the pl_submit test's and the libhdfs write test's, and its start cost a CI
    minute); el_submit --data trains census on them with two MultiWorkerMirroredStrategy
    workers, each reading its own share, to >= 0.84."""
    out = f"hdfs:///tmp/tfyarn-census-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    prep = subprocess.run([sys.executable, str(REPO / "examples" / "census_spark" / "prepare.py"),
                           "--out", out, "--master", "local[2]"], capture_output=True, text=True,
                          timeout=900, env=env)
    assert prep.returncode == 0, prep.stderr[-5000:]
    assert "train: 32561 rows in 4 shards" in prep.stdout, prep.stdout
    shutil.copy(REPO / "examples" / "census" / "census_single.py", tmp_path)
    cmd = [sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn", "2", "-wm", "2048",
           "-f", "census_single.py", "--data", f"{out}/train", "--data", f"{out}/test",
           "--python", sys.executable, "-c", "python census_single.py --epochs 3"]
    train = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    app_id = train.stdout.strip()
    if APP_ID.match(app_id):
        apps.append(app_id)
    assert train.returncode == 0, train.stderr[-5000:]
    logs = aggregated_logs(app_id)
    accuracies = [float(x) for x in re.findall(r"eval_accuracy=([0-9.]+)", logs)]
    assert len(accuracies) == 2 and min(accuracies) >= 0.84, accuracies
    shares = sorted(int(x) for x in re.findall(r"trained on (\d+) rows", logs))
    assert sum(shares) == 32561, shares  # each worker its own share, every row once


SPARK_WRITE = """
import sys
from pyspark.sql import SparkSession
from tfyarn.data import spark as tds
spark = (SparkSession.builder.master("yarn").appName("tfyarn-jni-write")
         .config("spark.ui.enabled", "false").config("spark.executor.instances", "2")
         .config("spark.executor.memory", "1g")
         .config("spark.hadoop.dfs.webhdfs.enabled", "false").getOrCreate())
assert tds._sink(spark, sys.argv[1])[0] == "hadoop"
m = tds.write(spark.range(0, 1000, numPartitions=4), sys.argv[1])
print(m.rows, len(m.shards))
spark.stop()
"""


def test_spark_executors_on_yarn_write_through_hadoops_client(tmp_path):
    """Where WebHDFS cannot serve (here: turned off; also s3a://, Kerberos), Spark's
    executors in YARN containers write TFRecord through libhdfs, finding Hadoop from
    what YARN gives a container; every row is there once."""
    from tfyarn.data import read

    url = f"hdfs:///tmp/tfyarn-jni-{uuid.uuid4().hex[:8]}"
    out = subprocess.run([sys.executable, "-c", SPARK_WRITE, url], capture_output=True,
                         text=True, timeout=600, env={**os.environ,
                                                      "PYSPARK_PYTHON": sys.executable})
    assert out.returncode == 0 and out.stdout.split() == ["1000", "4"], out.stderr[-5000:]
    assert sorted(r["id"] for r in read.rows(url)) == list(range(1000))
    hdfs_cli("-rm", "-r", "-f", url)


@pytest.mark.exclusive  # counts the cluster's applications
def test_data_that_is_not_committed_is_refused_before_submitting(tmp_path):
    bare = f"/tmp/tfyarn-uncommitted-{uuid.uuid4().hex[:8]}"
    subprocess.run(["hdfs", "dfs", "-mkdir", "-p", f"{bare}/.tfyarn-x"], check=True,
                   capture_output=True, timeout=120)  # a write that died: no manifest
    before = yarn_cli("application", "-list", "-appStates", "ALL")
    out = subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                          "2", "--data", f"hdfs://{bare}", "--python", sys.executable, "-c",
                          "true"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.startswith(f"Error: --data hdfs://{bare}: no "
                                                         "committed dataset"), out.stderr
    assert not out.stdout and "Traceback" not in out.stderr
    after = yarn_cli("application", "-list", "-appStates", "ALL")
    assert len(after.splitlines()) == len(before.splitlines())  # nothing was submitted


# ---------------------------------------------------------------- speed at scale (#19)


def _skein_drivers() -> list[int]:
    """Live skein driver JVMs on this machine."""
    from proctable import live

    return [p.pid for p in live() if "com.anaconda.skein.Driver" in p.cmdline]


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(x.decode().partition("=")[::2] for x in f.read().split(b"\0") if x)


def _conf_read(pid: int) -> str:
    """The Hadoop configuration dir a skein driver JVM reads: its classpath's first dir
    (tfyarn gives it with -cp, the jars first; the process environment is left alone)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = [x.decode() for x in f.read().split(b"\0")]
    return next(e for e in argv[argv.index("-cp") + 1].split(os.pathsep) if os.path.isdir(e))


@pytest.mark.exclusive  # counts the machine's skein JVMs
def test_driver_stop_leaves_the_sites_configuration_it_read_as_it_is(tmp_path):
    """No HADOOP_CONF_DIR: the Hadoop install's etc/hadoop is the configuration. When tfyarn
    cannot amend its hdfs-site.xml, the warm skein driver reads that dir itself, and `tfyarn
    driver stop` removes nothing of it. (A HADOOP_HOME of its own: the sandbox install's
    scripts copied, which find their home by their own path, its jars linked.)"""
    real = os.environ["HADOOP_HOME"]
    home = tmp_path / "hadoop"
    for name in ("bin", "libexec"):
        shutil.copytree(os.path.join(real, name), home / name, symlinks=False)
    for name in ("share", "lib"):
        os.symlink(os.path.join(real, name), home / name)
    site = home / "etc" / "hadoop"
    shutil.copytree(os.environ["HADOOP_CONF_DIR"], site)
    (site / "hdfs-site.xml").write_text("<configuration/>\n")
    env = {k: v for k, v in os.environ.items() if k != "HADOOP_CONF_DIR"}
    env.update(HADOOP_HOME=str(home), PATH=f"{home}/bin:{env['PATH']}")
    tfyarn = [sys.executable, "-m", "tfyarn"]
    started = subprocess.run([*tfyarn, "skein-driver", "start"], env=env, capture_output=True,
                             text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    try:
        assert [_conf_read(pid) for pid in _skein_drivers()] == [str(site)]
        assert [_environ(pid).get("HADOOP_CONF_DIR") for pid in _skein_drivers()] == [None]
    finally:
        stopped = subprocess.run([*tfyarn, "skein-driver", "stop"], env=env, capture_output=True,
                                 text=True, timeout=120)
    assert stopped.returncode == 0 and "warm skein driver stopped" in stopped.stderr
    assert sorted(os.listdir(site)) == sorted(os.listdir(os.environ["HADOOP_CONF_DIR"]))


def test_the_client_leaves_the_process_environment_as_it_is(tmp_path):
    """A notebook's kernel: YARN clients in one process for two configurations in turn.
    Each skein JVM reads its own configuration, and os.environ and sys.unraisablehook
    are as they were after each (and after a start that failed)."""
    from tfyarn.client import cluster
    from tfyarn.core.settings import Settings

    other = tmp_path / "conf"
    shutil.copytree(os.environ["HADOOP_CONF_DIR"], other)
    env, hook = dict(os.environ), sys.unraisablehook
    for conf in (None, str(other)):
        opts = cluster.ClientOptions(conf_dir=conf, settings=Settings.from_environ())
        with cluster.yarn_client(opts) as client:
            assert client.applications(["RUNNING", "FINISHED"], "tfyarn") is not None
            mine = [pid for pid in _skein_drivers() if _parent(pid) == os.getpid()]
            assert len(mine) == 1, mine
            read = _conf_read(mine[0])
            assert os.path.realpath(os.path.join(read, "core-site.xml")) == os.path.realpath(
                os.path.join(conf or os.environ["HADOOP_CONF_DIR"], "core-site.xml"))
        # its JVM ended with the client (SIGKILLed, reaped): none of this process's is left
        assert not [pid for pid in _skein_drivers() if _parent(pid) == os.getpid()]
        assert dict(os.environ) == env and sys.unraisablehook is hook



def test_a_failed_driver_start_is_one_error_and_no_noise(tmp_path, capfd):
    """A JVM that does not start: one TfYarnError, and the half-built skein client's
    teardown says nothing (no `Exception ignored in` on stderr), with the process's
    unraisable hook left alone."""
    import gc

    from tfyarn.client.skeinclient import Yarn
    from tfyarn.core.errors import TfYarnError

    hook = sys.unraisablehook
    with pytest.raises(TfYarnError, match="skein"):
        Yarn.start(None, None, str(tmp_path / "driver.log"), None, ["-XX:+NoSuchOption"])
    gc.collect()
    assert "Exception ignored" not in capfd.readouterr().err
    assert sys.unraisablehook is hook


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_cold_command_starts_skeins_driver_from_the_users_class_archive(el_submit, tmp_path):
    """The first cold command writes the class-data archive of skein's driver (0600, in a
    0700 dir of the user's cache) as its driver ends; the next one's driver maps skein's
    and Hadoop's classes from it (the JVM's own class-load log says where each came from)."""
    cache = tmp_path / "cache"

    def classes(n: int) -> str:
        log = tmp_path / f"classes-{n}.log"
        out, _ = el_submit("-t", "standalone", "-wm", "512", "-c", "true",
                           env={"XDG_CACHE_HOME": str(cache), "SKEIN_DRIVER_JAVA_OPTIONS":
                                f"-Xlog:class+load=info:file={log}"})
        assert out.returncode == 0, out.stderr
        return log.read_text()

    def source(log: str, name: str) -> str:
        return next(x for x in log.splitlines() if f" {name} source: " in x)

    first = classes(1)
    assert "shared objects file (top)" not in source(first, "com.anaconda.skein.Driver")
    folder = cache / "tfyarn" / "jvm"
    archives = os.listdir(folder)
    assert len(archives) == 1 and archives[0].endswith(".jsa"), archives
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert os.stat(folder / archives[0]).st_mode & 0o777 == 0o600
    second = classes(2)
    for name in ("com.anaconda.skein.Driver", "org.apache.hadoop.yarn.client.api.YarnClient"):
        assert "shared objects file (top)" in source(second, name), source(second, name)
    assert os.listdir(folder) == archives


@pytest.mark.exclusive  # a warm skein driver, the user's one; counts the machine's skein JVMs
def test_a_warm_driver_serves_submit_status_and_kill_without_a_new_jvm(el_submit):
    """`tfyarn skein-driver start`: then el_submit, status and kill start no skein driver of
    their own (each would be a JVM); `tfyarn skein-driver stop` ends it."""
    tfyarn = [sys.executable, "-m", "tfyarn"]
    started = subprocess.run([*tfyarn, "skein-driver", "start"], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "SKEIN_DRIVER_JAVA_OPTIONS":
                                               "-Dtfyarn.test.user-option=1"})
    assert started.returncode == 0, started.stderr
    try:
        warm = _skein_drivers()
        assert len(warm) == 1, warm
        with open(f"/proc/{warm[0]}/cmdline", "rb") as f:  # tfyarn's start-up options, and
            argv = [x.decode() for x in f.read().split(b"\0")]  # the user's, skein's setting
        assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                "-Dtfyarn.test.user-option=1"} <= set(argv), argv
        again = subprocess.run([*tfyarn, "skein-driver", "start"], capture_output=True, text=True,
                               timeout=300)
        assert again.returncode == 0 and "already running" in again.stderr, again.stderr
        assert _skein_drivers() == warm
        conf = _conf_read(warm[0])  # the site's, faster HDFS close retries
        assert conf != os.environ["HADOOP_CONF_DIR"]
        assert siteconf.CLIENT_DEFAULTS.items() <= \
            siteconf.read_site(os.path.join(conf, "hdfs-site.xml")).items()
        status = subprocess.run([*tfyarn, "skein-driver", "status"], capture_output=True, text=True,
                                timeout=120)
        assert status.stdout.startswith("running at "), status.stdout + status.stderr
        log = re.search(r"\(log: (\S+)\)", started.stderr).group(1)
        out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", "-c", "true")
        assert out.returncode == 0, out.stderr
        assert _skein_drivers() == warm
        with open(log, encoding="utf-8") as f:
            assert app_id in f.read()  # the warm skein driver submitted it
        done = subprocess.run([*tfyarn, "status", app_id], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and "SUCCEEDED" in done.stdout, done.stdout + done.stderr
    finally:
        stopped = subprocess.run([*tfyarn, "skein-driver", "stop"], capture_output=True, text=True,
                                 timeout=120)
    assert stopped.returncode == 0 and "warm skein driver stopped" in stopped.stderr
    assert not _skein_drivers()
    assert not os.path.exists(conf)
