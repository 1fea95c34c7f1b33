"""Writing runs: everything that changes a run, its session or its stored events.

Accepting a run (`submit`; the session's owner, `sessions`; Idempotency-Key replays, `idempotency`), running one
leg of it (`leg`), every change of a run's status, with the transition table (`states`), what a record stores
besides the run's row (`record`), the queue's executor for ticketed runs (`queue_executor`), runs without a ticket
(inline, or the durable queue off: `unqueued`), cancelling (`cancel`; the Redis intents a running leg hears:
`cancel_signal`) and continuing a paused run (`continuation`).
"""
