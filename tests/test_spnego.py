"""SPNEGO against what a Kerberized Hadoop 3.3.6 answers (tests/fixtures/hadoop-3.3.6-secure:
the RM's REST API, WebHDFS and a NodeManager's logs, each captured without a ticket (401
Negotiate) and with one). The stand-in services replay those answers byte for byte; the
login that signs the second request is a stand-in too (a token needs a KDC: the real one
is integration/test_kerberos.py's). MIT's GSS-API library itself is exercised for real
where no KDC is needed: a login that cannot make a token."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import serve_locally

from tfyarn.client import rm
from tfyarn.client.livelogs import http_get
from tfyarn.hdfs import spnego, webhdfs

SECURE = Path(__file__).parent / "fixtures" / "hadoop-3.3.6-secure"
KRB = Path(__file__).parent / "fixtures" / "kerberos"


def captured(name: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of a captured answer."""
    lines = (SECURE / f"{name}.headers").read_text().splitlines()
    status = int(lines[0].split()[1])
    headers = [tuple(x.split(": ", 1)) for x in lines[1:] if ": " in x]
    return status, headers, (SECURE / f"{name}.body").read_bytes()


class SignedLogin:
    """Stands in for a Kerberos login: a fixed token; records the hosts it signed for."""

    def __init__(self) -> None:
        self.hosts: list[str] = []

    def header(self, host: str) -> str:
        self.hosts.append(host)
        return "Negotiate c3RhbmQtaW4="


def replaying(without: str, signed: str):
    """A stand-in that answers as Hadoop did: `without` to a request with no
    Authorization, `signed` to one with a Negotiate token. Records each Authorization."""
    import http.server

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            auth = self.headers.get("Authorization")
            seen.append(auth)
            status, headers, body = captured(signed if auth else without)
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = serve_locally(Handler)
    return server, seen


def test_the_captured_401s_are_challenges():
    for name in ("rm-apps-no-ticket", "webhdfs-liststatus-no-ticket",
                 "nm-containerlogs-no-ticket"):
        status, headers, _ = captured(name)
        assert spnego.challenged(status, dict(headers).get("WWW-Authenticate")), name
    status, headers, _ = captured("rm-app-spnego")  # a 200 carries the mutual token
    assert not spnego.challenged(status, dict(headers).get("WWW-Authenticate"))


def test_rest_answers_the_rms_challenge_once_with_a_token():
    server, seen = replaying("rm-apps-no-ticket", "rm-app-spnego")
    login = SignedLogin()
    client = rm.RestClient((f"http://127.0.0.1:{server.server_address[1]}",), "root", login)
    app = client.app("application_1795617833803_0001")
    assert app.app_id == "application_1795617833803_0001" and app.state == "RUNNING"
    assert seen == [None, "Negotiate c3RhbmQtaW4="] and login.hosts == ["127.0.0.1"]
    server.shutdown()


def test_rest_without_a_login_is_unavailable_not_a_crash():
    server, _ = replaying("rm-apps-no-ticket", "rm-app-spnego")
    client = rm.RestClient((f"http://127.0.0.1:{server.server_address[1]}",), "root")
    with pytest.raises(rm.Unavailable, match="401"):
        client.app("application_1795617833803_0001")
    server.shutdown()


def kerberized_conf(tmp_path: Path, port: int) -> str:
    conf = tmp_path / "conf"
    conf.mkdir()
    prop = "<property><name>{}</name><value>{}</value></property>"
    (conf / "core-site.xml").write_text(
        "<configuration>" + prop.format("fs.defaultFS", "hdfs://127.0.0.1:9000")
        + prop.format("hadoop.security.authentication", "kerberos") + "</configuration>")
    (conf / "hdfs-site.xml").write_text(
        "<configuration>" + prop.format("dfs.namenode.http-address", f"127.0.0.1:{port}")
        + "</configuration>")
    return str(conf)


def test_webhdfs_signs_in_when_asked_and_up_front_after(tmp_path):
    server, seen = replaying("webhdfs-liststatus-no-ticket", "webhdfs-gethomedirectory-spnego")
    login = SignedLogin()
    conf = kerberized_conf(tmp_path, server.server_address[1])
    client = webhdfs.client_for("hdfs:///", conf, "root", login)
    assert client._get_home_directory("/").json() == {"Path": "/user/root"}
    assert seen == [None, "Negotiate c3RhbmQtaW4="]
    assert client._get_home_directory("/").json() == {"Path": "/user/root"}
    assert seen[2:] == ["Negotiate c3RhbmQtaW4="]  # the host asked once: signed from then on
    server.shutdown()


def test_the_hdfs_cache_lives_in_the_logins_home_under_kerberos(tmp_path):
    from tfyarn.hdfs.cache import HdfsCache

    server, _ = replaying("webhdfs-liststatus-no-ticket", "webhdfs-gethomedirectory-spnego")
    cache = HdfsCache.open(kerberized_conf(tmp_path, server.server_address[1]), "alice",
                           SignedLogin())
    assert cache is not None and cache.root == "/user/root/.tfyarn/cache"
    server.shutdown()


def test_live_logs_read_a_nodemanager_that_wants_spnego():
    server, seen = replaying("nm-containerlogs-no-ticket", "nm-containerlogs-spnego")
    url = f"http://127.0.0.1:{server.server_address[1]}/ws/v1/node/containerlogs/c/worker-0.log"
    assert http_get(url) is None  # no login: the 401 is "cannot serve"
    body = http_get(url, SignedLogin())
    assert body == (SECURE / "nm-containerlogs-spnego.body").read_bytes()
    assert b"LogType:worker-0.log" in body
    server.shutdown()


def test_no_ticket_is_refused_by_gssapi_with_what_to_run(tmp_path):
    login = spnego.Negotiator(ccache=f"FILE:{tmp_path / 'empty'}")
    with pytest.raises(spnego.NegotiateRefused, match=r"run kinit YOU@REALM .*--keytab"):
        login.header("127.0.0.1")


def test_a_keytab_without_the_principal_is_refused_naming_both():
    keytab = str(KRB / "alice.keytab")
    login = spnego.Negotiator("bob@TFYARN.TEST", keytab)
    with pytest.raises(spnego.NegotiateRefused) as err:
        login.header("127.0.0.1")
    assert str(err.value).startswith(
        f"Kerberos refused --principal bob@TFYARN.TEST with --keytab {keytab} (")
    assert "pass the keytab made for it" in str(err.value)

