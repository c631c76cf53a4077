"""Pure policy state machines shared by the simulator and the streaming controller.

Each module is a small, deterministic step function over frozen values: no
clock (``now`` is an argument), no I/O. The simulator drives them in virtual
time; the Faust agents drive the same code from Kafka events.
"""
