"""Numbers as the texts of errors and answers give them: seconds, sizes."""


def seconds_text(seconds: float) -> str:
    """Seconds as a person wrote them: 2592000, 0.5, 123456.7 (not 2.592e+06 or 123457)."""
    seconds = float(seconds)
    return str(int(seconds)) if seconds.is_integer() else repr(seconds)


def bytes_text(size: int) -> str:
    """A size as a limit's text gives it: 64 KiB, 1 MiB, or 5000 bytes when it is no whole number of KiB."""
    for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"
