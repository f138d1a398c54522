"""tfyarn through the front door of a Kerberized cluster (#28), on the sandbox started with
SANDBOX_SECURE=1: an MIT KDC on 127.0.0.1, HDFS and YARN with kerberos authentication,
service authorization, block access tokens and SPNEGO (`pytest integration/test_kerberos.py
--yarn`; CI runs it after the rest of the suite, on the same 3 nodes restarted secured).
Skipped on a cluster without Kerberos. `tfyarn logs` is not tested here: the secured
sandbox aggregates no logs (see scripts/yarn-sandbox).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import APP_ID, DATA, REPO, final_state, wait_until, yarn_cli

from tfyarn.hdfs import siteconf

pytestmark = pytest.mark.yarn
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


def app_count() -> int:
    return len(re.findall(r"^application_\d+_\d+", yarn_cli("application", "-list",
                                                           "-appStates", "ALL"), re.M))


def node_logs(app_id: str) -> str:
    """The app's container logs where its NodeManagers keep them: the secured sandbox
    aggregates none (its NodeManagers lack Hadoop's native library, which a Kerberized
    NodeManager needs to read them), and its nodes are this machine."""
    sandbox = Path(os.environ["HADOOP_CONF_DIR"]).parent
    return "".join(p.read_text(errors="replace")
                   for p in sorted(sandbox.glob(f"nodes/*/nm-logs/{app_id}/*/*")) if p.is_file())


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
    before = app_count()
    out, _ = submit("-t", "standalone", *SMALL, "-c", "true", env=bare)
    assert one_error(out).startswith(f"Error: no Kerberos ticket in {bare['KRB5CCNAME']}: run "
                                     "kinit")
    assert app_count() == before  # nothing submitted
    status = tfyarn("ls", env=bare)
    assert one_error(status).startswith("Error: no Kerberos ticket")


def test_submit_with_the_ticket_cache_then_status_logs_ls_kill():
    out, app_id = submit("-t", "tensorflow-worker", "-wn", "2", *SMALL, "-c",
                         'echo "hello from $TFYARN_TASK_TYPE:$TFYARN_TASK_INDEX"')
    assert out.returncode == 0, out.stderr
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    status = tfyarn("status", app_id, "--tasks")
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout, status.stderr
    assert "hello from worker:1" in node_logs(app_id)
    assert app_id in tfyarn("ls", "--all").stdout
    out, sleeper = submit("-t", "standalone", *SMALL, "--detach", "-c", "sleep 300")
    assert out.returncode == 0 and sleeper, out.stderr
    wait_until(lambda: "RUNNING" in tfyarn("status", sleeper).stdout, 120, "the sleeper running")
    assert tfyarn("kill", sleeper).returncode == 0
    assert final_state(sleeper).endswith("/KILLED")


def test_submit_with_principal_and_keytab_and_no_ticket(tmp_path):
    bare = no_ticket(tmp_path)
    out, app_id = submit("-t", "standalone", *SMALL, "--principal",
                         os.environ["SANDBOX_PRINCIPAL"], "--keytab", os.environ["SANDBOX_KEYTAB"],
                         "-c", "echo by-keytab", env=bare)
    assert out.returncode == 0, out.stderr
    assert final_state(app_id) == "FINISHED/SUCCEEDED"


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
    before = app_count()
    out, _ = submit("-t", "standalone", *SMALL, "--principal", "nobody@TFYARN.TEST",
                    "--keytab", os.environ["SANDBOX_KEYTAB"], "-c", "true", env=bare)
    assert f"holds no key for nobody@TFYARN.TEST (it has: {os.environ['SANDBOX_PRINCIPAL']})" \
        in one_error(out)
    principal, keytab = _stale_keytab(tmp_path)
    out, _ = submit("-t", "standalone", *SMALL, "--principal", principal, "--keytab",
                    str(keytab), "-c", "true", env=bare)
    assert one_error(out).startswith(f"Error: Kerberos refused --principal {principal} with "
                                     f"--keytab {keytab} (")
    assert app_count() == before


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
    acc = [float(x) for x in re.findall(r"eval_accuracy=(\d\.\d+)", node_logs(app_id))]
    assert acc and acc[-1] >= 0.84, acc
    status = tfyarn("status", app_id)
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout, status.stderr

