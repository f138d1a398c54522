"""docs/security.md's promises on the gateway, tested as the attacker: a second local user
(`tfyarn-mallory`, made here; CI runs as root) plants dirs, symlinks and pages in a
shared sticky dir, and asks every local server tfyarn opens; the victim is this test's
user. Each test names the row of docs/security.md it proves."""

from __future__ import annotations

import http.client
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import job_processes

from tfyarn.core.records import JobView, TaskRow
from tfyarn.core.redact import SHOWN, Redactor
from tfyarn.protocol import rendezvous
from tfyarn.system import bell, native

MALLORY = "tfyarn-mallory"
SECRET_BYTES = "KRB5-TICKET-OF-THE-VICTIM"


@pytest.fixture(scope="module")
def mallory() -> pwd.struct_passwd:
    """The attacker: another local user of the gateway."""
    if os.geteuid() != 0:
        pytest.skip("playing a second local user needs root to create one (CI runs as root)")
    try:
        return pwd.getpwnam(MALLORY)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh",
                        MALLORY], check=True, capture_output=True)
        return pwd.getpwnam(MALLORY)


def as_mallory(who: pwd.struct_passwd, argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, user=who.pw_uid, group=who.pw_gid, extra_groups=[],
                          capture_output=True, text=True, timeout=60, cwd="/", **kw)


def system_python() -> str:
    """A Python mallory may run (the venv's may live in root's home)."""
    found = shutil.which("python3", path="/usr/bin:/bin")
    if found is None:
        pytest.skip("no /usr/bin/python3 for the second user")
    return found


def mallory_py(who: pwd.struct_passwd, code: str) -> subprocess.CompletedProcess:
    return as_mallory(who, [system_python(), "-c", code],
                      env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""})


@pytest.fixture
def shared() -> Path:
    """A dir every user writes, sticky, as /tmp is."""
    path = Path(tempfile.mkdtemp(prefix="tfyarn-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ticket(tmp_path) -> Path:
    """The victim's 0600 file (a stand-in for its Kerberos ticket cache)."""
    path = tmp_path / "krb5cc_victim"
    path.write_text(SECRET_BYTES)
    path.chmod(0o600)
    return path


def env_for(tmp: Path, **more: str) -> dict[str, str]:
    env = {**os.environ, "TMPDIR": str(tmp), **more}
    env.pop("HADOOP_CONF_DIR", None)  # local jobs only
    return env


def el_submit(env: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfyarn.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


# ---------------------------------------------------------------- planted dirs (row G1, G2)


def test_planted_job_dirs_are_never_read(mallory, shared, ticket, tmp_path):
    """The reported attack: a decoy `tfyarn-local_*` dir whose log is a symlink to the
    victim's ticket, then `tfyarn status/logs/kill` and `tfyarn history` by the victim
    (kill: the decoy's store is never written)."""
    job = "local_20260101_000000_abcdef"
    plant = (f"import os; d = {str(shared)!r} + '/tfyarn-{job}-x/logs'; os.makedirs(d); "
             f"os.symlink({str(ticket)!r}, d + '/cc.log'); os.makedirs(d + '/../kv')")
    assert mallory_py(mallory, plant).returncode == 0
    env = env_for(shared)
    for cmd in (["status", job], ["logs", job], ["kill", job]):
        out = subprocess.run([sys.executable, "-m", "tfyarn", *cmd], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and SECRET_BYTES not in out.stdout + out.stderr
        assert "its job dir is gone" in out.stderr, out.stderr
    assert list((shared / f"tfyarn-{job}-x" / "kv").iterdir()) == []  # no kill request put
    from tfyarn.client.jobdir import find_job_dir
    from tfyarn.core.settings import Settings

    assert find_job_dir(job, Settings.from_environ(env)) is None
    assert find_job_dir(f"../tfyarn-{job}-x", Settings.from_environ(env)) is None


def test_a_squatted_jobs_dir_refuses_the_job(mallory, shared, tmp_path):
    """Mallory makes the victim's `tfyarn-UID` first (or a symlink by that name): the
    victim's local job refuses to start, naming the dir, and starts nothing."""
    mine = shared / f"tfyarn-{os.geteuid()}"
    assert mallory_py(mallory, f"import os; os.mkdir({str(mine)!r}, 0o777)").returncode == 0
    out = el_submit(env_for(shared), "-t", "standalone", "--local", "-c", "true", cwd=tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.startswith("Error: ") and str(mine) in out.stderr, out.stderr
    assert f"belongs to uid {mallory.pw_uid}" in out.stderr
    assert os.listdir(mine) == []
    os.rmdir(mine)
    assert mallory_py(mallory, f"import os; os.symlink('/tmp', {str(mine)!r})").returncode == 0
    out = el_submit(env_for(shared), "-t", "standalone", "--local", "-c", "true", cwd=tmp_path)
    assert out.returncode != 0 and "not a directory of yours" in out.stderr, out.stderr


def test_job_dirs_are_private_and_named_by_their_id(mallory, shared, tmp_path):
    """The victim's job dir is `tfyarn-UID/JOB_ID`, 0700 in a 0700 dir: mallory lists
    and reads nothing of it while it runs; gone (both) once the job succeeds."""
    gate = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "standalone", "--local",
                             "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"], cwd=tmp_path,
                            env=env_for(shared), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    job = proc.stdout.readline().strip()
    root = shared / f"tfyarn-{os.geteuid()}"
    try:
        assert (root / job).is_dir()
        assert root.stat().st_mode & 0o777 == 0o700 and (root / job).stat().st_mode & 0o777 == 0o700
        out = mallory_py(mallory, f"import os; print(os.listdir({str(root)!r}))")
        assert out.returncode != 0 and "PermissionError" in out.stderr
    finally:
        gate.touch()
        proc.communicate(timeout=120)
    assert proc.returncode == 0 and not root.exists()


# ---------------------------------------------------------------- local servers (row G3)


def fetch(url: str, who: pwd.struct_passwd | None = None, cookie: str = "") -> tuple[int, str]:
    """GET `url` (as mallory when `who`): (status, body)."""
    code = (f"import http.client, urllib.parse; u = urllib.parse.urlsplit({url!r}); "
            "c = http.client.HTTPConnection(u.hostname, u.port, timeout=10); "
            f"c.request('GET', u.path + ('?' + u.query if u.query else ''), "
            f"headers={{'Cookie': {cookie!r}}} if {cookie!r} else {{}}); r = c.getresponse(); "
            "print(r.status); print(r.read().decode(errors='replace'))")
    out = mallory_py(who, code) if who else subprocess.run([sys.executable, "-c", code],
                                                           capture_output=True, text=True,
                                                           timeout=60)
    assert out.returncode == 0, out.stderr
    status, _, body = out.stdout.partition("\n")
    return int(status), body


def test_local_servers_answer_only_their_owner(mallory, ticket, tmp_path):
    """The job page and `tfyarn history` ask every request for the owner's secret; to
    anyone else (no token, a wrong one, a forged cookie) they answer 403 and nothing."""
    gate = tmp_path / "go"
    env = env_for(tmp_path, TFYARN_HISTORY_DIR=str(tmp_path / "kept"), HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "standalone", "--local",
                             "-c", f"echo line-of-the-task; while [ ! -e {gate} ]; do sleep 0.1; "
                             "done"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    job, page = proc.stdout.readline().strip(), None
    history = None
    try:
        for line in proc.stderr:
            if line.startswith("tfyarn: job page: "):
                page = line.split(": ", 2)[2].strip()
                break
        assert page and "?token=" in page
        token = page.split("?token=")[1]
        secret_file = tmp_path / ".tfyarn" / "web-token"
        assert secret_file.read_text().strip() == token
        assert secret_file.stat().st_mode & 0o777 == 0o600
        bare = page.split("?")[0]
        cookie_name = f"tfyarn-token-{os.geteuid()}"
        for url, cookie in ((bare, ""), (bare + "?token=guess", ""),
                            (bare + "logs/worker-0", f"{cookie_name}=guess"),
                            (bare + "logs/worker-0",
                             f"tfyarn-token-{mallory.pw_uid}={token[:-1]}")):
            status, body = fetch(url, mallory, cookie)
            assert status == 403 and "line-of-the-task" not in body and job not in body, body
        status, body = fetch(page)
        assert status == 200 and job in body
        status, body = fetch(bare + "logs/worker-0", cookie=f"{cookie_name}={token}")
        assert status == 200 and "line-of-the-task" in body

        history = subprocess.Popen([sys.executable, "-m", "tfyarn", "history", "--port", "0"],
                                   env=env, stderr=subprocess.PIPE, text=True)
        listing = history.stderr.readline().split(": ", 2)[2].strip()
        assert listing.endswith(f"?token={token}")
        base = listing.split("?")[0]
        for path in ("", f"job/{job}/", f"job/{job}/logs/worker-0"):
            status, body = fetch(base + path, mallory)
            assert status == 403 and job not in body and "line-of-the-task" not in body
        status, body = fetch(listing)
        assert status == 200 and job in body
    finally:
        gate.touch()
        proc.communicate(timeout=120)
        if history is not None:
            history.terminate()
            history.wait(timeout=30)
    assert job_processes(job) == []


def test_tensorboard_answers_only_with_its_jobs_token(mallory, tmp_path):
    """C6: TensorBoard (which has no login) runs behind the job's token: to mallory (no
    token, a guess, a forged cookie) it answers 403 and none of its pages or data; the
    URL the job printed opens it, and its cookie carries on to the data it fetches; a
    kept page holds its URL without the token."""
    pytest.importorskip("tensorboard")
    gate = tmp_path / "go"
    env = env_for(tmp_path, TFYARN_HISTORY_DIR=str(tmp_path / "kept"), HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "standalone", "--local",
                             "-enable_tensorboard", "True", "-log_tensorboard",
                             str(tmp_path / "tb"), "-c",
                             f"while [ ! -e {gate} ]; do sleep 0.1; done"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job, url = proc.stdout.readline().strip(), None
    try:
        for line in proc.stderr:
            if line.startswith("tfyarn: TensorBoard: "):
                url = line.split(": ", 2)[2].strip()
                break
        assert url and "?token=" in url, url
        bare, token = url.split("?token=")
        port = bare.rstrip("/").rsplit(":", 1)[1]
        cookie = f"tfyarn-tensorboard-{port}"
        for path, sent in (("", ""), ("?token=guess", ""), ("data/runs", f"{cookie}=guess"),
                           ("data/runs", f"{cookie}={token[:-1]}")):
            status, body = fetch(bare + path, mallory, sent)
            assert status == 403 and "<html" not in body.lower() and "[" not in body, body
        status, body = fetch(url)
        assert status == 200 and "<html" in body.lower()
        status, body = fetch(bare + "data/runs", cookie=f"{cookie}={token}")
        assert status == 200 and body.strip().startswith("["), body
    finally:
        gate.touch()
        proc.communicate(timeout=120)
    kept = (tmp_path / "kept" / f"{job}.json").read_text()
    assert token not in kept and bare in kept
    assert job_processes(job) == []


# ---------------------------------------------------------------- kept pages (row H1-H4)


def page_json(job_id: str, user: str, **over) -> str:
    view = JobView(name="n", app_type="standalone", job_id=job_id, state="SUCCEEDED",
                   elapsed="1 s", attempt=0, attempts=1,
                   rows=(TaskRow("worker:0", "h:1", "exited 0", "", None),), user=user,
                   started=time.time() - 60, ended=time.time())
    d = json.loads(view.to_json())
    d.update(over)
    return json.dumps(d)


def test_a_shared_history_dir_shows_no_forged_or_broken_page(mallory, shared, tmp_path):
    """In a 1777 history dir, mallory's pages claiming the victim's name, a symlink to the
    victim's page, a page whose numbers break dates, and a `javascript:` link: none is
    shown as the victim's, none breaks the listing, no script link is rendered."""
    from tfyarn.client.history import HistoryReader, LocalShelf, render_listing
    from tfyarn.runtime.jobpage import render

    me = pwd.getpwuid(os.geteuid()).pw_name
    victims = shared / "local_victim_1.json"
    from tfyarn.protocol.kv import DirKV

    DirKV(str(shared), mode=0o640).put(victims.name, page_json("local_victim_1", me))
    assert victims.stat().st_mode & 0o777 == 0o640
    planted = {
        "local_forged_1.json": page_json("local_forged_1", me),  # in the victim's name
        "local_huge_1.json": page_json("local_huge_1", MALLORY, started=1e300),
        "local_nan_1.json": page_json("local_nan_1", MALLORY, attempt=-5),
        "local_other_1.json": page_json("local_victim_1", MALLORY),  # another's job id
        "local_evil_1.json": page_json("local_evil_1", MALLORY, tensorboard="javascript:alert(1)",
                                       rows=[{"task": "worker:0", "addr": "h:1", "state": "x",
                                              "detail": "", "log": " JaVa\tScript:x",
                                              "step": ""}]),
    }
    for name, text in planted.items():
        out = as_mallory(mallory, ["sh", "-c", f"cat > {shared}/{name}"], input=text)
        assert out.returncode == 0, out.stderr
    assert mallory_py(mallory, f"import os; os.symlink({str(victims)!r}, "
                               f"{str(shared / 'local_link_1.json')!r})").returncode == 0
    reader = HistoryReader([LocalShelf(str(shared))])
    rows, problems = reader.listing()
    shown = {r.job_id: r.user for r in rows}
    assert shown == {"local_victim_1": me, "local_evil_1": MALLORY}, (shown, problems)
    said = "\n".join(problems)
    assert "local_forged_1" in said and "not the user the page names" in said
    assert "local_huge_1" in said and "local_nan_1" in said and "local_other_1" in said
    html_listing = render_listing(rows, problems, time.time())  # renders whole
    assert "local_victim_1" in html_listing
    evil = render(reader.view("local_evil_1"))
    hrefs = re.findall(r'href="([^"]*)"', evil)
    assert hrefs == ["#refused", "#refused"], hrefs  # shown as text, never as a link


# ---------------------------------------------------------------- the bell (row G4)


def test_the_bell_rings_only_its_owner(mallory):
    """Mallory connecting to a victim's bell is hung up on at once; a bell name mallory
    took first is not trusted by the victim's waiters (they poll instead)."""
    name = f"\0tfyarn-store-test-{os.getpid()}"
    ringer = bell.Bell(name).start()
    try:
        out = mallory_py(mallory, "import socket; s = socket.socket(socket.AF_UNIX); "
                                  f"s.connect({name!r}); s.settimeout(10); print(s.recv(1))")
        assert out.returncode == 0 and out.stdout.strip() == "b''", out
        mine = bell.Listener(name)
        assert mine.sock is not None and mine.wait(10)  # the owner is rung at once
        mine.close()
    finally:
        ringer.close()
    squat = f"\0tfyarn-store-squat-{os.getpid()}"
    holder = subprocess.Popen([system_python(), "-c",
                               "import socket, sys; s = socket.socket(socket.AF_UNIX); "
                               f"s.bind({squat!r}); s.listen(); print('up', flush=True); "
                               "c, _ = s.accept(); sys.stdin.read()"],
                              user=mallory.pw_uid, group=mallory.pw_gid, extra_groups=[],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        assert bell.Listener(squat).sock is None
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------- rendezvous (row C5)


def request(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None,
            source: str = "127.0.0.1") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                      source_address=(source, 0))
    conn.putrequest(method, path)
    for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
        conn.putheader(k, v)
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def test_rendezvous_answers_the_jobs_hosts_with_bounded_requests(monkeypatch):
    """Horovod's rendezvous server: a host not in the job gets 403 and stores nothing; a
    request claiming 200 MB is refused before a byte is read; a malformed length is 400;
    a full store 507; the job's own hosts are served throughout."""
    server = rendezvous.RendezvousServer("127.0.0.1", ["127.0.0.3"]).start()
    port = int(server.address.rsplit(":", 1)[1])
    others = socket.gethostbyname(socket.gethostname())  # this machine, not loopback
    server.allowed = frozenset({"10.255.0.1", "10.255.0.3"})  # the job's hosts elsewhere
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"  # the advertised host only
        assert not server.admits("127.0.0.2") and not server.admits(others)
        assert server.admits("10.255.0.3")
        assert request(port, "PUT", "/s/k", b"v")[0] == 403  # this machine is no job host
        assert request(port, "GET", "/s/k")[0] == 403
        assert server.store == {}
        server.allowed = frozenset({"127.0.0.1", "127.0.0.3"})  # one machine's job
        assert server.admits("127.0.0.2")
        status, _ = request(port, "PUT", "/s/big", b"abc", {"Content-Length": "200000000"})
        assert status == 413 and server.size == 0
        assert request(port, "PUT", "/s/bad", b"abc", {"Content-Length": "x"})[0] == 400
        monkeypatch.setattr(rendezvous, "MAX_KEYS", 2)
        assert request(port, "PUT", "/s/a", b"1")[0] == 200
        server.allowed = frozenset({"127.0.0.1"})
        assert request(port, "PUT", "/s/b", b"2", source="127.0.0.3")[0] == 200
        assert request(port, "PUT", "/s/c", b"3")[0] == 507
        assert request(port, "PUT", "/s/a", b"11")[0] == 200  # a key held is replaced
        assert request(port, "GET", "/s/a") == (200, b"11") and server.size == 3
    finally:
        server.stop()


def test_rendezvous_of_a_one_machine_job_answers_no_other_user_of_it(mallory):
    """On one machine every task comes from 127.0.0.1, so the host rule admits any local
    user: there the peer's uid decides. Mallory's PUT and GET get 403 and store nothing;
    the job's user is served."""
    server = rendezvous.RendezvousServer("127.0.0.1").start()
    port = int(server.address.rsplit(":", 1)[1])
    code = ("import http.client\nfor m, b in (('PUT', b'evil'), ('GET', None)):\n"
            f" c = http.client.HTTPConnection('127.0.0.1', {port}, timeout=10)\n"
            " c.request(m, '/global/rank_0', body=b)\n r = c.getresponse()\n"
            " print(r.status, r.read())")
    try:
        assert request(port, "PUT", "/global/rank_0", b"mine")[0] == 200
        out = mallory_py(mallory, code)
        codes = [line.split()[0] for line in out.stdout.splitlines()]
        assert out.returncode == 0 and codes == ["403", "403"], out
        assert b"mine" not in out.stdout.encode() and server.store == {"/global/rank_0": b"mine"}
        assert request(port, "GET", "/global/rank_0") == (200, b"mine")
    finally:
        server.stop()


# ---------------------------------------------------------------- native caches (row G5)


def test_a_planted_cache_never_loads_its_library(mallory, shared, tmp_path, monkeypatch):
    """A cache dir mallory owns (TFYARN_CACHE pointed at it, or a predictable /tmp name)
    holding 'the library': tfyarn builds its own elsewhere and never returns that one."""
    planted = shared / "cache"
    code = (f"import os; p = {str(planted)!r} + '/kind/lib.so'; os.makedirs(os.path.dirname(p)); "
            "open(p, 'w').write('evil')")
    assert mallory_py(mallory, code).returncode == 0
    monkeypatch.setenv("TFYARN_CACHE", str(planted))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("CONTAINER_ID", raising=False)
    got = native.built("kind", "lib.so", lambda out: ["sh", "-c", f"echo ours > {out}"], "test")
    assert got == tmp_path / "xdg" / "tfyarn" / "kind" / "lib.so"
    assert got.read_text() == "ours\n" and got.stat().st_mode & 0o022 == 0


# ---------------------------------------------------------------- redaction (row S1, S2)


def test_no_env_secret_or_token_in_what_a_job_shows_or_keeps(tmp_path):
    """A task that prints its --env secret and a delegation URL, then fails: el_submit's
    own lines, its error, --dry-run, the kept page, the job page's words and the store's
    copy of the job (skein's key-value page shows it on YARN) show neither (the task's raw
    log is its own output, docs/security.md)."""
    value, token = "tok-s3cr3t-0042", "HgAFcm9vdABDELEGATION"
    kept = tmp_path / "kept"
    env = env_for(tmp_path, TFYARN_HISTORY_DIR=str(kept))
    cmd = (f'echo "calling the API with $API_TOKEN" >&2; '
           f'echo "GET http://nn:9870/webhdfs/v1/x?op=OPEN&delegation={token}" >&2; '
           'echo "password=hunter22xyz" >&2; exit 3')
    dry = el_submit(env, "-t", "standalone", "--env", f"API_TOKEN={value}", "--local",
                    "--dry-run", "-c", cmd, cwd=tmp_path)
    assert dry.returncode == 0 and value not in dry.stdout and SHOWN in dry.stdout
    (tmp_path / "job.yaml").write_text(dry.stdout)
    again = el_submit(env, "--job", "job.yaml", "--local", cwd=tmp_path)
    assert again.returncode == 2 and "--env API_TOKEN: the file holds the redacted" in again.stderr
    out = el_submit(env, "-t", "standalone", "--env", f"API_TOKEN={value}", "--local", "-c", cmd,
                    cwd=tmp_path)
    assert out.returncode == 1
    ours = [x for x in out.stderr.splitlines() if x.startswith(("tfyarn:", "Error:"))]
    assert any("exited with code 3" in x for x in ours), out.stderr
    said = "\n".join(ours)
    for secret in (value, token, "hunter22xyz"):
        assert secret not in said, said
        for page in kept.iterdir():
            assert secret not in page.read_text()
    view = JobView.from_json(next(kept.iterdir()).read_text())
    assert any(SHOWN in line for line in view.tail), view.tail
    stored = tmp_path / f"tfyarn-{os.geteuid()}" / out.stdout.strip() / "kv" / "job"
    assert value not in stored.read_text() and SHOWN in stored.read_text()  # skein's KV page


def test_the_rule():
    """One rule for names, URLs and a job's own secret values; not for exception names."""
    hide = Redactor().with_env([("API_TOKEN", "abcd-1234"), ("HOME", "/home/x")])
    assert hide("use abcd-1234 now") == f"use {SHOWN} now"
    assert hide("HOME=/home/x") == "HOME=/home/x"
    assert hide("KeyError: 'worker'") == "KeyError: 'worker'"
    assert hide('{"aws_secret_access_key": "AKIA"}') == f'{{"aws_secret_access_key": "{SHOWN}"}}'
    url = hide("http://dn:9864/webhdfs/v1/f?op=OPEN&delegation=HgAF&offset=0")
    assert "HgAF" not in url and url.endswith("&offset=0")
    assert re.search(r"token=\*", hide("http://127.0.0.1:1/?token=xyz"))
    assert Redactor(("apikey",)).secret_name("MY_APIKEY") and not Redactor().secret_name("PATH")


# ---------------------------------------------------------------- history for many (row H5)


def test_a_history_gate_answers_no_one_without_a_login_and_each_viewer_theirs(tmp_path):
    """`tfyarn history --spnego-keytab` without a KDC (the Kerberos login itself is
    integration/test_kerberos.py's): no Authorization gets 401 Negotiate; a token that is
    not one, or that the keytab cannot check, gets 403 saying why; a viewer the server
    signed in (its cookie) sees their own jobs and those whose view ACL names them, the
    rest answer 404 as jobs that never were; a cookie tampered with or expired is no
    login."""
    from tfyarn.client.history import VIEWER_COOKIE, Gate, HistoryReader, HistoryServer, LocalShelf
    from tfyarn.hdfs.spnego import Acceptor
    from tfyarn.protocol.kv import DirKV

    me = pwd.getpwuid(os.geteuid()).pw_name
    shelf = tmp_path / "history"
    DirKV(str(shelf), mode=0o640).put("local_own_1.json", page_json("local_own_1", me))
    DirKV(str(shelf), mode=0o640).put("local_lent_1.json", page_json(
        "local_lent_1", me, view_acls=["bob"]))
    gate = Gate(Acceptor(str(tmp_path / "no.keytab")), admins=("group:no-such-group",))
    server = HistoryServer(HistoryReader([LocalShelf(str(shelf))]), None, gate)
    url = server.start("127.0.0.1", 0)
    port = int(url.rsplit(":", 1)[1].strip("/"))

    def get(path: str, **headers: str) -> tuple[int, str, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        out = resp.status, resp.read().decode(), dict(resp.getheaders())
        conn.close()
        return out

    def cookie(user: str, until: float) -> str:
        return f"{VIEWER_COOKIE}={gate.signed(user, until)}"
    try:
        code, _, headers = get("/")
        assert code == 401 and headers["WWW-Authenticate"] == "Negotiate"
        code, body, _ = get("/", Authorization="Negotiate !!!")
        assert code == 403 and "not base64" in body
        code, body, _ = get("/", Authorization="Negotiate YWJj")
        assert code == 403 and "no.keytab" in body, body
        bob = cookie("bob", time.time() + 60)
        code, body, _ = get("/", Cookie=bob)
        assert code == 200 and "local_lent_1" in body and "local_own_1" not in body, body
        assert get("/job/local_lent_1/", Cookie=bob)[0] == 200
        code, body, _ = get("/job/local_own_1/", Cookie=bob)
        assert code == 404 and "no kept page for local_own_1" in body
        code, body, _ = get("/", Cookie=cookie(me, time.time() + 60))
        assert code == 200 and "local_lent_1" in body and "local_own_1" in body
        tampered = bob.replace("bob.", f"{me}.", 1)
        for bad in (tampered, cookie("bob", time.time() - 1), f"{VIEWER_COOKIE}=bob"):
            assert get("/", Cookie=bad)[0] == 401, bad
    finally:
        server.stop()


# ---------------------------------------------------------------- the kept help (row G7)


def test_a_planted_help_is_never_printed(mallory, shared, tmp_path):
    """G7: with the cache in a dir everyone writes, mallory plants `el_submit --help`'s
    file (her own, then one of the victim's made group- and world-writable): the victim
    gets click's help, rendered anew and kept 0600; then the kept one, the same text."""
    env = {**os.environ, "XDG_CACHE_HOME": str(shared), "COLUMNS": "100"}
    env.pop("HADOOP_CONF_DIR", None)
    plant = ("import os, sys; d = os.path.dirname(sys.argv[1]); os.makedirs(d, exist_ok=True); "
             "[os.chmod(p, 0o777) for p in (d, os.path.dirname(d))]; "
             "open(sys.argv[1], 'w').write('Usage: el_submit --evil\\n'); "
             "os.chmod(sys.argv[1], 0o666)")
    path = subprocess.run([sys.executable, "-c", "from tfyarn.cli import helpcache; "
                           "print(helpcache.help_path('el_submit'))"], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert as_mallory(mallory, [system_python(), "-c", plant, path],
                      env={"PATH": "/usr/bin:/bin"}).returncode == 0

    def help_() -> str:
        out = subprocess.run([sys.executable, "-m", "tfyarn.cli", "--help"], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    first = help_()
    assert "--evil" not in first and "Usage: el_submit [OPTIONS] -c COMMAND..." in first
    st = os.stat(path)  # replaced: the victim's own, private
    assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid(), 0o600)
    Path(path).write_text("Usage: el_submit --evil\n")
    os.chmod(path, 0o666)  # the victim's, but anyone may write it: not printed either
    assert help_() == first
    assert help_() == first  # from the kept file now
