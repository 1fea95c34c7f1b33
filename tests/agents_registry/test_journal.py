"""The run loop with a journal: replayed steps call nothing and emit nothing, and a tool call a lost attempt left
unfinished runs again (idempotent), is reported of unknown outcome, or fails the run, as its tool says."""

from __future__ import annotations

import pytest

from agents_registry.chat_models import ToolCall
from agents_registry.components import Agent, Team
from agents_registry.context import PermanentRunError, RunRequest
from agents_registry.journal import COMPLETED, INTERRUPTED_FAILS, OUTCOME_UNKNOWN, STARTED, Journal, Recorded
from agents_registry.tools import tool


class MemoryJournal(Journal):
    """A journal in a list: what one attempt kept, for the next attempt to replay (positions as the runs app's)."""

    def __init__(self, kept: list[dict] | None = None):
        self.kept = kept if kept is not None else []
        self.position = -1
        self.replaying = bool(self.kept)

    def replay(self, kind, fingerprint, call=None):
        fingerprint = fingerprint()
        self.position += 1
        entry = self.kept[self.position] if self.position < len(self.kept) else None
        if not self.replaying or entry is None or (entry["kind"], entry["fingerprint"]) != (kind, fingerprint):
            self.replaying = False
            del self.kept[self.position :]
            self.kept.append({"kind": kind, "fingerprint": fingerprint, "status": None, "output": None})
            return None
        if entry["status"] != COMPLETED:
            self.replaying = False
        return Recorded(entry["status"], entry["output"], 1)

    def started(self):
        self.kept[self.position]["status"] = STARTED

    def completed(self, kind, output, *, duration, status=COMPLETED, announce=lambda: None):
        self.kept[self.position].update(status=status, output=output)
        announce()

    def interrupted(self):
        self.kept[self.position]["status"] = "interrupted"


class TwoToolsModel:
    """Asks for `charge`, then answers with the tool results it saw; counts its requests."""

    id, provider = "two-tools", "test"

    def __init__(self):
        self.requests = 0

    def stream(self, messages, tools, ctx):
        self.requests += 1
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if not results:
            yield ToolCall("call_1", "charge", {"amount": 5})
        else:
            yield f"done: {results[0]}"


class Died(BaseException):
    """The worker's death inside a tool, as far as the loop can tell: nothing after it runs."""


def charging_agent(charges: list, *, dying: bool = False, **options) -> Agent:
    """An agent whose `charge` tool counts its charges in `charges`; with `dying`, its first call dies after it
    charged."""
    deaths = [dying]

    def charge(amount: int) -> str:
        """Charge a card."""
        charges.append(amount)
        if deaths.pop(0) if deaths else False:
            raise Died()
        return f"charged {amount}"

    return Agent(id="charging", model=TwoToolsModel(), tools=[tool(charge, **options)])


def test_a_replayed_leg_calls_neither_model_nor_tool_and_emits_no_step_event(make_context, recorder):
    charges: list = []
    agent = charging_agent(charges)
    journal = MemoryJournal()
    first = agent.run(RunRequest(message="pay"), make_context(journal=journal))
    recorder.events.clear()

    again = agent.run(RunRequest(message="pay"), make_context(journal=MemoryJournal(journal.kept)))

    assert (first.content, again.content) == ("done: charged 5", "done: charged 5")
    assert (charges, agent.model.requests) == ([5], 2)
    assert recorder.names == ["RunStarted", "RunCompleted"]


def interrupted_journal(agent: Agent, make_context) -> MemoryJournal:
    """A journal as a lost attempt leaves it: the model asked for `charge`, which started and never returned."""
    journal = MemoryJournal()
    with pytest.raises(Died):
        agent.run(RunRequest(message="pay"), make_context(journal=journal))
    assert [entry["status"] for entry in journal.kept] == [COMPLETED, STARTED]
    return MemoryJournal(journal.kept)


def test_an_unfinished_call_of_an_idempotent_tool_runs_again(make_context):
    charges: list = []
    agent = charging_agent(charges, dying=True, idempotent=True)
    journal = interrupted_journal(agent, make_context)

    result = agent.run(RunRequest(message="pay"), make_context(journal=journal))

    assert (result.content, charges) == ("done: charged 5", [5, 5])


def test_an_unfinished_call_is_reported_to_the_model_as_of_unknown_outcome(make_context, recorder):
    charges: list = []
    agent = charging_agent(charges, dying=True)
    journal = interrupted_journal(agent, make_context)
    recorder.events.clear()

    result = agent.run(RunRequest(message="pay"), make_context(journal=journal))

    unknown = OUTCOME_UNKNOWN.format(tool="charge", call_id="call_1")
    assert (result.content, charges) == (f"done: {unknown}", [5])
    assert recorder.names == ["RunStarted", "ToolCallCompleted", "RunContent", "RunCompleted"]
    assert journal.kept[1] == {"kind": "tool", "fingerprint": journal.kept[1]["fingerprint"], "status": COMPLETED,
                               "output": {"content": unknown, "outcome_unknown": True}}  # fmt: skip


def test_an_unfinished_call_of_a_tool_that_must_not_guess_fails_the_run_naming_it(make_context):
    charges: list = []
    agent = charging_agent(charges, dying=True, on_interrupt="fail")
    journal = interrupted_journal(agent, make_context)

    with pytest.raises(PermanentRunError) as failure:
        agent.run(RunRequest(message="pay"), make_context(journal=journal))

    assert str(failure.value) == INTERRUPTED_FAILS.format(tool="charge", call_id="call_1", attempt=1)
    assert charges == [5] and journal.kept[1]["status"] == "interrupted"


def test_on_interrupt_takes_report_or_fail_only():
    with pytest.raises(ValueError, match="on_interrupt must be one of"):
        tool(lambda: "x", name="x", on_interrupt="retry")


class Leading:
    """A leader that sums up its members' answers; counts its requests."""

    id, provider = "leading", "test"

    def __init__(self):
        self.requests = 0

    def stream(self, messages, tools, ctx):
        self.requests += 1
        yield " / ".join(m["content"] for m in messages if m["role"] == "assistant")


def test_a_team_replays_its_members_steps_in_order(make_context, recorder):
    charges: list = []
    first, second = charging_agent(charges), charging_agent(charges)
    first, second = (Agent(id=f"m{n}", model=m.model, tools=m.tools) for n, m in ((1, first), (2, second)))
    team = Team(id="payers", leader=Agent(id="lead", model=Leading()), members=(first, second))
    journal = MemoryJournal()
    done = team.run(RunRequest(message="pay"), make_context(journal=journal))
    recorder.events.clear()

    again = team.run(RunRequest(message="pay"), make_context(journal=MemoryJournal(journal.kept)))

    assert done.content == again.content == "done: charged 5 / done: charged 5"
    assert charges == [5, 5], "each member's tool ran once, in the first attempt"
    assert (first.model.requests, second.model.requests, team.leader.model.requests) == (2, 2, 1)
    assert [entry["kind"] for entry in journal.kept] == ["model", "tool", "model"] * 2 + ["model"]
    assert not any(name.startswith(("ToolCall", "ModelRequest")) or "Content" in name for name in recorder.names)


def test_a_call_that_failed_its_run_for_an_operator_runs_again_when_requeued(make_context):
    charges: list = []
    agent = charging_agent(charges, dying=True, on_interrupt="fail")
    journal = interrupted_journal(agent, make_context)
    with pytest.raises(PermanentRunError):
        agent.run(RunRequest(message="pay"), make_context(journal=journal))

    requeued = agent.run(RunRequest(message="pay"), make_context(journal=MemoryJournal(journal.kept)))

    assert (requeued.content, charges) == ("done: charged 5", [5, 5])
