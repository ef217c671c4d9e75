"""Reproduce the published figures on this machine and print ours beside them.

Runs on a private redis-server (or REDIS_URL): 10k PINGs one by one vs pipelined, the
harness's own overhead, and Redis in Action's update_token at RTT 0.271 ms and 48 ms with
the proxy calibration and the round-trip model. About 40 seconds.
"""

from __future__ import annotations

import json
import os
import sys

from luapipe.bench.anchors import run_anchors
from luapipe.bench.server import EmbeddedRedis
from luapipe.report import write_json


def main() -> int:
    url = os.environ.get("REDIS_URL")
    if url:
        report = run_anchors(url)
    else:
        with EmbeddedRedis() as server:
            report = run_anchors(server.url)
    print("\n".join(report.lines()))
    if len(sys.argv) > 1:
        write_json(report.bench.as_dict(), sys.argv[1])
        print(json.dumps({"wrote": sys.argv[1]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
