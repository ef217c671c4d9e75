#!/bin/sh
# All clients on one key: non-atomic forms (naive, pipelined) lose updates and the report
# says so; WATCH/MULTI/EXEC retries and aborts are counted; scripts stay correct.
set -e
exec luapipe bench reserve_stock transfer rate_limit \
    --contention hot --clients 1,4 --rtt 0,0.5 --duration 2 \
    --json bench-out/contention.json --html bench-out/contention.html "$@"
