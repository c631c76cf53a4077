"""The demo's worker: ``gpuyield worker``'s agents with the demo's compressed policy timers.

``python -m gpuyield.agents.demo.worker_process`` reads the same settings as
``gpuyield worker`` (``GPUYIELD_*``; the demo passes its embedded broker and
Redis in) and builds the same Faust app (``gpuyield.agents.worker.app``). The
demo passes its whole ``timing.demo_settings`` as variables, the policy knobs
included (``timing.demo_controller_config``: compressed, so a resume does not
wait five real minutes), and this process reads them like any worker. A
process of its own, as in a deployment: Faust wants its own event loop and
signal handling.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path

from gpuyield.agents.demo.timing import TICK_S
from gpuyield.agents.worker.app import WorkerOptions, build_app
from gpuyield.agents.worker.deadline_worker import DeadlineWorker
from gpuyield.agents.worker.view_pacing import ViewPacer
from gpuyield.streams.kafka_client import faust_app_kwargs
from gpuyield.streams.live_view_store import LiveViewWriter
from gpuyield.streams.settings import SettingsError, load_settings
from gpuyield.streams.shutdown import ShutdownDeadline


def main() -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        sys.stderr.write(f"demo worker: {exc}\n")
        return 2
    if settings.kafka_bootstrap is None or settings.redis_url is None:
        sys.stderr.write(
            "demo worker: GPUYIELD_KAFKA_BOOTSTRAP and GPUYIELD_REDIS_URL are required\n"
        )
        return 2
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    writer = LiveViewWriter(settings.redis_url, settings.cluster_id)
    app = build_app(
        WorkerOptions(
            app_kwargs=faust_app_kwargs(settings),
            topic_prefix=settings.topic_prefix,
            tick_s=TICK_S,
            heartbeat_partitions=settings.topic_partitions,
            data_dir=str(Path(settings.state_dir) / "faust"),
        ),
        settings.controller,
        publish_view=writer.publish,
        view_pacer=ViewPacer(settings.live_view_every_s, settings.live_view_max_share),
    )
    worker = DeadlineWorker(
        app,
        loglevel="info",
        quiet=True,
        redirect_stdouts=False,
        deadline=ShutdownDeadline("the demo's worker", settings.shutdown_timeout_s),
    )
    with contextlib.suppress(SystemExit):
        worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
