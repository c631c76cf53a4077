"""A team's own alert subscriber: page on critical gpuyield alerts, in about 20 lines.

    python examples/subscriber.py BOOTSTRAP [TOPIC]

Reads ``gpuyield.alerts`` from the beginning with kafka-python, keeps the
critical ones, and prints one line per incident change (replace ``print``
with your pager's client). The schema is ``gpuyield.schemas.messages.Alert``
(``gpuyield schemas --out DIR`` exports it as JSON Schema).
"""

import json
import sys

from kafka import KafkaConsumer

bootstrap, topic = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "gpuyield.alerts")
consumer = KafkaConsumer(
    topic,
    bootstrap_servers=bootstrap,
    auto_offset_reset="earliest",
    consumer_timeout_ms=5000,  # stop after 5 s without news (drop this to follow forever)
)
seen = set()
for record in consumer:
    alert = json.loads(record.value)
    key = (alert["alert_id"], alert.get("state", "firing"))
    if alert["severity"] == "critical" and key not in seen:
        seen.add(key)
        print(f"PAGE {alert['kind']} {key[1]}: {alert['message']}", flush=True)
consumer.close()
