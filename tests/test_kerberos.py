"""Kerberos checks on the gateway that need no KDC: keytabs (made by the secured sandbox's
MIT KDC, tests/fixtures/kerberos), the driver's login failure as its log says it, and the
JVM's krb5.conf. The checks against a real KDC are integration/test_kerberos.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfyarn.client import kerberos
from tfyarn.client.skeinclient import login_refused
from tfyarn.core.errors import SpecError
from tfyarn.core.settings import Settings
from tfyarn.hdfs import siteconf

KRB = Path(__file__).parent / "fixtures" / "kerberos"


def test_keytab_principals_as_mit_wrote_them():
    assert kerberos.keytab_principals(str(KRB / "alice.keytab")) == ["alice@TFYARN.TEST"]
    assert kerberos.keytab_principals(str(KRB / "two-principals.keytab")) == [
        "svc/127.0.0.1@TFYARN.TEST", "alice@TFYARN.TEST"]


def test_a_keytab_must_hold_the_principals_key(tmp_path):
    kerberos.check_keytab("alice@TFYARN.TEST", str(KRB / "two-principals.keytab"))
    kerberos.check_keytab("alice", str(KRB / "alice.keytab"))  # the realm is the KDC's word
    with pytest.raises(SpecError, match=r"holds no key for bob@TFYARN.TEST \(it has: "
                                        r"alice@TFYARN.TEST\); pass the keytab made for bob"):
        kerberos.check_keytab("bob@TFYARN.TEST", str(KRB / "alice.keytab"))
    junk = tmp_path / "junk.keytab"
    junk.write_text("not a keytab\n")
    with pytest.raises(SpecError, match="cannot read it as a keytab"):
        kerberos.check_keytab("alice@TFYARN.TEST", str(junk))


def test_the_drivers_refused_login_is_one_line_naming_the_principal(tmp_path):
    log = KRB / "skein-driver-stale-keytab.log"  # what skein's driver logged (captured)
    said = login_refused(str(log), "stale@TFYARN.TEST", "/tmp/stale.keytab")
    assert said == ("Kerberos refused --principal stale@TFYARN.TEST with --keytab "
                    "/tmp/stale.keytab (Checksum failed): the keytab's key is not "
                    "stale@TFYARN.TEST's current one; get a fresh keytab for it, or kinit "
                    "stale@TFYARN.TEST and drop --principal/--keytab")
    other = tmp_path / "driver.log"
    other.write_text("INFO skein.Driver: Driver started, listening on 1234\n")
    assert login_refused(str(other), None, None) is None


def test_kerberized_follows_core_site(tmp_path):
    (tmp_path / "core-site.xml").write_text(
        '<?xml version="1.0"?><configuration><property><name>hadoop.security.authentication'
        "</name><value>kerberos</value></property></configuration>")
    assert siteconf.kerberized(str(tmp_path))
    assert not siteconf.kerberized(str(tmp_path / "nowhere")) and not siteconf.kerberized(None)


def test_the_jvm_reads_the_krb5_conf_that_krb5_config_names():
    settings = Settings.from_environ({"KRB5_CONFIG": "/etc/site/krb5.conf:/etc/krb5.conf"})
    assert settings.java_options() == ["-Djava.security.krb5.conf=/etc/site/krb5.conf"]
    assert Settings.from_environ({}).java_options() == []


# ---------------------------------------------------------------- a keytab job's own login


def test_a_keytab_job_names_its_principal_and_ships_the_keytab(tmp_path):
    from tfyarn.api.options import ElSubmitArgs, from_el_submit
    from tfyarn.client import appspec, staging
    from tfyarn.runtime import keytab

    spec = from_el_submit(ElSubmitArgs(command=("true",), kind="standalone"), str(tmp_path))
    assert staging.keytab_job(spec, None, None) is spec
    job = staging.keytab_job(spec, "alice@TFYARN.TEST", str(KRB / "alice.keytab"))
    assert (keytab.PRINCIPAL_VAR, "alice@TFYARN.TEST") in job.env
    staged = staging.with_keytab(appspec.Staged("job.json"), str(KRB / "alice.keytab"))
    assert staged.resources == ((keytab.KEYTAB_FILE, str(KRB / "alice.keytab"), "file"),)
    files = appspec.files_dict(staged, None)
    assert files[keytab.KEYTAB_FILE] == {"source": str(KRB / "alice.keytab"), "type": "file"}


def test_the_launchers_login_replaces_the_token_file_with_its_ticket_cache(tmp_path):
    from tfyarn.runtime import keytab

    assert keytab.KeytabLogin.of_job({}, str(tmp_path)) is None
    login = keytab.KeytabLogin.of_job({keytab.PRINCIPAL_VAR: "alice@TFYARN.TEST"},
                                      str(tmp_path))
    assert login is not None and login.keytab == str(tmp_path / keytab.KEYTAB_FILE)
    env = login.task_env({"HADOOP_TOKEN_FILE_LOCATION": "/x/container_tokens", "A": "1"})
    assert env == {"A": "1", "KRB5CCNAME": f"FILE:{tmp_path / keytab.CCACHE_FILE}"}


def test_a_node_without_kinit_or_a_kdc_is_one_sentence_for_the_job(tmp_path):
    """MIT's kinit for real (Debian's krb5-user: CI installs it and sets
    TFYARN_REQUIRE_KERBEROS=1, so there this never skips)."""
    import shutil as sh

    from tfyarn.runtime import keytab

    sh.copy(KRB / "alice.keytab", tmp_path / keytab.KEYTAB_FILE)
    login = keytab.KeytabLogin.of_job({keytab.PRINCIPAL_VAR: "alice@TFYARN.TEST"},
                                      str(tmp_path))
    assert login is not None
    assert "this node has no kinit" in (login.login({"PATH": str(tmp_path)}) or "")
    if sh.which("kinit", path="/usr/bin:/bin") is None:
        if os.environ.get("TFYARN_REQUIRE_KERBEROS"):
            pytest.fail("MIT's kinit is missing (apt-get install krb5-user)")
        pytest.skip("no MIT kinit here (apt-get install krb5-user)")
    conf = tmp_path / "krb5.conf"  # the realm's KDC is not there: kinit's own words
    conf.write_text("[libdefaults]\n default_realm = TFYARN.TEST\n[realms]\n TFYARN.TEST = "
                    "{\n  kdc = tcp/127.0.0.1:1\n }\n")
    problem = login.login({"PATH": "/usr/bin:/bin", "KRB5_CONFIG": str(conf)}) or ""
    assert problem.startswith(f"kinit -kt {keytab.KEYTAB_FILE} alice@TFYARN.TEST failed on "
                              "this node: kinit: Cannot contact any KDC"), problem


def test_the_tasks_jvm_reads_the_nodes_krb5_conf():
    from tfyarn.hdfs.plugin import jvm_env

    assert jvm_env({}) == {}
    assert jvm_env({"KRB5_CONFIG": "/etc/k.conf:/etc/other"}) == {
        "LIBHDFS_OPTS": "-Djava.security.krb5.conf=/etc/k.conf"}
    assert jvm_env({"KRB5_CONFIG": "/etc/k.conf", "LIBHDFS_OPTS": "-Xmx1g"}) == {
        "LIBHDFS_OPTS": "-Xmx1g -Djava.security.krb5.conf=/etc/k.conf"}
    assert jvm_env({"KRB5_CONFIG": "/etc/k.conf",
                    "LIBHDFS_OPTS": "-Djava.security.krb5.conf=/etc/k.conf"}) == {}
