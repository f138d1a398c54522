"""SPNEGO (HTTP `Negotiate`): how a client proves its Kerberos login to Hadoop's web
services (the RM's REST API, WebHDFS, the NodeManagers' log pages) on a cluster whose
core-site.xml sets hadoop.http.authentication.type=kerberos; and how tfyarn's own server
(`tfyarn history --spnego-keytab`) checks a viewer's (`Acceptor`).

Through MIT's GSS-API library by ctypes (libgssapi_krb5.so.2: part of every Kerberos
client install, where the `gssapi` package would need compiling against krb5's headers).
Owns making a `Negotiate` header for a host from the ticket cache, or from a keytab
without touching any ticket cache (a memory cache of this process), accepting one with a
service keytab (the viewer's principal and local name), and saying in words why that
failed. Nothing here changes process-wide state: KRB5_CONFIG and KRB5CCNAME are
read by the library from the environment as it is.
Must not write a ticket cache or the process environment: a keytab's login lives in this
process's memory.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import itertools
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfyarn.core.errors import EnvironmentMissing, SpecError

GSS_C_INITIATE, GSS_C_ACCEPT = 1, 2
GSS_S_COMPLETE = 0
GSS_C_MUTUAL_FLAG = 2
GSS_C_GSS_CODE, GSS_C_MECH_CODE = 1, 2
SPNEGO_OID = b"\x2b\x06\x01\x05\x05\x02"  # 1.3.6.1.5.5.2
_MEMORY = itertools.count()


class NegotiateUnavailable(EnvironmentMissing):
    """This host has no GSS-API library to speak SPNEGO with."""


class NegotiateRefused(SpecError):
    """The Kerberos login could not make a token (no ticket, expired, no key): nothing was
    asked of the cluster; the message says what to run."""


class _Buffer(ctypes.Structure):
    _fields_ = [("length", ctypes.c_size_t), ("value", ctypes.c_void_p)]


class _Oid(ctypes.Structure):
    _fields_ = [("length", ctypes.c_uint32), ("elements", ctypes.c_void_p)]


class _KeyValue(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class _KeyValueSet(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint32), ("elements", ctypes.POINTER(_KeyValue))]


_LIB: Any = None


def _lib() -> Any:
    global _LIB  # noqa: PLW0603 - the library is loaded once per process
    if _LIB is None:
        name = ctypes.util.find_library("gssapi_krb5") or "libgssapi_krb5.so.2"
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            raise NegotiateUnavailable(
                "this cluster's web services want Kerberos (SPNEGO) and this host has no "
                "GSS-API library: install MIT Kerberos' client libraries (Debian/Ubuntu: "
                "libgssapi-krb5-2, RHEL: krb5-libs)") from None
        for fn in ("gss_import_name", "gss_init_sec_context", "gss_acquire_cred_from",
                   "gss_display_status", "gss_release_buffer", "gss_release_name",
                   "gss_release_cred", "gss_delete_sec_context", "gss_accept_sec_context",
                   "gss_display_name", "gss_localname"):
            getattr(lib, fn).restype = ctypes.c_uint32  # OM_uint32: errors use the top bits
        _LIB = lib
    return _LIB


def _words(major: int, minor: int) -> str:
    """GSS-API's own words for a failure (both its generic and Kerberos' reasons)."""
    lib, out = _lib(), []
    for code, kind in ((major, GSS_C_GSS_CODE), (minor, GSS_C_MECH_CODE)):
        context, text = ctypes.c_uint32(0), _Buffer()
        while True:
            m = ctypes.c_uint32()
            if lib.gss_display_status(ctypes.byref(m), ctypes.c_uint32(code), kind, None,
                                      ctypes.byref(context), ctypes.byref(text)) != 0:
                break
            out.append(ctypes.string_at(text.value, text.length).decode("utf-8", "replace"))
            lib.gss_release_buffer(ctypes.byref(m), ctypes.byref(text))
            if context.value == 0:
                break
    return "; ".join(w for w in out if w and w != "Unspecified GSS failure.  Minor code may "
                     "provide more information")


def _failed(major: int) -> bool:
    return bool(major & 0xFFFF0000)  # GSS_ERROR: a calling or routine error


def _import_name(lib: Any, text: str, kind: str, refusal: str) -> ctypes.c_void_p:
    """GSS-API's name for `text`, read as the name type the library exports as `kind`;
    NegotiateRefused(`refusal` and the library's words) where it refuses it. The caller
    releases it (gss_release_name)."""
    raw = text.encode()
    buf = _Buffer(len(raw), ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p))
    name, minor = ctypes.c_void_p(), ctypes.c_uint32()
    major = lib.gss_import_name(ctypes.byref(minor), ctypes.byref(buf),
                                ctypes.c_void_p.in_dll(lib, kind), ctypes.byref(name))
    if _failed(major):
        raise NegotiateRefused(f"{refusal}: {_words(major, minor.value)}")
    return name


@dataclass(frozen=True)
class Negotiator:
    """Makes `Negotiate` headers as this user: from `keytab` as `principal` when given
    (in a memory cache of this process), else from the ticket cache (`ccache`, else the
    library's default: KRB5CCNAME)."""

    principal: str | None = None
    keytab: str | None = None
    ccache: str | None = None
    memory: str = field(default="", compare=False)  # a keytab's login, kept per Negotiator

    def __post_init__(self) -> None:
        if self.keytab and not self.memory:
            object.__setattr__(self, "memory", f"MEMORY:tfyarn-{os.getpid()}-{next(_MEMORY)}")

    def header(self, host: str) -> str:
        """`Negotiate <token>` for HTTP@host; NegotiateRefused says why none can be made."""
        lib = _lib()
        minor = ctypes.c_uint32()
        cred = self._credential(lib)
        target = _import_name(lib, f"HTTP@{host}", "GSS_C_NT_HOSTBASED_SERVICE",
                              f"SPNEGO: HTTP@{host} is not a service name")
        try:
            return "Negotiate " + self._token(lib, cred, target, host)
        finally:
            lib.gss_release_name(ctypes.byref(minor), ctypes.byref(target))
            if cred.value:
                lib.gss_release_cred(ctypes.byref(minor), ctypes.byref(cred))

    def _token(self, lib: Any, cred: ctypes.c_void_p, target: ctypes.c_void_p,
               host: str) -> str:
        minor, context, out = ctypes.c_uint32(), ctypes.c_void_p(), _Buffer()
        mech_bytes = ctypes.create_string_buffer(SPNEGO_OID, len(SPNEGO_OID))
        mech = _Oid(len(SPNEGO_OID), ctypes.cast(mech_bytes, ctypes.c_void_p))
        major = lib.gss_init_sec_context(
            ctypes.byref(minor), cred, ctypes.byref(context), target, ctypes.byref(mech),
            GSS_C_MUTUAL_FLAG, 0, None, None, None, ctypes.byref(out), None, None)
        try:
            if _failed(major):
                raise NegotiateRefused(self._refusal(host, _words(major, minor.value)))
            return base64.b64encode(ctypes.string_at(out.value, out.length)).decode()
        finally:
            lib.gss_release_buffer(ctypes.byref(minor), ctypes.byref(out))
            if context.value:
                lib.gss_delete_sec_context(ctypes.byref(minor), ctypes.byref(context), None)

    def _credential(self, lib: Any) -> ctypes.c_void_p:
        """A credential from the keytab or the named cache; none (the default cache)
        otherwise."""
        cred = ctypes.c_void_p()
        store = ([(b"client_keytab", self.keytab.encode()), (b"ccache", self.memory.encode())]
                 if self.keytab else [(b"ccache", self.ccache.encode())] if self.ccache else [])
        if not store:
            return cred
        items = (_KeyValue * len(store))(*[_KeyValue(k, v) for k, v in store])
        kvs = _KeyValueSet(len(store), items)
        minor, name = ctypes.c_uint32(), ctypes.c_void_p()
        if self.principal:
            name = _import_name(lib, self.principal, "GSS_KRB5_NT_PRINCIPAL_NAME",
                                f"--principal {self.principal}: not a Kerberos principal "
                                "name (USER@REALM)")
        try:
            major = lib.gss_acquire_cred_from(
                ctypes.byref(minor), name, 0, None, GSS_C_INITIATE, ctypes.byref(kvs),
                ctypes.byref(cred), None, None)
        finally:
            if name.value:
                lib.gss_release_name(ctypes.byref(minor), ctypes.byref(name))
        if _failed(major):
            raise NegotiateRefused(self._refusal("", _words(major, minor.value)))
        return cred

    def _refusal(self, host: str, words: str) -> str:
        where = f" to {host}" if host else ""
        if self.keytab:  # as skein's driver says it (skeinclient): the same login, refused
            return (f"Kerberos refused --principal {self.principal} with --keytab "
                    f"{self.keytab}{where} ({words}): the keytab holds no current key for "
                    f"{self.principal}; pass the keytab made for it (klist -kt KEYTAB lists "
                    f"its principals), get a fresh one, or kinit {self.principal} and drop "
                    "--principal/--keytab")
        return (f"no usable Kerberos ticket for SPNEGO{where} ({words}): run kinit "
                "YOU@REALM (or kinit -kt KEYTAB YOU@REALM), or pass --principal and --keytab")


@dataclass(frozen=True)
class Viewer:
    """Who a `Negotiate` header proved to be: the Kerberos principal, and the local user
    name the host's krb5.conf maps it to (auth_to_local: by default USER@DEFAULT_REALM is
    USER; a principal with an instance, or of another realm, maps to none)."""

    principal: str
    user: str


@dataclass(frozen=True)
class Acceptor:
    """Checks `Negotiate` headers with the keys of a service keytab (HTTP/HOST@REALM: a
    browser or `curl --negotiate` asks for a ticket to the host it opens)."""

    keytab: str

    def check(self) -> None:
        """NegotiateRefused where the keytab gives no credential (no file, no keys)."""
        lib = _lib()
        minor = ctypes.c_uint32()
        cred = self._credential(lib)
        lib.gss_release_cred(ctypes.byref(minor), ctypes.byref(cred))

    def accept(self, header: str) -> Viewer:
        """The viewer a `Negotiate <token>` header proves, or NegotiateRefused saying
        why not (no token, a ticket for another service, a replay, no local name)."""
        kind, _, token = header.partition(" ")
        if kind.lower() != "negotiate" or not token.strip():
            raise NegotiateRefused("not a Negotiate header")
        try:
            raw = base64.b64decode(token.strip(), validate=True)
        except ValueError:
            raise NegotiateRefused("a Negotiate token that is not base64") from None
        lib = _lib()
        minor, context, name, out = (ctypes.c_uint32(), ctypes.c_void_p(), ctypes.c_void_p(),
                                     _Buffer())
        given = ctypes.create_string_buffer(raw, len(raw))
        inp = _Buffer(len(raw), ctypes.cast(given, ctypes.c_void_p))
        cred = self._credential(lib)
        try:
            major = lib.gss_accept_sec_context(
                ctypes.byref(minor), ctypes.byref(context), cred, ctypes.byref(inp), None,
                ctypes.byref(name), None, ctypes.byref(out), None, None, None)
            if _failed(major):
                raise NegotiateRefused(f"SPNEGO: {_words(major, minor.value)}")
            if major != GSS_S_COMPLETE:  # SPNEGO's mechanism renegotiation: not offered
                raise NegotiateRefused("SPNEGO: the client's first token did not complete "
                                       "a Kerberos login (a mechanism other than Kerberos?)")
            principal = _text(lib, "gss_display_name", name)
            try:
                user = _text(lib, "gss_localname", name)
            except NegotiateRefused:
                raise NegotiateRefused(f"{principal}: this host's krb5.conf maps it to no "
                                       "local user (auth_to_local)") from None
            return Viewer(principal, user)
        finally:
            lib.gss_release_buffer(ctypes.byref(minor), ctypes.byref(out))
            if name.value:
                lib.gss_release_name(ctypes.byref(minor), ctypes.byref(name))
            if context.value:
                lib.gss_delete_sec_context(ctypes.byref(minor), ctypes.byref(context), None)
            lib.gss_release_cred(ctypes.byref(minor), ctypes.byref(cred))

    def _credential(self, lib: Any) -> ctypes.c_void_p:
        cred, minor = ctypes.c_void_p(), ctypes.c_uint32()
        items = (_KeyValue * 1)(_KeyValue(b"keytab", self.keytab.encode()))
        kvs = _KeyValueSet(1, items)
        major = lib.gss_acquire_cred_from(ctypes.byref(minor), None, 0, None, GSS_C_ACCEPT,
                                          ctypes.byref(kvs), ctypes.byref(cred), None, None)
        if _failed(major):
            raise NegotiateRefused(f"--spnego-keytab {self.keytab}: no service key from it "
                                   f"({_words(major, minor.value)}); pass a keytab holding "
                                   "HTTP/HOST@REALM (klist -kt KEYTAB lists its principals)")
        return cred


def _text(lib: Any, fn: str, name: ctypes.c_void_p) -> str:
    """gss_display_name's or gss_localname's words for `name`."""
    minor, buf = ctypes.c_uint32(), _Buffer()
    if fn == "gss_display_name":  # its last argument, the name's type: not wanted
        major = lib.gss_display_name(ctypes.byref(minor), name, ctypes.byref(buf), None)
    else:
        major = lib.gss_localname(ctypes.byref(minor), name, None, ctypes.byref(buf))
    try:
        if _failed(major):
            raise NegotiateRefused(f"{fn}: {_words(major, minor.value)}")
        return ctypes.string_at(buf.value, buf.length).decode("utf-8", "replace")
    finally:
        lib.gss_release_buffer(ctypes.byref(minor), ctypes.byref(buf))


def challenged(status: int, www_authenticate: str | None) -> bool:
    """Whether an answer asks for SPNEGO: Hadoop's AuthenticationFilter says 401 with
    `WWW-Authenticate: Negotiate` to a request without a valid login."""
    return status == 401 and "negotiate" in (www_authenticate or "").lower()


def host_of(url: str) -> str:
    return urllib.parse.urlparse(url).hostname or ""


def urlopen(url: str, headers: Mapping[str, str], login: Negotiator | None,
            timeout: float) -> Any:
    """urllib's urlopen of a GET, answering a SPNEGO challenge once as `login` (when
    given: a Kerberized cluster). Raises what urlopen raises, and NegotiateRefused /
    NegotiateUnavailable when asked for a token that cannot be made."""
    try:
        return urllib.request.urlopen(  # noqa: S310 - the cluster's own http(s) URLs
            urllib.request.Request(url, headers=dict(headers)), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if login is None or not challenged(exc.code, exc.headers.get("WWW-Authenticate")):
            raise
        exc.close()
    signed = {**headers, "Authorization": login.header(host_of(url))}
    return urllib.request.urlopen(  # noqa: S310
        urllib.request.Request(url, headers=signed), timeout=timeout)
