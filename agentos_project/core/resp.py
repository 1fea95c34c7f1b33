"""Commands in the Redis protocol (RESP), for the few places that talk to Redis over a socket of their own: the
supervisor stopping an embedded Redis, and a web process's pub/sub connection (`runs.events.pubsub`)."""


def command(*words: str) -> bytes:
    """`words` as one RESP command (an array of bulk strings)."""
    encoded = [word.encode() for word in words]
    return b"".join([b"*%d\r\n" % len(encoded), *(b"$%d\r\n%s\r\n" % (len(w), w) for w in encoded)])
