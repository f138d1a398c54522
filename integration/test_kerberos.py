"""tfyarn through the front door of a Kerberized cluster (#28), on the sandbox started with
SANDBOX_SECURE=1: an MIT KDC on 127.0.0.1, HDFS and YARN with kerberos authentication,
service authorization, block access tokens, SPNEGO, and HDFS delegation tokens that live
minutes (`pytest integration/test_kerberos.py --yarn`; CI runs it after the rest of the
suite, on the same 3 nodes restarted secured). Skipped on a cluster without Kerberos.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import (
    APP_ID,
    DATA,
    REPO,
    aggregated_logs,
    aggregation_done,
    apps_by_name,
    final_state,
    packed_env,
    py,
    wait_until,
    yarn_cli,
)

from tfyarn.client import kerberos, rm
from tfyarn.hdfs import siteconf, spnego

pytestmark = [pytest.mark.yarn, pytest.mark.concurrent]  # integration/conftest.py
SMALL = ["-pm", "768", "-wm", "768"]


@pytest.fixture(scope="module", autouse=True)
def secured(tmp_path_factory):
    """This module's ticket cache, from the sandbox's user keytab (what `kinit -kt` does);
    every command a test runs finds it through KRB5CCNAME."""
    if not siteconf.kerberized(os.environ.get("HADOOP_CONF_DIR")):
        pytest.skip("the cluster has no Kerberos: SANDBOX_SECURE=1 scripts/yarn-sandbox start")
    for var in ("KRB5_CONFIG", "SANDBOX_PRINCIPAL", "SANDBOX_KEYTAB"):
        assert os.environ.get(var), f"{var}: eval \"$(scripts/yarn-sandbox env)\" first"
    cache = tmp_path_factory.mktemp("krb") / "ccache"
    old = os.environ.get("KRB5CCNAME")
    os.environ["KRB5CCNAME"] = f"FILE:{cache}"
    kinit()
    yield
    if old is None:
        os.environ.pop("KRB5CCNAME", None)
    else:
        os.environ["KRB5CCNAME"] = old


def kinit(*extra: str, env: dict | None = None) -> None:
    subprocess.run(["kinit", *extra, "-kt", os.environ["SANDBOX_KEYTAB"],
                    os.environ["SANDBOX_PRINCIPAL"]], check=True, env=env)


def no_ticket(tmp_path: Path) -> dict:
    """An environment whose ticket cache is empty (a user who never ran kinit)."""
    return {**os.environ, "KRB5CCNAME": f"FILE:{tmp_path / 'empty-ccache'}"}


def submit(*args: str, env: dict | None = None, cwd: Path | None = None,
           timeout: float = 600) -> tuple[subprocess.CompletedProcess, str]:
    cmd = [sys.executable, "-m", "tfyarn.cli", *args[:args.index("-c")],
           "--python", sys.executable, *args[args.index("-c"):]]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                         env=env or dict(os.environ))
    app_id = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    return out, app_id if APP_ID.match(app_id) else ""


def tfyarn(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfyarn", *args], capture_output=True,
                          text=True, timeout=300, env=env or dict(os.environ))


def own_name() -> str:
    """A refused job's name of its own: the test checks what it submitted by name
    (`apps_by_name`) without counting everyone's applications, so it need not run alone
    (waiting out the token-lifetime test, 4 minutes of CI's Kerberos phase)."""
    return f"refused-{os.urandom(4).hex()}"


def one_error(out: subprocess.CompletedProcess) -> str:
    """The run exited 2 with exactly one `Error:` line and no traceback; that line."""
    assert out.returncode == 2, out.stderr
    errors = [x for x in out.stderr.splitlines() if x.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
    return errors[0]


def test_without_a_ticket_the_cluster_refuses_and_el_submit_says_what_to_run(tmp_path):
    bare = no_ticket(tmp_path)
    hdfs = subprocess.run(["hdfs", "dfs", "-ls", "/"], capture_output=True, text=True, env=bare)
    assert hdfs.returncode != 0 and "Client cannot authenticate via:[TOKEN, KERBEROS]" in \
        hdfs.stderr
    name = own_name()
    out, _ = submit("-t", "standalone", "-a", name, *SMALL, "-c", "true", env=bare)
    assert one_error(out).startswith(f"Error: no Kerberos ticket in {bare['KRB5CCNAME']}: run "
                                     "kinit")
    assert name not in apps_by_name()  # nothing submitted
    status = tfyarn("ls", env=bare)
    assert one_error(status).startswith("Error: no Kerberos ticket")


def _stale_keytab(tmp_path: Path) -> tuple[str, Path]:
    """A principal of its own whose keytab holds an old key (its key changed since)."""
    kdc = {**os.environ, "KRB5_KDC_PROFILE": str(Path(os.environ["KRB5_CONFIG"]).parent /
                                                   "kdc.conf")}
    principal, keytab = f"stale{os.getpid()}@TFYARN.TEST", tmp_path / "stale.keytab"
    for query in (f"addprinc -randkey {principal}", f"ktadd -k {keytab} {principal}",
                  f"cpw -randkey {principal}"):
        subprocess.run(["kadmin.local", "-q", query], check=True, capture_output=True, env=kdc)
    return principal, keytab


def test_a_bad_keytab_is_one_error_naming_the_principal_and_nothing_is_submitted(tmp_path):
    bare = no_ticket(tmp_path)
    name = own_name()
    out, _ = submit("-t", "standalone", "-a", name, *SMALL, "--principal", "nobody@TFYARN.TEST",
                    "--keytab", os.environ["SANDBOX_KEYTAB"], "-c", "true", env=bare)
    assert f"holds no key for nobody@TFYARN.TEST (it has: {os.environ['SANDBOX_PRINCIPAL']})" \
        in one_error(out)
    principal, keytab = _stale_keytab(tmp_path)
    out, _ = submit("-t", "standalone", "-a", name, *SMALL, "--principal", principal,
                    "--keytab", str(keytab), "-c", "true", env=bare)
    assert one_error(out).startswith(f"Error: Kerberos refused --principal {principal} with "
                                     f"--keytab {keytab} (")
    assert name not in apps_by_name()  # nothing submitted


# Order matters here (xdist hands tests out in file order): this one comes early, and
# mostly waits out the tokens' lifetime (about 4 minutes) on its own worker while the
# README's `-n 3` runs the rest on the other two; placed later, the phase ended with it
# running alone. No test here runs alone: two that did (counting the cluster's
# applications) once waited out this one first, 5 minutes of CI (2026-11-30).
LONG = """
import sys, time
import tensorflow as tf
d, end, i = sys.argv[1], time.time() + float(sys.argv[2]), 0
tf.io.gfile.makedirs(d)
while time.time() < end:
    with tf.io.gfile.GFile(f"{d}/step-{i}", "w") as f:
        f.write(str(i))
    with tf.io.gfile.GFile(f"{d}/step-{i}") as f:
        assert f.read() == str(i)
    print("step", i, "ok", flush=True)
    i += 1
    time.sleep(10)
print("LONGOK", i)
"""


def test_a_job_outliving_its_tokens_lives_by_keytab_and_fails_by_ticket_saying_so(tmp_path):
    """The sandbox's HDFS delegation tokens die after dfs.namenode.delegation.token.max-
    lifetime (minutes). Two jobs write and read HDFS through the plugin every 10 s for
    longer than that: by --principal/--keytab (the tasks log in themselves) to the end;
    by the ticket cache alone, failing once its token dies, with one line saying what to
    pass (and no restart: the same tokens would fail again)."""
    hdfs_site = siteconf.read_site(os.path.join(os.environ["HADOOP_CONF_DIR"], "hdfs-site.xml"))
    lifetime = int(hdfs_site["dfs.namenode.delegation.token.max-lifetime"]) / 1000
    assert lifetime <= 600, "start the sandbox with SANDBOX_TOKEN_MAX_S of minutes"
    (tmp_path / "long.py").write_text(LONG)
    home = f"hdfs:///user/{os.environ['SANDBOX_PRINCIPAL'].split('@')[0]}"
    keytab = ["--principal", os.environ["SANDBOX_PRINCIPAL"], "--keytab",
              os.environ["SANDBOX_KEYTAB"]]

    def start(name: str, *login: str, env: dict) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "tfyarn.cli", "-t", "standalone", "-wm", "1024", "-f",
               "long.py", "--max-restarts", "1", *login, "--python", sys.executable, "-c",
               f"python long.py {home}/long-{name}-{os.getpid()} {lifetime + 40}"]
        return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    by_keytab = start("keytab", *keytab, env=no_ticket(tmp_path))
    by_ticket = start("ticket", env=dict(os.environ))
    out_k, err_k = by_keytab.communicate(timeout=lifetime + 400)
    out_t, err_t = by_ticket.communicate(timeout=400)
    assert by_keytab.returncode == 0, err_k[-5000:]
    assert "LONGOK" in aggregated_logs(out_k.strip().splitlines()[0], "worker:0")
    assert by_ticket.returncode == 1, err_t[-5000:]
    error = next(x for x in err_t.splitlines() if x.startswith("Error: "))
    assert "worker:0: exited with code 1 after its HDFS delegation token expired" in error
    assert "resubmit with --principal YOU@REALM --keytab KEYTAB" in error, error
    assert "restarting after" not in err_t, err_t[-3000:]


def test_submit_with_the_ticket_cache_then_status_logs_ls_kill():
    out, app_id = submit("-t", "tensorflow-worker", "-wn", "2", *SMALL, "-c",
                         'echo "hello from $TFYARN_TASK_TYPE:$TFYARN_TASK_INDEX"')
    assert out.returncode == 0, out.stderr
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    status = tfyarn("status", app_id, "--tasks")
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout, status.stderr
    # the page its driver kept in HDFS (WebHDFS with the AM's delegation token: the AM
    # has no Kerberos login), read back over SPNEGO
    kept = status.stdout.split("tasks (its kept page", 1)[-1]
    assert re.search(r"worker:1 +\S+ +exited 0", kept), status.stdout
    assert "hello from worker:1" in aggregated_logs(app_id, "worker:1")
    assert app_id in tfyarn("ls", "--all").stdout
    out, sleeper = submit("-t", "standalone", *SMALL, "--detach", "-c", "sleep 300")
    assert out.returncode == 0 and sleeper, out.stderr
    wait_until(lambda: "RUNNING" in tfyarn("status", sleeper).stdout, 120, "the sleeper running")
    assert tfyarn("kill", sleeper).returncode == 0
    assert final_state(sleeper).endswith("/KILLED")


def test_submit_with_principal_and_keytab_and_no_ticket_then_status_logs_ls(tmp_path):
    bare = no_ticket(tmp_path)
    out, app_id = submit("-t", "standalone", *SMALL, "--principal",
                         os.environ["SANDBOX_PRINCIPAL"], "--keytab", os.environ["SANDBOX_KEYTAB"],
                         "-c", "echo by-keytab", env=bare)
    assert out.returncode == 0, out.stderr
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    login = ["--principal", os.environ["SANDBOX_PRINCIPAL"], "--keytab",
             os.environ["SANDBOX_KEYTAB"]]  # cron's lifecycle commands: a keytab, no ticket
    status = tfyarn("status", app_id, *login, env=bare)
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout, status.stderr
    assert app_id in tfyarn("ls", "--all", *login, env=bare).stdout
    wait_until(lambda: aggregation_done(app_id), 90, "log aggregation")
    logs = tfyarn("logs", app_id, *login, env=bare)
    assert logs.returncode == 0 and "by-keytab" in logs.stdout, logs.stderr
    assert subprocess.run(["klist", "-s"], env=bare).returncode != 0  # the user's cache: untouched


def test_rest_speaks_spnego_where_the_rm_asks_for_it():
    """status/ls read the RM's REST API (no JVM): 401 Negotiate without a login, the
    report with the ticket cache's SPNEGO token."""
    conf, user = os.environ["HADOOP_CONF_DIR"], os.environ["SANDBOX_PRINCIPAL"].split("@")[0]
    login = kerberos.login(conf, None, None, os.environ["KRB5CCNAME"])
    assert login is not None
    apps = rm.RestClient.from_conf_dir(conf, user, login).apps("tfyarn", rm.ALL_STATES)
    assert apps and all(a.app_id.startswith("application_") for a in apps)
    with pytest.raises(rm.Unavailable, match="401"):
        rm.RestClient.from_conf_dir(conf, user).apps("tfyarn", rm.ALL_STATES)


def test_an_expired_ticket_is_one_error_naming_the_principal(tmp_path):
    short = no_ticket(tmp_path)
    kinit("-l", "2s", env=short)
    wait_until(lambda: subprocess.run(["klist", "-s"], env=short).returncode != 0, 30,
               "the 2 s ticket expired")
    out, _ = submit("-t", "standalone", *SMALL, "-c", "true", env=short)
    who = os.environ["SANDBOX_PRINCIPAL"]
    assert one_error(out).startswith(f"Error: the Kerberos ticket of {who} in "
                                     f"{short['KRB5CCNAME']} has expired: run kinit {who}")


def test_census_with_a_keytab_reads_hdfs_through_the_plugin(tmp_path):
    """The done-when of #28: EMR's census command, --principal/--keytab and no ticket
    cache, its data read from hdfs:// in the containers (their delegation tokens)."""
    base = f"/user/{os.environ['SANDBOX_PRINCIPAL'].split('@')[0]}/census-{os.getpid()}"
    put = subprocess.run(["hdfs", "dfs", "-mkdir", "-p", base], capture_output=True, text=True)
    assert put.returncode == 0, put.stderr
    put = subprocess.run(["hdfs", "dfs", "-put", "-f", str(DATA / "adult.data"),
                          str(DATA / "adult.test"), base], capture_output=True, text=True)
    assert put.returncode == 0, put.stderr
    shutil.copy(REPO / "examples" / "census" / "census_single.py", tmp_path)
    out, app_id = submit("-t", "tensorflow-ps", "-a", "wide_and_deep", "-m", "local", "-x",
                         "True", "-f", "census_single.py", "-pn", "1", "-pc", "1", "-pm", "1024",
                         "-wn", "1", "-wc", "1", "-wm", "1024", "--principal",
                         os.environ["SANDBOX_PRINCIPAL"], "--keytab", os.environ["SANDBOX_KEYTAB"],
                         "-c", "python", "census_single.py", "--data-dir",
                         f"hdfs://127.0.0.1:9000{base}", env=no_ticket(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    acc = [float(x) for x in re.findall(r"eval_accuracy=(\d\.\d+)", aggregated_logs(app_id))]
    assert acc and acc[-1] >= 0.84, acc
    status = tfyarn("status", app_id)
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout, status.stderr



def test_the_env_cache_and_f_from_hdfs_over_spnego(tmp_path):
    """-m virtual-env's archive goes to the HDFS cache over WebHDFS with SPNEGO once, and
    a resubmit uploads nothing; `-f hdfs://` is localized with the job's tokens."""
    packed_env(tmp_path)
    cfg = f"/user/{os.environ['SANDBOX_PRINCIPAL'].split('@')[0]}/cfg-{os.getpid()}.txt"
    (tmp_path / "cfg.txt").write_text("lr=0.1")
    put = subprocess.run(["hdfs", "dfs", "-put", "-f", str(tmp_path / "cfg.txt"), cfg],
                         capture_output=True, text=True)
    assert put.returncode == 0, put.stderr
    run = ("-t", "standalone", "-m", "virtual-env", "-m_arg", "env.tar.gz", "-f",
           f"hdfs://{cfg}", *SMALL, "-c",
           "cat cfg-*.txt; echo; " + py("import sys; print('PREFIX', sys.prefix)"))
    first, app_id = submit(*run, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert re.search(r"-m_arg: uploaded \d+ MB to the HDFS cache \(hdfs:///user/\S+/\.tfyarn/"
                     r"cache/", first.stderr), first.stderr
    second, app_id = submit(*run, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "-m_arg: cached on HDFS, nothing uploaded" in second.stderr
    logs = aggregated_logs(app_id, "worker:0")
    assert "lr=0.1" in logs and re.search(r"PREFIX \S+/env\b", logs), logs


SPARK_WRITE = """
import sys
from pyspark.sql import SparkSession, functions as F
from tfyarn.data import spark as tds
spark = (SparkSession.builder.master("yarn").appName("tfyarn-kerberos-write")
         .config("spark.ui.enabled", "false").config("spark.executor.instances", "2")
         .config("spark.executor.memory", "1g").getOrCreate())
df = spark.range(0, 1000, numPartitions=4).withColumn("x", F.col("id") * 2)
assert tds._sink(spark, sys.argv[1])[0] == "hadoop"  # Kerberos: Hadoop's own client
m = tds.write(df, sys.argv[1])
print(m.rows, len(m.shards))
spark.stop()
"""

READ_SHARE = ("import tfyarn.data as d; rows = list(d.rows()); "
              "print('SHARE', len(rows), sum(r['x'] for r in rows))")


def test_spark_on_yarn_writes_tfyarn_data_and_tasks_read_it_with_data(tmp_path):
    """Spark on this Kerberized YARN (the ticket cache; its executors write with the
    tokens Spark got them) writes a dataset; `--data` checks it from the gateway over
    WebHDFS with SPNEGO; two workers each read their share through the plugin."""
    import uuid

    from tfyarn.data import read

    url = f"hdfs:///user/{os.environ['SANDBOX_PRINCIPAL'].split('@')[0]}/ds-{uuid.uuid4().hex[:8]}"
    java = f"-Djava.security.krb5.conf={os.environ['KRB5_CONFIG']}"  # Spark's driver JVM
    out = subprocess.run([sys.executable, "-c", SPARK_WRITE, url], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYSPARK_PYTHON":
                                                      sys.executable, "SPARK_SUBMIT_OPTS": java})
    assert out.returncode == 0 and out.stdout.split() == ["1000", "4"], out.stderr[-5000:]
    assert read.manifest(url).rows == 1000  # the gateway's read: WebHDFS with SPNEGO
    run, app_id = submit("-t", "tensorflow-worker", "-wn", "2", *SMALL, "--data", url,
                         "-c", py(READ_SHARE))
    assert run.returncode == 0, run.stderr[-5000:]
    shares = re.findall(r"SHARE (\d+) (\d+)", aggregated_logs(app_id))
    assert len(shares) == 2 and sum(int(n) for n, _ in shares) == 1000, shares
    assert sum(int(t) for _, t in shares) == 2 * sum(range(1000))


def test_job_page_through_the_rm_proxy_with_spnego(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-ps", "-pn",
                             "1", "-wn", "1", *SMALL, "--python", sys.executable, "-c",
                             "sleep 600"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    page, training = None, False
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("tfyarn: job page: "):
            page = line.split(": ", 2)[2].strip()
        training = training or "training" in line  # said before the page's URL or after
        if page and training:
            break
    app_id = (proc.stdout.readline() if proc.stdout else "").strip()
    try:
        assert page and APP_ID.match(app_id), page
        with pytest.raises(urllib.error.HTTPError, match="401"):
            spnego.urlopen(page, {}, None, 30)  # the proxy wants a login
        login = kerberos.login(os.environ["HADOOP_CONF_DIR"], None, None, None)
        with spnego.urlopen(page, {}, login, 30) as resp:
            html = resp.read().decode()
        for task in ("ps:0", "chief:0"):
            assert f"<td>{task}</td>" in html, html
    finally:
        if app_id:
            yarn_cli("application", "-kill", app_id)
        proc.communicate(timeout=120)


NUMBERED = ('for i in $(seq 1 60); do echo "n $i of $TFYARN_TASK_TYPE:$TFYARN_TASK_INDEX"; '
            'sleep 0.2; done')


def test_interact_streams_lines_while_the_job_runs():
    """-interact reads the NodeManagers' logs as they grow (their REST API wants SPNEGO):
    every line once, in order, the first ones while the job runs (without SPNEGO all
    would come from `yarn logs` after it)."""
    out, app_id = submit("-t", "tensorflow-worker", "-wn", "2", *SMALL, "-interact", "True",
                         "-c", NUMBERED)
    assert out.returncode == 0, out.stderr[-5000:]
    lines = out.stderr.splitlines()
    finishing = lines.index("tfyarn: finishing")
    for task in ("worker:0", "worker:1"):
        got = [(i, x) for i, x in enumerate(lines) if x.startswith(f"[{task}] n ")]
        assert [x for _, x in got] == [f"[{task}] n {k} of {task}" for k in range(1, 61)]
        assert got[0][0] < finishing, "no line came while the job ran: not read live"


def other_user(tmp_path: Path) -> dict:
    """An environment holding the second principal's ticket (another user of the cluster,
    tfyarn-mallory: `scripts/yarn-sandbox`'s SANDBOX_OTHER_*)."""
    for var in ("SANDBOX_OTHER_PRINCIPAL", "SANDBOX_OTHER_KEYTAB"):
        assert os.environ.get(var), f"{var}: eval \"$(scripts/yarn-sandbox env)\" first"
    env = {**os.environ, "KRB5CCNAME": f"FILE:{tmp_path / 'other-ccache'}"}
    subprocess.run(["kinit", "-kt", os.environ["SANDBOX_OTHER_KEYTAB"],
                    os.environ["SANDBOX_OTHER_PRINCIPAL"]], check=True, env=env)
    return env


def webhdfs_as(env: dict):
    """A WebHDFS client (SPNEGO) logged in from `env`'s ticket cache: HDFS as that user,
    without a JVM per call."""
    from tfyarn.hdfs import webhdfs

    login = spnego.Negotiator(ccache=env.get("KRB5CCNAME"))
    return webhdfs.client_for("hdfs:///", os.environ["HADOOP_CONF_DIR"], "", login)


def denied(call) -> str:
    """What HDFS said refusing `call()` (it must refuse it for lack of permission)."""
    from hdfs.util import HdfsError

    with pytest.raises(HdfsError) as exc:
        call()
    assert "Permission denied" in str(exc.value), exc.value
    return str(exc.value)


def test_another_principal_neither_kills_views_nor_reads_the_job(tmp_path):
    """docs/security.md C1-C4 with Kerberos, as tfyarn-mallory@TFYARN.TEST (no ACL entry):
    `yarn application -kill` is refused and the job runs on; the job page through the
    RM's proxy is refused; the staged job (skein's .skein/APP, with the --env values),
    skein's jar that the owner's AMs run (.skein/jars: nor writable) and tfyarn's HDFS dir
    (checkpoints, models, kept pages) are unreadable; the secret shows
    nowhere mallory can look. The owner then kills it."""
    secret = "tok-" + os.urandom(6).hex()
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "standalone", *SMALL,
                             "--env", f"SERVICE_TOKEN={secret}", "--python", sys.executable,
                             "-c", "sleep 600"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    app_id = proc.stdout.readline().strip()
    page = None
    for line in proc.stderr:
        if line.startswith("tfyarn: job page: "):
            page = line.split(": ", 2)[2].strip()
            break
    mallory = other_user(tmp_path)
    owner = pwd.getpwuid(os.geteuid()).pw_name
    try:
        assert page and APP_ID.match(app_id), (page, app_id)
        login = kerberos.login(os.environ["HADOOP_CONF_DIR"], None, None, None)
        wait_until(lambda: "running" in _page(page, login), 180, "the page shows the task")
        out = subprocess.run(["yarn", "application", "-kill", app_id], capture_output=True,
                             text=True, timeout=120, env=mallory)
        assert out.returncode != 0
        assert "cannot perform operation MODIFY_APP" in out.stderr, out.stderr[-2000:]
        assert final_state(app_id).startswith("RUNNING"), final_state(app_id)
        theirs = spnego.Negotiator(ccache=mallory["KRB5CCNAME"])
        with pytest.raises(urllib.error.HTTPError) as refused:
            spnego.urlopen(page, {}, theirs, 30).read()
        body = refused.value.read().decode(errors="replace")
        assert refused.value.code in (401, 403) and "worker:0" not in body, body[-2000:]
        mine, theirs_hdfs = webhdfs_as(dict(os.environ)), webhdfs_as(mallory)
        staged_dir = f"/user/{owner}/.skein/{app_id}"
        files = mine.list(staged_dir)
        assert files, "skein staged nothing?"
        # skein's jar and the AMs' class-data archive, run by the owner's AMs (0016, 0017)
        jars = f"/user/{owner}/.skein/jars"
        for path in (staged_dir, f"/user/{owner}/.tfyarn", jars):
            denied(lambda path=path: theirs_hdfs.list(path))
        for forged in ("forged.jar", "forged.jsa"):
            denied(lambda forged=forged: theirs_hdfs.write(f"{jars}/{forged}", b"not skein"))
        for name in files:  # the job JSON among them, with SERVICE_TOKEN's value
            said = denied(lambda name=name: theirs_hdfs.read(f"{staged_dir}/{name}").__enter__())
            assert secret not in said
        assert mine.status(f"/user/{owner}/.tfyarn")["permission"] == "700"
    finally:
        if app_id:
            yarn_cli("application", "-kill", app_id)
        proc.communicate(timeout=120)
    assert final_state(app_id).endswith("/KILLED")


def _page(url: str, login: spnego.Negotiator) -> str:
    try:
        with spnego.urlopen(url, {}, login, 30) as resp:
            return resp.read().decode(errors="replace")
    except urllib.error.HTTPError:
        return ""


def test_history_with_spnego_shows_each_viewer_what_the_view_acl_admits(tmp_path):
    """docs/security.md H5: `tfyarn history --spnego-keytab` on a Kerberized cluster. No
    login: 401 Negotiate. tfyarn-mallory (a second principal) sees the job whose
    --view-acls names them and not the other one, whose page answers 404 as a job that
    never was; the cookie the server signs carries the login on, a forged one does not;
    the owner (here also YARN's admin) sees both. The pages are kept in one history dir
    for everyone (tfyarn.yaml `history: dir:`, 1777 in HDFS, H2): mallory's page in the
    owner's name is not shown, the owner's pages cannot be removed by mallory, and
    mallory's broken page does not break the listing (H3)."""
    team = f"/tmp/tfyarn-history-{os.urandom(4).hex()}"
    owner_env = dict(os.environ)
    mine_hdfs = webhdfs_as(owner_env)
    mine_hdfs.makedirs(team, permission="1777")
    (tmp_path / "tfyarn.yaml").write_text(f"history:\n  dir: hdfs://{team}\n")
    env = {**owner_env, "TFYARN_CONF": str(tmp_path / "tfyarn.yaml")}
    mine, _ = submit("-t", "standalone", *SMALL, "-c", "true", env=env)
    shared, _ = submit("-t", "standalone", *SMALL, "--view-acls", "tfyarn-mallory", "-c", "true",
                       env=env)
    assert mine.returncode == 0 and shared.returncode == 0, mine.stderr[-3000:]
    hidden, seen = mine.stdout.split()[0], shared.stdout.split()[0]
    for app in (hidden, seen):  # each driver keeps its page once YARN has the verdict
        wait_until(lambda app=app: mine_hdfs.status(f"{team}/{app}.json", strict=False),
                   30, f"{app}'s kept page")
    mallory = other_user(tmp_path)
    theirs_hdfs = webhdfs_as(mallory)
    denied(lambda: theirs_hdfs.delete(f"{team}/{hidden}.json"))  # the sticky bit
    with mine_hdfs.read(f"{team}/{hidden}.json", encoding="utf-8") as reader:
        page = json.load(reader)
    theirs_hdfs.write(f"{team}/application_1_9998.json", encoding="utf-8", data=json.dumps(
        {**page, "job_id": "application_1_9998", "name": "FORGED"}))  # in the owner's name
    theirs_hdfs.write(f"{team}/application_1_9999.json", encoding="utf-8", data=json.dumps(
        {**page, "job_id": "application_1_9999", "user": "tfyarn-mallory", "started": 1e300}))
    service = str(Path(os.environ["SANDBOX_KEYTAB"]).parent / "service.keytab")
    server = subprocess.Popen([sys.executable, "-m", "tfyarn", "history", "--port", "0",
                               "--spnego-keytab", service], stderr=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert server.stderr is not None
        url = next(line for line in server.stderr if line.startswith("tfyarn: history: "))
        url = url.split(": ", 2)[2].split()[0]
        assert "token=" not in url, url
        with pytest.raises(urllib.error.HTTPError) as asked:
            urllib.request.urlopen(url, timeout=30)
        assert asked.value.code == 401 and asked.value.headers["WWW-Authenticate"] == "Negotiate"
        theirs = spnego.Negotiator(ccache=mallory["KRB5CCNAME"])
        with spnego.urlopen(url, {}, theirs, 60) as resp:
            listing, cookie = resp.read().decode(), resp.headers["Set-Cookie"].split(";")[0]
        assert seen in listing and hidden not in listing, listing[-3000:]
        with spnego.urlopen(f"{url}job/{seen}/", {"Cookie": cookie}, None, 30) as resp:
            assert seen in resp.read().decode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            spnego.urlopen(f"{url}job/{hidden}/", {"Cookie": cookie}, None, 30)
        assert refused.value.code == 404 and hidden in refused.value.read().decode()
        name, _, value = cookie.partition("=")
        forged = f"{name}=root.{value.split('.')[1]}.{'0' * 64}"
        with pytest.raises(urllib.error.HTTPError) as forged_out:
            urllib.request.urlopen(urllib.request.Request(url, headers={"Cookie": forged}),
                                   timeout=30)
        assert forged_out.value.code == 401
        owner = kerberos.login(os.environ["HADOOP_CONF_DIR"], None, None, None)
        with spnego.urlopen(url, {}, owner, 60) as resp:
            both = resp.read().decode()
        assert seen in both and hidden in both and "FORGED" not in both
        assert "application_1_9998" in both and "not the user the page names" in both
        assert "application_1_9999" in both and "a time that is no date" in both
    finally:
        server.terminate()
        server.communicate(timeout=60)


def test_a_gpu_containers_launcher_asks_its_nodemanager_over_spnego():
    """#43: a launcher reads its NodeManager's GPU page for the devices YARN assigned. The
    NM asks for SPNEGO: a --keytab job's launcher has a login and gets the answer (the
    sandbox isolates nothing, and says so); a ticket-cache job's has none, and its log
    says what to pass. Both run on the GPU their container was given."""
    keytab = ("--principal", os.environ["SANDBOX_PRINCIPAL"], "--keytab",
              os.environ["SANDBOX_KEYTAB"])
    for login, said in ((keytab, "isolates no GPU (its NodeManager assigns devices to no "
                                 "container)"),
                        ((), "asks for a Kerberos login (SPNEGO) and this container has "
                             "none: submit with --keytab to give it one")):
        out, app_id = submit("-t", "tensorflow-worker", "-wn", "1", "-wg", "1", *SMALL,
                             *login, "-c", 'echo "CUDA=$CUDA_VISIBLE_DEVICES"')
        assert out.returncode == 0, out.stderr
        logs = aggregated_logs(app_id, "worker:0")
        assert "1 GPU asked, YARN did not say which: using CUDA_VISIBLE_DEVICES=0" in logs
        assert said in logs and "CUDA=0" in logs, logs


def test_the_resourcemanagers_spinning_token_tracker_runs_only_on_idle_cpu():
    """Hadoop 3.3.6's Kerberized ResourceManager spins one thread for good
    (DelegationTokenRenewerPoolTracker, YARN-11178): `yarn-sandbox start` moves that thread,
    and only it, into an idle cpu cgroup, so it no longer takes CI's cores from the tests."""
    group = Path("/sys/fs/cgroup/cpu/tfyarn-sandbox-idle")
    if not os.access("/sys/fs/cgroup/cpu", os.W_OK):
        pytest.skip("no writable cgroup v1 cpu controller here (root on CI's machines): "
                    "the sandbox sets SCHED_IDLE only")
    conf = os.environ["HADOOP_CONF_DIR"]
    import proctable

    rms = [p.pid for p in proctable.live()
           if "-Dproc_resourcemanager" in p.cmdline and f"HADOOP_CONF_DIR={conf}".encode() in p.env]
    assert len(rms) == 1, rms
    assert (group / "cpu.idle").read_text().strip() == "1"
    tids = (group / "tasks").read_text().split()
    assert len(tids) == 1, tids
    assert Path(f"/proc/{rms[0]}/task/{tids[0]}/comm").read_text().startswith("DelegationToken")
