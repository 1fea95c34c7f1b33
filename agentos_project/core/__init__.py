"""The ground floor every app stands on, importing no app and nothing of the composition root around it.

- `conf`: the typed settings object, read from the environment (`current()`); `units`: numbers as texts give them
- `postgres/`: the database engine (a per-process connection pool) and prepared statements
- `identity/`: who is asking: the bearer credentials (`auth`), JWTs (`tokens`, `jwks`), scopes (`scopes`)
- `elastic`, `batching`: threads made as work arrives, and work gathered into batches
- `coordination`: Redis clients and names scoped to a deployment; `resp`: the Redis protocol, for raw sockets
- `exceptions`, `validation`, `parsers`, `openapi`: errors with their HTTP meaning, request validation, request
  bodies, the shapes of refusals in /openapi.json
- `streaming`: a streamed response the web sends part by part; `jsonsafe`: values PostgreSQL can store
- `stopping`, `process`: what a process does when it stops gracefully, and once it has loaded

Standard library only at the package level: `serve`'s supervisor, which holds no Django, imports `resp` from here.
"""
