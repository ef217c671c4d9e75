"""The verdict: which form to use at each point of a benchmark, decided and put into words.

The measuring (``luapipe.bench``: workloads, runner, aggregate) produces records; this
package reads them as the results JSON has them (dicts) and never measures anything. The
surface, for a caller and for whoever plugs in new forms:

``recommend(records, skipped=None, *, margin_pct=MARGIN_PCT) -> list[Recommendation]``
    One :class:`Recommendation` per point (operation, RTT, clients, contention).
``recommendations(records, skipped=None, *, margin_pct=...) -> list[dict]``
    The same as dicts, withheld ("too few samples") where a form completed fewer than
    :data:`MIN_CALLS` calls: what a results file stores.
``summarize(records, workloads, *, skipped, cluster, load, cpus, netem) -> Summary``
    The end of a run: recommendations, crossover RTTs, method notes, :func:`method`.
``decide(rows, skipped=(), margin_pct=MARGIN_PCT) -> Verdict``
    One point's decision, before words: forms at stake, pairwise :class:`Comparison`, pick.
``compare(a, b, figure, margin_pct) -> Comparison``, ``figure_for(rows) -> Figure``
    Two forms by a :class:`Figure` (:data:`THROUGHPUT`, :data:`CPU`, :data:`P50`): ahead,
    equivalent or inconclusive at the margin.
``interval_of(values)``, ``ratio_of(a, b) -> Interval``, ``method_text(rounds)``
    The one interval method of a report: the median round, distribution-free.
``register_form(name, FormTraits(...))``
    A new form (a team's own script, a Python form, an auto-pipelined client) joins the
    policy: whether it is atomic, its rank among equivalents, its words. Without it, a form
    is atomic as its record's ``atomic`` flag says and ranked after the built-in forms.
``predict_ms``, ``fit_cost``, ``crossovers``, :class:`Crossover`
    The round-trip model.

A record needs: ``operation``, ``form``, ``rtt_ms_nominal``, ``clients``, ``ops``,
``ops_per_sec``, ``latency_ms`` (``p50``...), ``round_trips_per_op``, ``server_usec_per_op``,
``invariant_ok``; and, for intervals, ``rounds`` (per round: ``ops_per_sec``, ``p50``,
``client_cpu_us``, ``server_cpu_us``...). Optional: ``contention``, ``atomic``,
``read_compute_write``, ``write_share_declared``, ``lost_updates``, ``invariant_cases``, ``rate``.
"""

from __future__ import annotations

from luapipe.bench.verdict.compare import (
    AHEAD,
    BEHIND,
    CPU,
    EQUIVALENT,
    INCONCLUSIVE,
    MARGIN_PCT,
    P50,
    THROUGHPUT,
    Comparison,
    Figure,
    compare,
    figure_for,
    outcome_of,
)
from luapipe.bench.verdict.decide import Verdict, decide
from luapipe.bench.verdict.intervals import (
    COVERAGE,
    MIN_ROUNDS,
    Interval,
    interval_of,
    method_text,
    ratio_of,
)
from luapipe.bench.verdict.model import Crossover, FormCost, crossovers, fit_cost, predict_ms
from luapipe.bench.verdict.policy import (
    ATOMIC,
    POLICY,
    FormTraits,
    at_stake,
    kind_of,
    register_form,
)
from luapipe.bench.verdict.recommend import Recommendation, recommend
from luapipe.bench.verdict.summary import Summary, method, summarize
from luapipe.bench.verdict.withhold import MIN_CALLS, recommendations

__all__ = [
    "AHEAD",
    "ATOMIC",
    "BEHIND",
    "COVERAGE",
    "CPU",
    "EQUIVALENT",
    "INCONCLUSIVE",
    "MARGIN_PCT",
    "MIN_CALLS",
    "MIN_ROUNDS",
    "P50",
    "POLICY",
    "THROUGHPUT",
    "Comparison",
    "Crossover",
    "Figure",
    "FormCost",
    "FormTraits",
    "Interval",
    "Recommendation",
    "Summary",
    "Verdict",
    "at_stake",
    "compare",
    "crossovers",
    "decide",
    "figure_for",
    "fit_cost",
    "interval_of",
    "kind_of",
    "method",
    "method_text",
    "outcome_of",
    "predict_ms",
    "ratio_of",
    "recommend",
    "recommendations",
    "register_form",
    "summarize",
]
