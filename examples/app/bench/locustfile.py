"""Locust load for the shop's rate-limiter endpoint: ``SHOP_FORM=script|pipelined``.

    locust -f examples/app/bench/locustfile.py --headless -u 32 -r 32 -t 10s \
        --host http://127.0.0.1:8080

Closed loop (no wait between requests), 1,000 users' keys picked at random; 200 and 429
both count as success (the limiter answered).
"""

from __future__ import annotations

import os
import random

from locust import FastHttpUser, constant, task

FORM = os.environ.get("SHOP_FORM", "script")


class LimiterClient(FastHttpUser):
    wait_time = constant(0)

    @task
    def hit(self) -> None:
        user = f"u{random.randrange(1000)}"
        with self.client.post(
            f"/limit/{user}?form={FORM}", name=f"limit[{FORM}]", catch_response=True
        ) as resp:
            if resp.status_code in (200, 429):
                resp.success()
            else:
                resp.failure(f"status {resp.status_code}")
