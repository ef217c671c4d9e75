"""The one place where the promise tests reach inside luapipe.

Everything else in the drift and promise tests (tests/scripts/test_drift.py,
tests/*/test_promises*.py) goes through the public API (``luapipe.ScriptRegistry``,
``reg.pipeline``, ``op.run``, ``luapipe.verify``), so a module move or a rewrite of the
form runners only changes this file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from luapipe.operations import run as _run  # where one bound call runs in a form
from luapipe.operations.plan import Plan, WriteStep, plan_of

__all__ = ["Plan", "WriteStep", "break_form", "plan_of"]


def break_form(monkeypatch: pytest.MonkeyPatch, form: str, change: Callable[[Plan], Plan]) -> None:
    """From now on (for this test) ``form`` runs the plan ``change(plan)`` instead of the
    generated one; every other form is left alone. For tests of the checker itself: a
    form that disagrees with the others in one chosen way."""
    real = _run.run

    def run(plan: Plan, client: Any, run_form: str, *a: Any, **k: Any) -> Any:
        return real(change(plan) if run_form == form else plan, client, run_form, *a, **k)

    monkeypatch.setattr(_run, "run", run)
