"""The only I/O: what is sent, at most once, to which node.

- :mod:`~luapipe.wire.replies`: commands, error replies, the typed :class:`Redirect`;
- :mod:`~luapipe.wire.policy`: the frozen :class:`RetryPolicy` and ``did_not_run``;
- :mod:`~luapipe.wire.routing`: pure cluster rules, the request vocabulary (``Locate``,
  ``Nodes``, ``SlotsOf``, ``Send``, ``SendEach``, ``Refresh``, ``Sleep``, ``Release``) and
  the combinators every behaviour is written with (``on_slot_node``, ``gather``,
  ``routed``, ``sent_to``);
- :mod:`~luapipe.wire.sync` / :mod:`~luapipe.wire.aio`: the two transports (twins, kept
  line-aligned, public methods pinned by a test);
- :mod:`~luapipe.wire.drivers`: the two drivers that run steps (``drive``, ``drive_async``),
  side by side;
- :mod:`~luapipe.wire.clients`: which client is which; :mod:`~luapipe.wire.connect`: a
  client from a URL (CLI only);
- :mod:`~luapipe.wire.autopipe`: the auto-pipeline, a scheduler that runs many callers'
  steps side by side and merges their sends per node into one write (asyncio and thread
  flavours of one scheduling core).

Logic above the transport is written once, as a generator of requests; a driver answers
each request on held connections and *throws* transport errors into the generator, so
every retry decision (what did not run, what is sent again and where) is pure code shared
by the sync and the asyncio paths.

The same shape serves many callers at once, with no third copy: the auto-pipeline runs
their steps side by side (as :func:`~luapipe.wire.routing.gather` runs a pipeline's
per-node plans), merging their sends per node into one write and resuming each caller with
its own replies or error. What comes next fits it too: Function libraries are one more
attempt step for
``on_slot_node`` ("Function not found" proves it did not run: load the library on that
node and send once more); a per-script delivery policy is an attempt step that catches the
``OutcomeUnknown`` the drivers already throw in and re-sends a script declared safe to
retry, bounded by the policy.
"""
