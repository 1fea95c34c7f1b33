"""A run's events: publishing them to Redis as the run emits them (`eventbus`), and the web's side that serves
them as SSE (`streams`: the process's hub and a stream's tail; `backlog`: what waits for a slow client;
`history`: the buffered and stored events a stream did not hear live; `resume`: `/resume`).
"""
