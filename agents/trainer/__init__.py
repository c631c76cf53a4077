"""The trainer SDK: a few lines in a torch training script make it yield gracefully.

```python
with GracefulTrainer(ckpt_dir, job="ns/name", heartbeat=sink, total_steps=n) as session:
    start = session.resume(model=model, optimizer=opt, scheduler=sched, data=data)
    for step in range(start, n):
        train_one_step()
        if session.step_done(step + 1):
            break  # a yield: the emergency checkpoint is saved
    sys.exit(session.finish())
```

Imports torch (the ``trainer`` extra); nothing else in gpuyield imports this package.
"""

from gpuyield.agents.trainer.checkpoint import (
    CheckpointError,
    CheckpointInfo,
    CheckpointStore,
    LoadedCheckpoint,
)
from gpuyield.agents.trainer.heartbeats import (
    HeartbeatPublisher,
    HeartbeatSink,
    JsonLinesSink,
    MemorySink,
    NullSink,
    PublisherStats,
)
from gpuyield.agents.trainer.kafka_sink import KafkaHeartbeatSink
from gpuyield.agents.trainer.session import GracefulTrainer
from gpuyield.agents.trainer.state import Stateful

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointStore",
    "GracefulTrainer",
    "HeartbeatPublisher",
    "HeartbeatSink",
    "JsonLinesSink",
    "KafkaHeartbeatSink",
    "LoadedCheckpoint",
    "MemorySink",
    "NullSink",
    "PublisherStats",
    "Stateful",
]
