"""``GET /metrics``: the front's counters in the Prometheus text format, written by ``prometheus_client``.

Per model: requests by endpoint and status, prompt, completion and cached prompt tokens, tool calls no parser
could read (``mlx_agent_unparsed_tool_calls_total``), time to first token and tokens/s (histograms), loads and
load seconds, evictions, open requests and streams, whether it is loaded, and admission refusals by reason.
Counts the lifecycles already keep (loads, evictions, open work) are read from them at scrape time rather than
kept twice; so are the kept prompt-cache entries quarantined, and what the worker reports of its progress
(``progress.py``): a load's fraction read, the prefills' fraction read and prefill tokens/s over the last
minute, and the worker's resident memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mlx_agent.gateway.models.progress import Progress
from mlx_agent.gateway.observe.health import health_metrics
from mlx_agent.gateway.observe.samples import Samples
from mlx_agent.kept_cache import cache_dir, quarantined_count

if TYPE_CHECKING:
    from mlx_agent.gateway.models.lifecycle import Lifecycle

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
RATE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
LOAD_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
DURATION_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class FleetCollector(Collector):
    """Reads what each model's lifecycle counts, at scrape time."""

    def __init__(self, models: Sequence[Lifecycle], progress: Progress) -> None:
        self.models = models  # the fleet's list, filled after the collector is made
        self.reported = progress  # what the workers report (``models/progress.py``)

    def collect(self) -> Iterator[Metric]:
        """Yield loads, evictions, open work and the loaded state of every model."""
        loads = CounterMetricFamily("mlx_agent_loads", "Worker loads started, per model.", labels=["model"])
        evictions = CounterMetricFamily(
            "mlx_agent_evictions", "Loaded models unloaded to make room for another, per model.", labels=["model"]
        )
        streams = GaugeMetricFamily("mlx_agent_open_streams", "Streams open now, per model.", labels=["model"])
        requests = GaugeMetricFamily(
            "mlx_agent_open_requests", "Non-streamed requests open now, per model.", labels=["model"]
        )
        loaded = GaugeMetricFamily("mlx_agent_model_loaded", "1 while the model's worker is ready.", labels=["model"])
        quarantined = GaugeMetricFamily(
            "mlx_agent_prompt_cache_quarantined",
            "Saved prompt-cache entries a worker refused to restore (damaged or not this model's), per model.",
            labels=["model"],
        )
        for model in self.models:
            labels = [model.name]
            loads.add_metric(labels, model.loads)
            evictions.add_metric(labels, model.evictions)
            streams.add_metric(labels, model.open_streams)
            requests.add_metric(labels, model.open_requests)
            loaded.add_metric(labels, 1 if model.state == "loaded" else 0)
            if (kept := cache_dir(model.model)) is not None:
                quarantined.add_metric(labels, quarantined_count(kept))
        yield from (loads, evictions, streams, requests, loaded, quarantined)
        yield from self.progress()
        yield from health_metrics(self.models)  # queue, stall and refusals (``health_metrics``)

    def progress(self) -> Iterator[Metric]:
        """Yield the load and prefill progress, the prefill rate and the worker memory of every model."""
        load = GaugeMetricFamily(
            "mlx_agent_load_progress",
            "Fraction of the weights read by a load in progress (0 when no load runs), per model.",
            labels=["model"],
        )
        prefill = GaugeMetricFamily(
            "mlx_agent_prefill_progress",
            "Fraction of the prompt tokens read by the prefills in progress (0 when none runs), per model.",
            labels=["model"],
        )
        rate = GaugeMetricFamily(
            "mlx_agent_prefill_tokens_per_second",
            "Prompt tokens the worker read per second over the last minute, per model.",
            labels=["model"],
        )
        rss = GaugeMetricFamily(
            "mlx_agent_worker_resident_bytes",
            "Resident memory of the model's worker (0 without one).",
            labels=["model"],
        )
        watcher = self.reported
        for model in self.models:
            labels = [model.name]
            live = watcher.fields(model)
            loading = live["load_progress"]
            load.add_metric(labels, (loading["fraction"] if loading is not None else None) or 0.0)
            done = sum(p["processed_tokens"] or 0 for p in live["prefill"])
            total = sum(p["prompt_tokens"] or 0 for p in live["prefill"])
            prefill.add_metric(labels, done / total if total else 0.0)
            rate.add_metric(labels, live["window"]["prefill_tokens_per_second"])
            rss.add_metric(labels, live["worker_rss_bytes"] or 0)
        yield from (load, prefill, rate, rss)


class FrontMetrics:
    """The front's registry: what requests, loads and admission add to, and the text a scrape reads."""

    def __init__(self, models: Sequence[Lifecycle]) -> None:
        self.samples = Samples()  # each model's last minute, second by second (``samples.py``)
        self.progress = Progress(self.samples)  # what the workers report (``progress.py``)
        disable_created_metrics()  # type: ignore[no-untyped-call]  # the front's own process: ``*_created`` series would double every scrape
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mlx_agent_requests", "Requests answered.", ["model", "endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("mlx_agent_prompt_tokens", "Prompt tokens read.", ["model"], registry=r)
        self.completion_tokens = Counter(
            "mlx_agent_completion_tokens", "Completion tokens written.", ["model"], registry=r
        )
        self.cached_tokens = Counter(
            "mlx_agent_cached_prompt_tokens", "Prompt tokens read from the prompt cache.", ["model"], registry=r
        )
        self.ttft = Histogram(
            "mlx_agent_time_to_first_token_seconds",
            "Seconds from a streamed request's arrival to its first token.",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.rate = Histogram(
            "mlx_agent_tokens_per_second",
            "Completion tokens per second of a stream, after its first token.",
            ["model"],
            buckets=RATE_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "mlx_agent_request_duration_seconds",
            "Seconds from a request's arrival to its last byte.",
            ["model", "endpoint"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.load_seconds = Histogram(
            "mlx_agent_load_seconds", "Seconds a worker took to load.", ["model"], buckets=LOAD_BUCKETS, registry=r
        )
        self.unparsed_tool_calls = Counter(
            "mlx_agent_unparsed_tool_calls",
            "Tool calls the model wrote that its parser could not read (returned as text, marked unparsed_tool_calls).",
            ["model"],
            registry=r,
        )
        self.refusals = Counter(
            "mlx_agent_admission_refusals", "Cold loads refused by admission.", ["model", "reason"], registry=r
        )
        r.register(FleetCollector(models, self.progress))

    def render(self) -> bytes:
        """Return the exposition text of every metric."""
        return generate_latest(self.registry)
