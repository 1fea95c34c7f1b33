"""The run loop: events and results of agents, teams, workflows, and a paused tool call continued."""

from agno.workflow.types import WorkflowMetrics

from agents_registry.context import RunRequest
from agents_registry.journal import Journal
from agents_registry.registry import registry
from agents_registry.runloop import REJECTED


def test_agent_run_emits_started_content_completed(make_context, recorder):
    result = registry.get("agent", "stub-agent").run(RunRequest(message="hi sleep=0"), make_context())

    assert (result.status, result.content) == ("completed", "echo: hi sleep=0 (history: 0 messages)")
    assert recorder.names == ["RunStarted"] + ["RunContent"] * 6 + ["RunCompleted"]
    assert "".join(fields["content"] for name, fields in recorder.events if name == "RunContent") == result.content
    assert result.messages == [
        {"role": "user", "content": "hi sleep=0"},
        {"role": "assistant", "content": "echo: hi sleep=0 (history: 0 messages)"},
    ]


def test_agent_sees_the_session_history(make_context):
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]

    result = registry.get("agent", "stub-agent").run(RunRequest(message="c sleep=0"), make_context(history))

    assert result.content == "echo: c sleep=0 (history: 2 messages)"


def test_agent_cancelled_before_answering_ends_cancelled(make_context):
    result = registry.get("agent", "stub-agent").run(
        RunRequest(message="x sleep=0"), make_context(cancelled=lambda: True)
    )

    assert result.status == "cancelled"


def test_a_teams_content_is_its_leaders_answer_and_members_speak_in_member_events(make_context, recorder):
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]

    result = registry.get("team", "stub-team").run(RunRequest(message="q sleep=0"), make_context(history))

    assert (result.status, result.content) == ("completed", "echo: q sleep=0 (history: 2 messages)")
    assert result.messages == [
        {"role": "user", "content": "q sleep=0"},
        {"role": "assistant", "content": "echo: q sleep=0 (history: 2 messages)"},
    ], "the session keeps the team's turn, not the members'"
    structural = [(name, fields.get("agent_id")) for name, fields in recorder.events if "Content" not in name]
    assert structural == [
        ("TeamRunStarted", None),
        ("RunStarted", "stub-member-1"),
        ("RunCompleted", "stub-member-1"),
        ("RunStarted", "stub-member-2"),
        ("RunCompleted", "stub-member-2"),
        ("TeamRunCompleted", None),
    ]
    team_chunks = "".join(fields["content"] for name, fields in recorder.events if name == "TeamRunContent")
    assert team_chunks == result.content
    member_chunks = [fields for name, fields in recorder.events if name == "RunContent"]
    assert {fields["agent_id"] for fields in member_chunks} == {"stub-member-1", "stub-member-2"}


def test_workflow_feeds_each_step_the_previous_output(make_context, recorder):
    result = registry.get("workflow", "stub-workflow").run(RunRequest(message="w sleep=0"), make_context())

    assert result.content == "echo: echo: w sleep=0 (history: 0 messages) (history: 0 messages)"
    metrics = WorkflowMetrics.from_dict({**result.metrics, "duration": 1.5})  # as AgentOS clients read them
    assert ([(m.step_name, m.executor_type) for m in metrics.steps.values()], metrics.duration) == (
        [("Step 1", "agent"), ("Step 2", "agent")],
        1.5,
    )
    structural = [name for name in recorder.names if name != "RunContent"]
    assert structural == [
        "WorkflowStarted",
        "StepStarted",
        "StepCompleted",
        "StepStarted",
        "StepCompleted",
        "WorkflowCompleted",
    ]


def test_tool_requiring_confirmation_pauses_then_a_confirmed_continue_runs_it(make_context, recorder):
    agent = registry.get("agent", "hitl-agent")
    paused = agent.run(RunRequest(message="delete sleep=0"), make_context())

    assert paused.status == "paused"
    assert [t["tool_name"] for t in paused.tools] == ["delete_temp_files"]
    assert paused.tools[0]["requires_confirmation"] is True and paused.tools[0]["confirmed"] is None
    name, fields = recorder.events[-1]
    assert (name, fields["tools"], fields["requirements"]) == ("RunPaused", paused.tools, paused.requirements)
    [requirement] = paused.requirements
    assert set(requirement) == {"id", "created_at", "tool_execution"}, "RunRequirement.to_dict() of a pending call"
    assert requirement["tool_execution"] == paused.tools[0]

    decided = [{**paused.tools[0], "confirmed": True}]
    recorder.events.clear()
    done = agent.run(
        RunRequest(message="delete sleep=0", run_messages=paused.messages, decided_tools=decided), make_context()
    )

    assert (done.status, done.content) == ("completed", "done: tool result received")
    structural = [name for name in recorder.names if name != "RunContent"]
    assert structural == ["RunContinued", "ToolCallStarted", "ToolCallCompleted", "RunCompleted"]
    tool_message = [m for m in done.messages if m["role"] == "tool"]
    assert tool_message[0]["content"] == "deleted temporary files in /tmp"


def test_rejected_tool_is_reported_to_the_model_and_not_run(make_context, recorder):
    agent = registry.get("agent", "hitl-agent")
    paused = agent.run(RunRequest(message="delete sleep=0"), make_context())
    decided = [{**paused.tools[0], "confirmed": False}]

    done = agent.run(
        RunRequest(message="delete sleep=0", run_messages=paused.messages, decided_tools=decided), make_context()
    )

    assert done.status == "completed"
    assert [m["content"] for m in done.messages if m["role"] == "tool"] == [REJECTED]
    assert "ToolCallStarted" not in recorder.names


def test_a_members_tool_pauses_the_team_and_the_continue_resumes_that_member(make_context, recorder):
    team = registry.get("team", "stub-team")
    paused = team.run(RunRequest(message="delete sleep=0"), make_context())

    assert (paused.status, [t["tool_name"] for t in paused.tools]) == ("paused", ["delete_temp_files"])
    assert [(name, fields.get("agent_id")) for name, fields in recorder.events if "Content" not in name] == [
        ("TeamRunStarted", None),
        ("RunStarted", "stub-member-1"),
        ("RunPaused", "stub-member-1"),
        ("TeamRunPaused", None),
    ]
    [asked] = recorder.events[-2][1]["requirements"]  # the member's
    [team_asked] = recorder.events[-1][1]["requirements"]
    assert team_asked == {**asked, "member_agent_id": "stub-member-1", "member_agent_name": "Member 1"}
    assert asked["tool_execution"] == paused.tools[0]

    recorder.events.clear()
    decided = [{**paused.tools[0], "confirmed": True}]
    done = team.run(
        RunRequest(message="delete sleep=0", run_messages=paused.messages, decided_tools=decided), make_context()
    )

    assert (done.status, done.content) == ("completed", "echo: delete sleep=0 (history: 0 messages)")
    assert [(name, fields.get("agent_id")) for name, fields in recorder.events if "Content" not in name] == [
        ("TeamRunContinued", None),
        ("RunContinued", "stub-member-1"),
        ("ToolCallStarted", "stub-member-1"),
        ("ToolCallCompleted", "stub-member-1"),
        ("RunCompleted", "stub-member-1"),
        ("RunStarted", "stub-member-2"),
        ("RunCompleted", "stub-member-2"),
        ("TeamRunCompleted", None),
    ]
    assert done.messages == [
        {"role": "user", "content": "delete sleep=0"},
        {"role": "assistant", "content": "echo: delete sleep=0 (history: 0 messages)"},
    ]


def test_a_steps_tool_pauses_the_workflow_and_the_continue_resumes_that_step(make_context, recorder):
    workflow = registry.get("workflow", "stub-workflow")
    paused = workflow.run(RunRequest(message="delete sleep=0"), make_context())

    assert paused.status == "paused"
    assert [name for name in recorder.names if name != "RunContent"] == [
        "WorkflowStarted",
        "StepStarted",
        "StepExecutorPaused",
        "WorkflowPaused",
    ]
    step = {"step_name": "Step 1", "step_index": 0, "step_id": "stub-step-1"}
    executor = {"executor_id": "stub-step-1", "executor_name": "Step 1", "executor_type": "agent"}
    step_paused, workflow_paused = recorder.events[-2][1], recorder.events[-1][1]
    [asked] = step_paused["executor_requirements"]
    assert {key: step_paused[key] for key in {**step, **executor}} == {**step, **executor}
    assert asked["tool_execution"] == paused.tools[0]
    [pending] = workflow_paused["step_requirements"]
    assert {key: pending[key] for key in step} == step
    assert (pending["requires_executor_input"], pending["executor_requirements"]) == (True, [asked])
    assert (workflow_paused["paused_step_index"], workflow_paused["pause_kind"]) == (0, "executor")

    recorder.events.clear()
    decided = [{**paused.tools[0], "confirmed": False}]
    done = workflow.run(
        RunRequest(message="delete sleep=0", run_messages=paused.messages, decided_tools=decided), make_context()
    )

    assert done.content == f"echo: not done: {REJECTED} (history: 0 messages)"
    assert (list(paused.metrics["steps"]), list(done.metrics["steps"])) == ([], ["Step 1", "Step 2"])
    assert [name for name in recorder.names if name != "RunContent"] == [
        "StepExecutorContinued",
        "StepCompleted",
        "StepStarted",
        "StepCompleted",
        "WorkflowCompleted",
    ]
    continued = recorder.events[0][1]
    assert {key: continued[key] for key in {**step, **executor}} == {**step, **executor}


class StartsJournal(Journal):
    """Counts the tool calls the loop was about to run."""

    starts = 0

    def started(self) -> None:
        self.starts += 1


def test_a_cancelled_continuation_runs_none_of_its_confirmed_tools(make_context, recorder):
    agent = registry.get("agent", "hitl-agent")
    paused = agent.run(RunRequest(message="delete sleep=0"), make_context())
    journal = StartsJournal()

    done = agent.run(
        RunRequest(
            message="delete sleep=0",
            run_messages=paused.messages,
            decided_tools=[{**paused.tools[0], "confirmed": True}],
        ),
        make_context(cancelled=lambda: True, journal=journal),
    )

    assert done.status == "cancelled"
    assert "ToolCallStarted" not in recorder.names and journal.starts == 0


def test_a_run_asked_to_stop_when_it_would_pause_ends_cancelled(make_context, recorder):
    calls = iter([False, False, True])  # not cancelled while streaming; cancelled by the time it would pause

    result = registry.get("agent", "hitl-agent").run(
        RunRequest(message="delete sleep=0"), make_context(cancelled=lambda: next(calls, True))
    )

    assert result.status == "cancelled"
    assert "RunPaused" not in recorder.names
