"""Prometheus metrics and /health, served when ``metrics.listener`` is set (off by default).

``counters``: plain-int counters and fixed-bucket histograms bumped on the request path;
``render``: the text exposition, with gauges read from the broker at scrape time;
``http``: the listener; ``process``: process_* series and the event-loop lag probe.
"""
from pybroker.metrics.counters import BrokerMetrics, Histogram

__all__ = ["BrokerMetrics", "Histogram"]
