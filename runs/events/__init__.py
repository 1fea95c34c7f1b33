"""A run's events: numbered as the run emits them (`sink`), published to Redis (`publish`), and served as SSE by
the web: the process's pub/sub connection and inbox (`hub`), a stream's tail (`tail`), what waits for a slow
client (`backlog`), the buffered and stored events a stream did not hear live (`history`), and `/resume`.
"""
