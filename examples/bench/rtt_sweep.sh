#!/bin/sh
# Every form of update_token and two catalogue operations from loopback to a cross-zone RTT.
set -e
exec luapipe bench update_token reserve_stock transfer \
    --rtt 0,0.25,0.5,1,2,5 --clients 1 --duration 2 \
    --json bench-out/rtt_sweep.json --html bench-out/rtt_sweep.html "$@"
