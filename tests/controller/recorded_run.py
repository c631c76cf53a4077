"""A run of the decider recorded the way the worker records it: its inputs on their
topics, the journal of the order it took them, the decisions and commands it published."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness import Controller

from gpuyield.agents.controller.decider import INPUT_MODELS, Input, Outcome
from gpuyield.agents.controller.journal import Journal
from gpuyield.agents.controller.replay import Position, RunRecord
from gpuyield.schemas.decoding import encode
from gpuyield.schemas.messages import JobProgress

TOPIC_OF: dict[type[Input], str] = {model: topic for topic, model in INPUT_MODELS.items()}
TOPIC_OF[JobProgress] = "gpuyield.job-progress"  # a bare summary, as older workers sent one


@dataclass
class RecordingController(Controller):
    """A ``Controller`` whose inputs and outputs are kept as the topics would hold them."""

    prefix: str = ""
    journal: list[tuple[int, bytes | None]] = field(default_factory=list)
    inputs: dict[Position, bytes | None] = field(default_factory=dict)
    published_decisions: list[bytes | None] = field(default_factory=list)
    published_commands: list[bytes | None] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    writer: Journal | None = None

    def feed(self, message: Input, origin: str | None = None) -> Outcome:
        topic = self.prefix + TOPIC_OF[type(message)]
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        self.inputs[(topic, 0, offset)] = encode(message)
        if self.writer is None:
            self.writer = Journal(self.config)
        entry = self.writer.entry(topic, 0, offset, self.records, 0.0)
        self.journal.append((len(self.journal), encode(entry)))
        outcome = super().feed(message, f"{topic}/0/{offset}")
        self.published_decisions += [encode(d) for d in outcome.decisions]
        self.published_commands += [encode(c) for c in outcome.commands]
        return outcome

    def restart(self) -> None:
        """A new owner: its first entry is a start naming the table it recovered."""
        self.writer = Journal(self.config)

    def record(self) -> RunRecord:
        return RunRecord(
            journal=list(self.journal),
            inputs=dict(self.inputs),
            decisions=list(self.published_decisions),
            commands=list(self.published_commands),
            prefix=self.prefix,
        )
