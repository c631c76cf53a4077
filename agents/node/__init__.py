"""``gpuyield node-agent``: carries out yield commands on one node, once each.

A yield turns a kill into a checkpoint: signal the training pods, wait for the
trainer's emergency checkpoint (reported in its heartbeats) or its exit, kill
at the deadline, suspend the Volcano Job, and ack on ``gpuyield.yield-acks``.

Modules, from the pure core outwards:

- ``handling``: the rules (stale commands, checkpoint detection, when to kill,
  lost GPU-seconds, the ack), pure functions of observations and ``now``;
- ``records``, ``ledger``: each command's record in Redis, claimed once, moved
  through its phases, so redeliveries run nothing twice and a restart finishes
  what was in flight;
- ``progress``, ``heartbeat_feed``: what the heartbeats say per job;
- ``signalling`` (the ``Signaller`` protocol) with ``local_signaller``,
  ``hostpid`` (+ ``procfs``) and ``kube_signaller``; ``suspenders`` (the
  ``JobSuspender`` protocol) with ``volcano``; ``gpus``;
- ``executor``: one command from its record to its ack; ``agent``: intake
  (decode, dead letters, claim, dispatch); ``service``: the Kafka wiring.
"""
