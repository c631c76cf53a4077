"""gpuyield: graceful, gang- and checkpoint-aware preemption for shared GPU clusters.

This package is the command line and the only composition root: it wires
the pure cores (``gpuyield.agents``) to files, terminals and, later, Kafka.
"""

__version__ = "0.1.0"
