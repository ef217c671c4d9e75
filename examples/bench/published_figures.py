"""Reproduce the published figures on this machine and print ours beside them.

Runs on a private redis-server (or the server of ``--url URL``): 10k PINGs one by one vs
pipelined, the harness's own overhead, and Redis in Action's update_token at RTT 0.271 ms
and 48 ms with the proxy calibration and the round-trip model. About 40 seconds.
"""

from __future__ import annotations

import json
import sys

from luapipe.bench.anchors import run_anchors
from luapipe.bench.server import EmbeddedRedis
from luapipe.report import write_json


def main(argv: list[str]) -> int:
    """``published_figures.py [--url URL] [results.json]`` (REDIS_URL is not used)."""
    url = None
    if argv[:1] == ["--url"] and len(argv) > 1:
        url, argv = argv[1], argv[2:]
    if url:
        report = run_anchors(url)
    else:
        with EmbeddedRedis() as server:
            report = run_anchors(server.url)
    print("\n".join(report.lines()))
    if argv:
        write_json(report.bench.as_dict(), argv[0])
        print(json.dumps({"wrote": argv[0]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
