"""A YARN container's token file, read without a JVM (`tfyarn.hdfs.tokens`), on files the
sandbox's NodeManagers really wrote (tests/fixtures/hadoop-3.3.6-secure/README.md)."""

from __future__ import annotations

import pytest
from conftest import REPO

from tfyarn.hdfs import tokens

FIXTURES = REPO / "tests" / "fixtures" / "hadoop-3.3.6-secure"
# what the NameNode accepted as `delegation=` (200, where no token gets 401), captured
ACCEPTED = ("JwAQcm9vdEBURllBUk4uVEVTVAJybQCKAaIYRQfBigGiGEbcgY-YEBTijEY68WxLp8SgS5p65YAzQad74h"
            "VIREZTX0RFTEVHQVRJT05fVE9LRU4OMTI3LjAuMC4xOjkwMDA")


def test_the_application_masters_tokens_and_the_string_webhdfs_accepted():
    found = tokens.read_tokens((FIXTURES / "am-container-tokens.bin").read_bytes())
    assert [(t.kind, t.service) for t in found] == [
        ("YARN_AM_RM_TOKEN", ""), ("HDFS_DELEGATION_TOKEN", "127.0.0.1:9000"),
        ("RM_DELEGATION_TOKEN", "127.0.0.1:8032")]
    assert tokens.hdfs_delegation(str(FIXTURES / "am-container-tokens.bin")) == ACCEPTED


def test_a_tasks_tokens_hold_the_hdfs_one_too():
    found = tokens.read_tokens((FIXTURES / "task-container-tokens.bin").read_bytes())
    assert [t.kind for t in found] == ["HDFS_DELEGATION_TOKEN", "RM_DELEGATION_TOKEN"]


@pytest.mark.parametrize("n", [0, 5, 127, 128, 255, 256, 70_000])
def test_lengths_read_back_as_hadoop_wrote_them(n):
    """WritableUtils' variable-length ints: one byte up to 127, a length byte then the
    value's bytes above (the identifier's 39 bytes and longer ones)."""
    token = tokens.Token(b"i" * n, b"p", "KIND", "svc")
    raw = tokens.MAGIC + b"\0" + tokens._vint(1) + tokens._text("alias") + \
        tokens._vint(n) + token.identifier + tokens._vint(1) + b"p" + tokens._text("KIND") + \
        tokens._text("svc")
    assert tokens.read_tokens(raw) == [token]


@pytest.mark.parametrize("data, words", [
    (b"not a token file", "no HDTS header"),
    (b"HDTS\x01\x0a\x00", "format 1 is not read here"),
    (b"HDTS\x00\x01\x05ali", "ends early"),
])
def test_what_is_not_a_token_file_this_reader_knows_is_one_error(data, words):
    with pytest.raises(tokens.TokenFileError, match=words):
        tokens.read_tokens(data)


def test_a_cluster_without_kerberos_gives_no_hdfs_token(tmp_path):
    am_rm_only = tokens.MAGIC + b"\0\x01" + tokens._text("a") + tokens._vint(2) + b"id" + \
        tokens._vint(1) + b"p" + tokens._text("YARN_AM_RM_TOKEN") + tokens._text("") + b"\0"
    (tmp_path / "tokens").write_bytes(am_rm_only)
    assert tokens.hdfs_delegation(str(tmp_path / "tokens")) is None
