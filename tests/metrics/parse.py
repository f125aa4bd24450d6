"""Parses an exposition (stdin) with prometheus_client's parsers; prints its samples as JSON.

sbxd serves application/openmetrics-text, so the samples come from the package's strict
OpenMetrics parser (prometheus_client.openmetrics.parser.text_string_to_metric_families),
which raises on the first line out of the format. The classic Prometheus text parser
(prometheus_client.parser.text_string_to_metric_families) must read it too, for
consumers that only know that one. Prints a list of
{"family", "type", "name", "labels", "value"}.
"""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import (
    text_string_to_metric_families as classic_text_string_to_metric_families,
)

text = sys.stdin.read()
samples = []
for family in text_string_to_metric_families(text):
    for s in family.samples:
        samples.append(
            {
                "family": family.name,
                "type": family.type,
                "name": s.name,
                "labels": s.labels,
                "value": s.value,
            }
        )
classic = {s.name for f in classic_text_string_to_metric_families(text) for s in f.samples}
if classic != {s["name"] for s in samples}:
    sys.exit("the classic text parser read other samples than the OpenMetrics one")
json.dump(samples, sys.stdout)
