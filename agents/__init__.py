"""gpuyield's agents: the planner and, later, the stream agents built around it.

Empty on purpose: importing ``gpuyield.agents.planner`` must not drag in any
I/O framework.
"""
