"""Kerberos checks on the gateway that need no KDC: keytabs (made by the secured sandbox's
MIT KDC, tests/fixtures/kerberos), the driver's login failure as its log says it, and the
JVM's krb5.conf. The checks against a real KDC are integration/test_kerberos.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfyarn.client import kerberos
from tfyarn.core.errors import SpecError
from tfyarn.core.settings import Settings
from tfyarn.hdfs import siteconf
from tfyarn.protocol.skeinlink import login_refused

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
