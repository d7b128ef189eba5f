"""Prometheus metrics of the engine server, named like vLLM's (``spectune:`` instead of ``vllm:``), in a registry of
their own so several servers (or tests) in one process never share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.stats import RequestSummary, StepStats

# vLLM's buckets, so dashboards built for it read these the same way
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
               960.0, 1920.0, 7680.0)


class ServerMetrics:
    """Every metric the server exports. Observed from the stepping thread; scraped from the HTTP thread."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, w = self.registry, ["workload"]
        self.num_drafts = Counter("spectune:spec_decode_num_drafts", "Steps that proposed at least one draft token.",
                                  w, registry=r)
        self.num_draft_tokens = Counter("spectune:spec_decode_num_draft_tokens", "Draft tokens proposed.", w,
                                        registry=r)
        self.num_accepted_tokens = Counter("spectune:spec_decode_num_accepted_tokens",
                                           "Draft tokens the target agreed with.", w, registry=r)
        self.num_accepted_per_pos = Counter("spectune:spec_decode_num_accepted_tokens_per_pos",
                                            "Accepted draft tokens by position (0-based depth).",
                                            ["workload", "position"], registry=r)
        self.prompt_tokens = Counter("spectune:prompt_tokens", "Prompt tokens of admitted requests.", w, registry=r)
        self.generation_tokens = Counter("spectune:generation_tokens", "Tokens generated (accepted + bonus).", w,
                                         registry=r)
        self.request_success = Counter("spectune:request_success", "Finished requests by finish reason.",
                                       ["workload", "finished_reason"], registry=r)
        self.e2e_latency = Histogram("spectune:e2e_request_latency_seconds",
                                     "Arrival to last token of requests that were not aborted.", w,
                                     buckets=E2E_BUCKETS, registry=r)
        self.ttft = Histogram("spectune:time_to_first_token_seconds", "Arrival to first generated token.", w,
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("spectune:inter_token_latency_seconds",
                             "Time between successive token deliveries of a request (a speculative step delivering "
                             "several tokens counts once, as in vLLM).", w, buckets=ITL_BUCKETS, registry=r)
        self.running = Gauge("spectune:num_requests_running", "Requests in the running batch.", registry=r)
        self.waiting = Gauge("spectune:num_requests_waiting", "Requests waiting to be admitted.", registry=r)
        self.config_updates = Counter("spectune:spec_config_updates", "Live config changes applied.", w, registry=r)
        self.profile_source_failures = Counter("spectune:profile_source_failures",
                                               "Startup profile loads that failed; the server fell back (fail-open).",
                                               ["reason"], registry=r)

    def observe_step(self, stats: StepStats) -> None:
        w = stats.workload
        self.generation_tokens.labels(w).inc(stats.emitted_tokens)
        if not stats.speculated:
            return
        self.num_drafts.labels(w).inc()
        self.num_draft_tokens.labels(w).inc(stats.draft_tokens)
        self.num_accepted_tokens.labels(w).inc(stats.accepted_tokens)
        for position, hit in enumerate(stats.accepted_per_position):
            self.num_accepted_per_pos.labels(w, str(position)).inc(hit)

    def observe_finished(self, summary: RequestSummary, finish_reason: str, latency_s: float | None) -> None:
        self.request_success.labels(summary.workload, finish_reason).inc()
        if latency_s is not None:
            self.e2e_latency.labels(summary.workload).observe(latency_s)

    def set_queue(self, running: int, waiting: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)

    def render(self) -> bytes:
        return generate_latest(self.registry)
