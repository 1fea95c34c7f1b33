"""Numbers as the texts of errors and answers give them."""


def seconds_text(seconds: float) -> str:
    """Seconds as a person wrote them: 2592000, 0.5, 123456.7 (not 2.592e+06 or 123457)."""
    seconds = float(seconds)
    return str(int(seconds)) if seconds.is_integer() else repr(seconds)
