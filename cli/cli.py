"""The ``gpuyield`` command: one sub-command per capability.

Every command turns bad input into exit status 2 and one line on stderr that
names what is wrong; a Python traceback reaching a user is a bug.

Commands are imported lazily. ``gpuyield --help`` and ``gpuyield plan`` must
not pay for Faust, aiokafka, the Kubernetes client or torch (seconds of
imports on a busy machine), so this module imports typer and nothing of the
commands: each lives in its own module, ``gpuyield/<name>_command.py``, as a
function ``<name>_command`` whose docstring's first line is its help line,
and is listed in ``COMMANDS`` by reference. Its module is imported only when
the command runs (or its own ``--help`` is asked for). To add a command::

    "doctor": LazyCommand("gpuyield.doctor_command:doctor_command", "<first docstring line>"),

and nothing else here: no ``import`` of the command's module, no
``app.command(...)``. ``tests/test_cli_startup.py`` checks that every help
line matches its function's docstring and that ``--help`` and ``plan``
import none of the heavy packages; ``bench/bench_startup.py`` measures it.
"""

from __future__ import annotations

import sys

import typer

from gpuyield.lazy_commands import LazyCommand, lazy_group

COMMANDS: dict[str, LazyCommand] = {
    "plan": LazyCommand(
        "gpuyield.plan_command:plan_command",
        "Plan which pods to evict so the preemptor fits (format v1, byte-identical per input).",
    ),
    "schemas": LazyCommand(
        "gpuyield.schemas_command:schemas_command",
        "Write the JSON Schema of every wire model (snapshot, plan, ...).",
    ),
    "simulate": LazyCommand(
        "gpuyield.simulate_command:simulate_command",
        "Simulate a GPU cluster under gpuyield and stock Volcano preemption, same workload.",
    ),
    "broker": LazyCommand(
        "gpuyield.broker_command:broker_command",
        "Run the embedded Tansu broker with the controller's topics until Ctrl-C or SIGTERM.",
    ),
    "topics": LazyCommand(
        "gpuyield.topics_command:topics_command",
        "List the controller's topics: key, schema, partitions, cleanup and retention.",
    ),
    "worker": LazyCommand(
        "gpuyield.worker_command:worker_command",
        "Run the controller: progress tables, the livelock guard and the eviction decider.",
    ),
    "status": LazyCommand(
        "gpuyield.status_command:status_command",
        "Show jobs with their weights and cooldowns, pending demand, and yields in flight.",
    ),
    "watch": LazyCommand(
        "gpuyield.watch_command:watch_command",
        "Watch nodes, pods and Volcano objects; publish every change to Kafka.",
    ),
    "node-agent": LazyCommand(
        "gpuyield.node_agent_command:node_agent_command",
        "Carry out yield and resume commands for one node: signal, checkpoint, release, ack.",
    ),
    "demo": LazyCommand(
        "gpuyield.demo_command:demo_command",
        "Run gpuyield end to end on this machine: a simulated Volcano cluster, real yields.",
    ),
    "archive": LazyCommand(
        "gpuyield.archive_command:archive_command",
        "Follow every gpuyield topic and write it to Parquet, until Ctrl-C or SIGTERM.",
    ),
    "audit": LazyCommand(
        "gpuyield.audit_command:audit_command",
        "Print one job's history: progress, the decisions that weighed it, its yields.",
    ),
    "replay": LazyCommand(
        "gpuyield.replay_command:replay_command",
        "Re-run the decider over the recorded inputs and compare with what it decided then.",
    ),
    "alerts": LazyCommand(
        "gpuyield.alerts_command:alerts_command",
        "Print the alert stream, or forward it to a webhook or Alertmanager.",
    ),
    "config": LazyCommand(
        "gpuyield.config_command:config_command",
        "Print the effective settings and where each came from (default, env, file:PATH).",
    ),
    "doctor": LazyCommand(
        "gpuyield.doctor_command:doctor_command",
        "Check the cluster (or a dump of it) for the mistakes that break graceful preemption.",
    ),
}
"""Every sub-command, in the order ``--help`` lists them."""

app = typer.Typer(
    name="gpuyield",
    help="Graceful, gang- and checkpoint-aware preemption for shared GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=lazy_group(COMMANDS),
)


@app.callback()
def _root() -> None:
    """Options of ``gpuyield`` itself (none yet); a callback makes typer build a group."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: usage errors are one line too, never a boxed help.

    Click's exceptions are matched by shape (``format_message``, ``exit_code``)
    rather than by class: recent typer releases vendor their own copy of click.
    """
    try:
        code = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        sys.stderr.write("gpuyield: aborted\n")
        code = 130
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            app(args=["--help"], standalone_mode=False)
            raise SystemExit(2) from None
        describe = getattr(exc, "format_message", None)
        if describe is None:
            raise
        sys.stderr.write(f"gpuyield: {describe()} (see `gpuyield --help`)\n")
        code = getattr(exc, "exit_code", 2)
    raise SystemExit(code if isinstance(code, int) else 0)
