"""What the tests share besides fixtures (those are in `tests/conftest.py`), by concern: `waiting`, `database`,
`conf`, `runs` (in-process submits and polls), `http` (our servers over HTTP, SSE, metrics) and `processes` (real
workers, sweepers, `serve` and web replicas)."""
