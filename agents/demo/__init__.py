"""``gpuyield demo``: the whole system on one machine, around a simulated Volcano cluster.

Real parts: the embedded broker and Redis, the worker (the decider), one node
agent per simulated node, trainer processes (tiny torch models and stand-ins)
that checkpoint on SIGTERM. Simulated: the Kubernetes API server and Volcano,
whose watch events the demo publishes the way ``gpuyield watch`` would.

Empty on purpose, like ``gpuyield.agents``: the stand-in trainer runs as
``python -m gpuyield.agents.demo.standin`` and must not import the demo.
"""
