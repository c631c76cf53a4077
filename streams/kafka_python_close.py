"""Closing a kafka-python consumer without racing its IO thread.

kafka-python 3 drives its network on a daemon IO thread that the consumer
starts, but ``KafkaConsumer.close()`` closes the connections from the calling
thread while that thread is still running. When a broker's answer lands as
the consumer closes (a fetch in flight is answered after ``fetch_max_wait_ms``,
500 ms, just as a ``poll(timeout_ms=500)`` loop sees its stop flag), the IO
thread can be between ``select()`` and ``recv()`` when ``close()`` sets the
transport's socket to None: it then logs "Error receiving network data" with
an AttributeError traceback. Nothing is lost, but a process that stops cleanly
prints a traceback, and a loaded machine makes it likely (``gpuyield alerts``
did so in about half of the test suite's runs).

Stopping the IO thread first (``NetworkSelector.stop()`` finishes the round it
is in and joins the thread) leaves one thread, the caller's, to close the
connections: the library then runs what is left of the loop on the caller's
thread, as it does for a client that never started one.
"""

from __future__ import annotations

from typing import Any


def close_consumer(consumer: Any) -> None:
    """Stop ``consumer``'s IO thread, then close it (a ``kafka.KafkaConsumer``).

    Call it from the thread that polls the consumer, like ``close()``. A
    consumer without an IO thread (another kafka-python) is just closed.
    """
    net = getattr(consumer, "_net", None)
    stop = getattr(net, "stop", None)
    if callable(stop):
        stop()
    consumer.close()
