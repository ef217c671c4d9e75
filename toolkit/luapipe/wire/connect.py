"""Build a redis-py client from a URL for the CLI (library functions take a client).

The client has redis-py's automatic retries off (luapipe's transport decides what may be
re-sent), bounded connect/read timeouts, and is checked with PING so that an unreachable
server or a wrong password is reported at once, naming the masked address.
"""

from __future__ import annotations

import os
import re
from typing import Any

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from luapipe.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    LuapipeError,
    ServerError,
    mask_url,
    translate,
)

__all__ = ["DEFAULT_URL", "client_from_url", "resolve_url"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def resolve_url(url: str | None) -> str:
    """``--url``, else ``REDIS_URL``, else the local default."""
    return url or os.environ.get("REDIS_URL") or DEFAULT_URL


def client_from_url(
    url: str, *, timeout: float = 5.0, cluster: bool | None = None, **kwargs: Any
) -> redis.Redis:
    """A checked client for ``url`` (redis://, rediss://, unix://).

    ``cluster=None`` asks the server (``INFO cluster``) and returns a
    ``redis.cluster.RedisCluster`` for a cluster node; True/False force the choice.
    """
    try:
        client = redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            **kwargs,
        )
    except ValueError as exc:
        raise ConnectionFailed(f"invalid Redis URL {mask_url(url)}: {exc}") from None
    try:
        client.ping()
        if cluster is None:
            cluster = str(client.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.ResponseError as exc:
        if not str(exc).startswith("BUSY"):  # a busy server is reachable (SCRIPT KILL works)
            client.close()
            err = translate(exc, where=mask_url(url), sent=False)
            if type(err) is ServerError:  # e.g. "ERR DB index is out of range": say where
                err = ServerError(f"the server at {mask_url(url)} refused the connection: {err}")
            raise err from None
    except redis.RedisError as exc:
        client.close()
        raise _with_hint(translate(exc, where=mask_url(url), sent=False), exc, url) from None
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
            f"cannot use {mask_url(url)} as a cluster: {first} (drop --cluster for a single server)"
        ) from None
    except (redis.RedisError, OSError) as exc:
        raise translate(exc, where=mask_url(url), sent=False) from None


def _with_hint(err: LuapipeError, exc: Exception, url: str) -> LuapipeError:
    """The likely cause beside the server's words, for the classic set-up mistakes: no
    password, TLS on one side only, a certificate that does not verify."""
    if isinstance(err, AuthenticationFailed) and "NOAUTH" in str(err):
        return AuthenticationFailed(
            f"authentication failed at {mask_url(url)}: the server needs a password and none "
            "was given (NOAUTH); put it in the URL: redis://:PASSWORD@host:port"
        )
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
        return type(err)(f"cannot connect to Redis at {mask_url(url)}: {cause}")
    hint = _tls_hint(text.lower(), url.startswith("rediss://"))
    return type(err)(f"{err} ({hint})") if hint else err


_VERIFY = re.compile(r"certificate verify failed: ([^(]*?)\s*\(_ssl")


def _tls_hint(low: str, tls: bool) -> str:
    if "certificate required" in low or (tls and ("eof" in low or "violation" in low)):
        return (
            "the server closed the TLS connection: does it ask for a client certificate? "
            "add ?ssl_certfile=/path/to/client.crt&ssl_keyfile=/path/to/client.key to the URL"
        )
    if tls:
        return "rediss:// speaks TLS: is TLS enabled on that port?"
    if "closed by server" in low or "reset by peer" in low:
        return "the server hung up at once: if that port speaks TLS, use rediss://"
    return ""
