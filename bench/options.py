"""The options of `python manage.py bench` (bench/management/commands/bench.py) and its scenarios' names."""

SCENARIOS = (
    "footprint",
    "accept",
    "drain",
    "streamed",
    "replicas",
    "handoff",
    "growth",
    "backlog",
    "order",
    "seed",
    "stream",
    "hitl",
    "ops",
    "journal",
    "agno",
    "fair",
    "inflight",
)


def add_options(parser) -> None:
    """The options of `manage.py bench`: which scenarios, against what, how big."""
    parser.add_argument("--url", default="http://127.0.0.1:7777")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scenario", choices=SCENARIOS, action="append", help="default: all of them")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--runs", type=int, default=2000, help="drain size")
    parser.add_argument("--sessions", type=int, default=200, help="sessions the drain spreads over")
    parser.add_argument("--backlog", type=int, default=100_000, help="tickets blocked behind paused heads")
    parser.add_argument(
        "--unordered-url", help="a second server started with AGENTOS_QUEUE_PER_SESSION=false (scenario order)"
    )
    parser.add_argument("--replica-url", help="a second web replica of the same deployment (scenario stream)")
    parser.add_argument("--events", type=int, default=1000, help="events the stream scenario publishes")
    parser.add_argument("--tickets", type=int, default=100_000, help="tickets in the table (scenario ops)")
    parser.add_argument("--growth-runs", type=int, default=1000, help="runs of the one session (scenario growth)")
    parser.add_argument(
        "--growth-agent", default="windowed-agent", help="the agent of scenario growth (AGENTOS_BENCH_AGENTS)"
    )
    parser.add_argument("--no-floor", action="store_true", help="scenario accept without the floor server")
    parser.add_argument(
        "--model-port", type=int, default=7792, help="the fake model's port (scenario journal; bench/tooled.py)"
    )
    parser.add_argument("--big", type=int, default=1000, help="the big user's runs (scenario fair)")
    parser.add_argument("--small-users", type=int, default=50, help="users with a few runs each (scenario fair)")
    parser.add_argument("--per-small", type=int, default=2, help="runs of each small user (scenario fair)")
    parser.add_argument(
        "--mix-sleep", type=float, default=0.2, help="seconds each run of the fair mix waits on its model"
    )
    parser.add_argument("--inflight-runs", type=int, default=1000, help="runs in flight at once (scenario inflight)")
    parser.add_argument(
        "--streamed-rate", type=float, default=150, help="runs/s of the paced drains (scenario streamed; 0: none)"
    )
    parser.add_argument(
        "--inflight-sleep", type=float, default=3.0, help="seconds each in-flight run waits on its model"
    )
