"""The controller's pure core: the cluster view built from watch events and
heartbeats, and the decider that turns a pending gang into yield commands.

No I/O and no clock: the Faust agents in ``gpuyield.agents.worker`` feed it
events with their times and publish what it returns.
"""
