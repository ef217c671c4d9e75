"""Build a redis-py client from a URL for the CLI (library functions take a client).

The client has redis-py's automatic retries off (luapipe's transport decides what may be
re-sent), bounded connect/read timeouts, and is checked with PING so that an unreachable
server or a wrong password is reported at once, naming the address as
:func:`~luapipe.errors.printable_url` shows it (never the password).

:func:`url_problem` says why a URL cannot work before anything connects, in words that
never repeat any part of it (urllib's own "Port could not be cast to integer value as
'S3cret'" quotes a piece of a password holding a raw ``/``).
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from luapipe.errors import (
    QUOTE_HOW,
    ConnectionFailed,
    LuapipeError,
    ServerError,
    printable_url,
    translate,
)

__all__ = ["DEFAULT_URL", "SCHEMES", "client_from_url", "resolve_url", "url_problem"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
SCHEMES = ("redis://", "rediss://", "unix://")

#: characters that end a URL's userinfo early: a password holding one must be percent-encoded
_ENDS_USERINFO = {"/": "%2F", "?": "%3F", "#": "%23", "[": "%5B", "]": "%5D"}
_INVALID_VALUE = re.compile(r"Invalid value for '[\w-]+' in connection URL\.")
_UNKNOWN_OPTION = re.compile(r"unexpected keyword argument '([\w-]+)'")


def resolve_url(url: str | None) -> str:
    """``--url``, else ``REDIS_URL``, else the local default."""
    return url or os.environ.get("REDIS_URL") or DEFAULT_URL


def url_problem(url: str, schemes: tuple[str, ...] = SCHEMES) -> str | None:
    """Why redis-py cannot use ``url``, or None. The words never quote the URL: a password
    written with a raw ``/``, ``#``, ``?``, ``[`` or ``]`` is reported by which character to
    percent-encode, and the port by what it must be."""
    if not url.startswith(schemes):
        shown = ", ".join(schemes[:-1]) + f" or {schemes[-1]}" if len(schemes) > 1 else schemes[0]
        return f"a Redis URL starts with {shown} (e.g. redis://127.0.0.1:6379/0)"
    rest = url.split("://", 1)[1]
    at = rest.rfind("@")
    if at >= 0 and not (url.startswith("unix://") and rest.startswith("/")):
        problem = _userinfo_problem(rest, at)
        if problem is not None:
            return problem
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError as exc:
        if "IPv6" in str(exc):
            return "the host is not a valid IPv6 address ([::1] is one)"
        return "the port is not a whole number from 0 to 65535"
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.make_connection()  # builds it: refuses options redis-py does not know
    except TypeError as exc:
        unknown = _UNKNOWN_OPTION.search(str(exc))
        visible = parse_qsl(urlsplit(printable_url(url)).query, keep_blank_values=True)
        if unknown is not None and unknown[1] not in dict(visible):
            # the name is in the part printable_url hides, after a ?password=: a piece of
            # a password written with a raw "&"
            return (
                "redis-py does not know an option in the URL's query; a password holding "
                f"& = # or a space goes percent-encoded in it ({QUOTE_HOW})"
            )
        name = f" {unknown[1]!r}" if unknown else ""
        return f"redis-py does not know the option{name} in the URL's query"
    except (ValueError, redis.RedisError) as exc:
        text = str(exc)
        known = _INVALID_VALUE.search(text)
        return known[0] if known else f"redis-py cannot use it ({type(exc).__name__})"
    return None


def _userinfo_problem(rest: str, at: int) -> str | None:
    """A userinfo (``user:password`` before the last ``@``) that holds a character which
    ends it early, so redis-py would read part of the password as the host or port."""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    userinfo = rest[:at]
    if at < len(authority) and not any(c in userinfo for c in "[]"):
        return None  # the last "@" is inside the host part: a well-formed userinfo
    if at > len(authority) and "?" in rest[:at] and _host_ok(rest):
        return None  # an "@" inside the query (a file name): not a userinfo
    user, colon, password = userinfo.partition(":")
    found = [c for c in _ENDS_USERINFO if c in password] if colon else []
    whose = "password"
    if not found:
        found = [c for c in _ENDS_USERINFO if c in user]
        whose = "user name" if colon else "user name or password"
    if not found:
        return None
    chars = " ".join(repr(c) for c in found)
    codes = ", ".join(f"{c} is {_ENDS_USERINFO[c]}" for c in found)
    return (
        f"the {whose} holds {chars}, which ends that part of a URL early; write it "
        f"percent-encoded ({codes}; {QUOTE_HOW} encodes every character that needs it)"
    )


def _host_ok(rest: str) -> bool:
    try:
        parts = urlsplit("redis://" + rest)
        parts.port  # noqa: B018
    except ValueError:
        return False
    return bool(parts.hostname)


def client_from_url(
    url: str, *, timeout: float = 5.0, cluster: bool | None = None, **kwargs: Any
) -> redis.Redis:
    """A checked client for ``url`` (redis://, rediss://, unix://).

    ``cluster=None`` asks the server (``INFO cluster``) and returns a
    ``redis.cluster.RedisCluster`` for a cluster node; True/False force the choice.
    """
    shown = printable_url(url)
    problem = url_problem(url)
    if problem is not None:
        raise ConnectionFailed(f"invalid Redis URL {shown}: {problem}")
    client = redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        **kwargs,
    )
    try:
        client.ping()
        if cluster is None:
            cluster = str(client.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.ResponseError as exc:
        if not str(exc).startswith("BUSY"):  # a busy server is reachable (SCRIPT KILL works)
            client.close()
            err = translate(exc, where=shown, sent=False)
            if type(err) is ServerError:  # e.g. "ERR DB index is out of range": say where
                err = ServerError(f"the server at {shown} refused the connection: {err}")
            raise err from None
    except redis.RedisError as exc:
        client.close()
        raise _with_hint(translate(exc, where=shown, sent=False), exc, url) from None
    if not cluster:
        return client
    client.close()
    try:
        return redis.cluster.RedisCluster.from_url(  # type: ignore[return-value]
            url, socket_timeout=timeout, socket_connect_timeout=timeout, **kwargs
        )
    except RedisClusterException as exc:  # not a RedisError: "Cluster mode is not enabled"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConnectionFailed(
            f"cannot use {shown} as a cluster: {first} (drop --cluster for a single server)"
        ) from None
    except (redis.RedisError, OSError) as exc:
        raise translate(exc, where=shown, sent=False) from None


def _with_hint(err: LuapipeError, exc: Exception, url: str) -> LuapipeError:
    """The likely cause beside the server's words, for the classic set-up mistakes: TLS on
    one side only, a certificate that does not verify (a TCP URL's: a unix socket has no
    TLS to get wrong)."""
    text = str(exc)
    verify = _VERIFY.search(text)
    if verify is not None or "CERTIFICATE_VERIFY_FAILED" in text:  # the whole story
        why = verify[1].rstrip(". ") if verify else "certificate verify failed"
        if "mismatch" in why:
            cause = f"the server's TLS certificate is not for this host ({why}): connect with "
            cause += "a name or address the certificate names"
        else:
            cause = f"the server's TLS certificate failed verification ({why}): pass the CA "
            cause += "that signed it in the URL, ?ssl_ca_certs=/path/to/ca.pem"
        return type(err)(f"cannot connect to Redis at {printable_url(url)}: {cause}")
    if url.startswith("unix://"):  # no TLS on a unix socket: no TLS hint either
        return err
    hint = _tls_hint(text.lower(), url.startswith("rediss://"))
    return type(err)(f"{err} ({hint})") if hint else err


_VERIFY = re.compile(r"certificate verify failed: ([^(]*?)\s*\(_ssl")


def _tls_hint(low: str, tls: bool) -> str:
    if "certificate required" in low or (tls and ("eof" in low or "violation" in low)):
        return (
            "the server closed the TLS connection: does it ask for a client certificate? "
            "add ?ssl_certfile=/path/to/client.crt&ssl_keyfile=/path/to/client.key to the URL"
        )
    if tls and ("pem lib" in low or "no such file" in low or "bad decrypt" in low):
        return (  # before any byte was sent: a file of the URL's ssl_* options
            "could not read a certificate or key file the URL names: check ssl_certfile, "
            "ssl_keyfile and ssl_ca_certs, and ssl_password for an encrypted key"
        )
    if tls:
        return "rediss:// speaks TLS: is TLS enabled on that port?"
    if "closed by server" in low or "reset by peer" in low:
        return "the server hung up at once: if that port speaks TLS, use rediss://"
    return ""
