"""Writing runs: everything that changes a run, its session or its stored events.

Accepting a run (`submit`, with its Idempotency-Key replays in `idempotency`), running one leg of it (`leg`), the
queue's executor that runs and settles legs of ticketed runs (`queue_executor`), runs without a ticket (inline, or
the durable queue off: `unqueued`), cancelling (`cancelling`, and the Redis intents a running leg hears:
`cancel_signal`) and continuing a paused run (`continuing`).
"""
