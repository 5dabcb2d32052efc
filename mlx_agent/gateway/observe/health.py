"""The ``/metrics`` series of the queue, the stall watch and the per-request refusals, read from each lifecycle."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from mlx_agent.gateway.models.lifecycle import Lifecycle


def health_metrics(models: Sequence[Lifecycle]) -> Iterator[Metric]:
    """Yield queue depth, running requests, worker quiet time, wedged workers and request refusals per model."""
    depth = GaugeMetricFamily(
        "mlx_agent_queue_depth", "Requests waiting for the model's worker (a load, a slot).", labels=["model"]
    )
    running = GaugeMetricFamily(
        "mlx_agent_running_requests", "Requests the model's worker runs now, per model.", labels=["model"]
    )
    quiet = GaugeMetricFamily(
        "mlx_agent_worker_quiet_seconds",
        "Seconds since the worker last sent a running request anything (0 while none runs), per model.",
        labels=["model"],
    )
    wedged = CounterMetricFamily(
        "mlx_agent_wedged_workers", "Workers found wedged (--stall-timeout) and replaced, per model.", labels=["model"]
    )
    refusals = CounterMetricFamily(
        "mlx_agent_request_refusals",
        "Requests refused before reaching a worker, per model and reason (queue_full, insufficient_memory).",
        labels=["model", "reason"],
    )
    for model in models:
        labels = [model.name]
        depth.add_metric(labels, model.queue.waiting)
        running.add_metric(labels, model.queue.running)
        quiet.add_metric(labels, model.stall.quiet() or 0.0)
        wedged.add_metric(labels, model.stall.wedged)
        refusals.add_metric([model.name, "queue_full"], model.queue.queue_full)
        refusals.add_metric([model.name, "insufficient_memory"], model.memory_refusals)
    yield from (depth, running, quiet, wedged, refusals)
