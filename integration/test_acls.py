"""docs/security.md's cluster rows, played on the sandbox (yarn.acl.enable=true, the admin
ACL its owner alone) by other YARN users: simple authentication's HADOOP_USER_NAME /
`user.name`, as anyone on a cluster without Kerberos can claim, which is why the view and
modify checks must hold for whoever is claimed. The job's owner is the test's user."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import final_state, wait_until
from test_yarn import SMALL, _submit_in_background

OWNER = pwd.getpwuid(os.geteuid()).pw_name
RM = "http://127.0.0.1:8088"


def as_yarn_user(user: str, *args: str) -> subprocess.CompletedProcess:
    """`yarn ARGS` as another YARN user (simple auth: the name the client claims)."""
    return subprocess.run(["yarn", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HADOOP_USER_NAME": user})


def rm_state(app_id: str) -> str:
    with urllib.request.urlopen(f"{RM}/ws/v1/cluster/apps/{app_id}?user.name={OWNER}",
                                timeout=10) as resp:
        return json.load(resp)["app"]["state"]


def get(url: str, user: str) -> tuple[int, str]:
    """GET through the RM's proxy as `user` (its `user.name`); (status, body)."""
    sep = "&" if "?" in url else "?"
    try:
        with urllib.request.urlopen(f"{url}{sep}user.name={urllib.parse.quote(user)}",
                                    timeout=30) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


@pytest.fixture(scope="module")
def acls_on() -> None:
    from conftest import yarn_site

    if yarn_site("yarn.acl.enable", "false") != "true":
        pytest.skip("the cluster does not enforce YARN ACLs (yarn.acl.enable)")


def test_other_yarn_users_neither_kill_nor_view_the_job(acls_on, tmp_path, apps):
    """mallory (no ACL entry) cannot kill the job nor open its page through the proxy;
    alice (--view-acls) opens the page but cannot kill; the owner kills it."""
    proc, app_id = _submit_in_background(tmp_path, apps, "-t", "standalone",
                                         "--view-acls", "alice", *SMALL, "-c", "sleep 600")
    page = None
    for line in proc.stderr:
        if line.startswith("tfyarn: job page: "):
            page = line.split(": ", 2)[2].strip()
            break
    assert page, "no job page line"
    wait_until(lambda: "running" in get(page, OWNER)[1], 180, "the page shows the task")
    for user in ("mallory", "alice"):
        out = as_yarn_user(user, "application", "-kill", app_id)
        assert out.returncode != 0, out.stdout + out.stderr
        assert re.search(rf"User {user} cannot perform operation MODIFY_APP", out.stderr), \
            out.stderr[-2000:]
    assert rm_state(app_id) == "RUNNING"
    status, body = get(page, "mallory")
    assert "worker:0" not in body and status != 200 or "access" in body.lower(), (status, body)
    status, body = get(page, "alice")
    assert status == 200 and "<td>worker:0</td>" in body, (status, body)
    out = subprocess.run([sys.executable, "-m", "tfyarn", "kill", app_id], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    proc.communicate(timeout=120)
    assert proc.returncode == 3  # killed
    assert final_state(app_id).endswith("/KILLED")
    with urllib.request.urlopen(f"{RM}/ws/v1/cluster/apps/{app_id}/appattempts?user.name="
                                f"{OWNER}", timeout=10) as resp:  # a kill is final: no
        attempts = json.load(resp)["appAttempts"]["appAttempt"]  # second AM (patch 0010)
    assert len(attempts) == 1, attempts


def test_the_yarn_job_page_answers_no_other_user_of_its_node(acls_on, tmp_path, apps):
    """The page itself listens on the AM node's 127.0.0.1 for skein's web UI alone: a
    request straight to it from another local user of that node (past the RM's proxy and
    the view ACL) gets 403; the owner's own processes are answered."""
    import skein

    from tfyarn.system.serving import FORBIDDEN

    proc, app_id = _submit_in_background(tmp_path, apps, "-t", "standalone", *SMALL,
                                         "-c", "sleep 600")
    for line in proc.stderr:
        if line.startswith("tfyarn: job page: "):
            break
    with skein.Client() as client:
        target = client.connect(app_id).ui.get_pages()["tfyarn"].target
    assert re.match(r"http://127\.0\.0\.1:\d+/$", target), target
    with urllib.request.urlopen(target, timeout=30) as resp:  # this user: the AM's own
        assert app_id in resp.read().decode()
    who = pwd.getpwnam(MALLORY) if _has_user(MALLORY) else None
    if who is None:
        pytest.skip(f"no second local user {MALLORY} (tests/test_security.py makes one)")
    code = (f"import urllib.request, urllib.error\ntry:\n urllib.request.urlopen({target!r}, "
            "timeout=30)\nexcept urllib.error.HTTPError as e:\n print(e.code, e.read().decode())")
    out = subprocess.run(["/usr/bin/python3", "-c", code], user=who.pw_uid, group=who.pw_gid,
                         extra_groups=[], capture_output=True, text=True, timeout=60, cwd="/")
    assert out.stdout.startswith("403 ") and app_id not in out.stdout, out
    assert FORBIDDEN.decode().strip() in out.stdout


MALLORY = "tfyarn-mallory"


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name],
                       capture_output=True)
        try:
            pwd.getpwnam(name)
            return True
        except KeyError:
            return False


def test_a_course_planted_by_another_hdfs_user_is_not_resumed_from(tmp_path, capsys):
    """The driver of a later ApplicationMaster attempt reads the job's kept course back
    from HDFS (`YarnSite.kept_course`). Where the owner left the dir open to others,
    mallory plants one for the job (claiming to be mallory over WebHDFS, as simple auth
    lets anyone): it is refused by its owner, never read; the owner's own is read, under
    its temporary name too (`webhdfs.put_temp`: the only copy for a moment)."""
    from hdfs import InsecureClient

    from tfyarn.core.records import CourseSoFar
    from tfyarn.core.settings import Settings
    from tfyarn.core.tfconfig import course_path
    from tfyarn.hdfs import webhdfs
    from tfyarn.runtime.site import YarnSite

    conf = os.environ["HADOOP_CONF_DIR"]
    job_id = f"application_0_{os.getpid()}"
    path = webhdfs.hdfs_path(course_path(OWNER, job_id))
    folder = path.rsplit("/", 1)[0]
    address = webhdfs.http_address(course_path(OWNER, job_id), conf)
    owner, mallory = InsecureClient(address, user=OWNER), InsecureClient(address, user="mallory")
    owner.makedirs(folder)
    home = webhdfs.hdfs_path(course_path(OWNER, "x")).rsplit("/", 2)[0]
    modes = {p: owner.status(p)["permission"] for p in (home, folder)}
    try:
        for p in modes:
            owner.set_permission(p, "777")  # the owner's lax choice
        forged = CourseSoFar(1, "evil", 0.0, 7, 0.0, memory={"worker": 999999})
        mallory.write(path, data=forged.to_json(), overwrite=True, permission="666")
        site = YarnSite(None, None)  # type: ignore[arg-type]  # store and app: unused here
        settings = Settings(user=OWNER, job_id=job_id, hadoop_conf_dir=conf)
        assert site.kept_course(None, settings) is None  # type: ignore[arg-type]
        assert f"is not {OWNER}'s own private file (owner mallory" in capsys.readouterr().err
        owner.delete(path)
        mine = CourseSoFar(1, "127.0.0.2", 0.0, 1, 0.0)
        site.keep_course_file(settings, mine)
        assert owner.status(path)["permission"] == "600"
        assert site.kept_course(None, settings) == mine  # type: ignore[arg-type]
        temp = webhdfs.put_temp(path)  # an AM lost between the old one's delete and the rename
        owner.rename(path, temp)
        assert site.kept_course(None, settings) == mine  # type: ignore[arg-type]
        owner.delete(temp)
        mallory.write(temp, data=forged.to_json(), overwrite=True, permission="666")
        assert site.kept_course(None, settings) is None  # type: ignore[arg-type]
        assert f"{temp} is not {OWNER}'s own private file (owner mallory" in \
            capsys.readouterr().err
    finally:
        owner.delete(path)
        owner.delete(webhdfs.put_temp(path))
        for p, mode in modes.items():
            owner.set_permission(p, mode)
