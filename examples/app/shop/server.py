"""A tiny HTTP/1.1 server on asyncio streams (keep-alive, JSON replies): no framework.

Routes::

    POST /limit/<user>[?form=script|pipelined]   200 allowed, 429 refused
    PUT  /stock/<sku>?qty=N                      200
    GET  /stock/<sku>                            200 {"sku", "left"}
    POST /reserve/<sku>?qty=N                    200 reserved, 409 not enough stock
    GET  /health                                 200
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from luapipe import CallArgumentError, LuapipeError, OutcomeUnknown
from shop.service import FORMS, Shop

__all__ = ["dispatch", "serve"]

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    409: "Conflict",
    429: "Too Many Requests",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


async def dispatch(shop: Shop, method: str, target: str) -> tuple[int, dict[str, Any]]:
    """Route one request to the shop; (status, JSON body)."""
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}
    parts = [p for p in url.path.split("/") if p]
    try:
        match method, parts:
            case "GET", ["health"]:
                return 200, {"ok": True}
            case "POST", ["limit", user]:
                form = query.get("form", "script")
                if form not in FORMS:
                    return 400, {"error": f"form must be one of {', '.join(FORMS)}"}
                d = await shop.hit(user, form)
                body = {"allowed": d.allowed, "hits": d.hits, "reset_ms": d.reset_ms}
                return (200 if d.allowed else 429), body
            case "PUT", ["stock", sku]:
                await shop.set_stock(sku, int(query["qty"]))
                return 200, {"sku": sku, "left": int(query["qty"])}
            case "GET", ["stock", sku]:
                return 200, {"sku": sku, "left": await shop.stock(sku)}
            case "POST", ["reserve", sku]:
                left = await shop.reserve(sku, int(query.get("qty", "1")))
                if left < 0:
                    return 409, {"error": "not enough stock", "sku": sku}
                return 200, {"sku": sku, "left": left}
        return 404, {"error": f"no route for {method} {url.path}"}
    except (KeyError, ValueError, CallArgumentError) as exc:
        return 400, {"error": f"bad request: {exc}"}
    except OutcomeUnknown as exc:
        return 504, {"error": str(exc), "retry": "check before retrying: it may have run"}
    except LuapipeError as exc:
        return 503, {"error": str(exc)}


async def _handle(shop: Shop, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            line = await reader.readline()
            if not line.strip():
                break
            method, target, _ = line.decode("latin-1").split(" ", 2)
            headers: dict[str, str] = {}
            while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = h.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if length := int(headers.get("content-length", "0")):
                await reader.readexactly(length)  # bodies are not used by these routes
            status, body = await dispatch(shop, method.upper(), target)
            data = json.dumps(body).encode()
            head = (
                f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()
            if headers.get("connection", "").lower() == "close":
                break
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


async def serve(shop: Shop, host: str = "127.0.0.1", port: int = 8080) -> asyncio.Server:
    """Start listening (``port=0``: any free port, see ``server.sockets``)."""
    return await asyncio.start_server(lambda r, w: _handle(shop, r, w), host, port)
