import pytest

from agents_registry.context import RunContext


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def __call__(self, name: str, fields: dict) -> None:
        self.events.append((name, fields))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.events]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make_context(recorder):
    def make(history=None, **overrides) -> RunContext:
        return RunContext(
            run_id="r",
            session_id="s",
            user_id=None,
            history=history or [],
            session_state={},
            emit=recorder,
            **overrides,
        )

    return make
