"""External attribution plugin: a second opinion over HTTP that may enrich, never block.

Resurgo POSTs a `PluginRequest` (JSON) to the configured URL and reads a `PluginResponse`:

    POST <url>                        Content-Type: application/json
    {"schema_version": 1,
     "job": {"cluster": "local", "job_id": 42, "attempt": 0, "node_list": ["node1", "node2"]},
     "anomaly": {...Anomaly...} | null,
     "lines": [{"source": "job.log", "line_no": 17, "text": "..."}, ...],   # excerpt
     "scheduler": {"job": {...JobObservation...} | null, "nodes": [...], "text": ["..."]},
     "verdict": {...Attribution...}}                                          # ours

    200 OK
    {"category": "hardware_gpu" | ... | null,     # optional; adopted only when ours is unknown
     "culprit_nodes": ["node2"],                  # added to ours (never removes any)
     "culprit_ranks": [1],
     "confidence": 0.8,                           # optional, 0..1
     "summary": "Xid 79 on node2 GPU 3",           # optional
     "evidence": [{"source": "...", "line_no": 1, "text": "..."}]}

Rules: each try is bounded by `timeout_seconds`; connection errors, timeouts, 429 and 5xx are
retried up to `retries` times with exponential backoff and jitter; the whole exchange is bounded by
`deadline_seconds`. Any failure (unreachable, slow, error status, malformed body) returns our
verdict unchanged but for a note in its summary. A usable answer sets `source="plugin"`. Added
culprits must be nodes of the job when its node list is known.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Literal

import httpx
import stamina
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from resurgo.contracts import (
    Anomaly,
    Attribution,
    Category,
    JobObservation,
    LogLine,
    NodeObservation,
)
from resurgo.errors import TransientError

ENV_URL = "RESURGO_ATTRIBUTION_PLUGIN_URL"
ENV_TIMEOUT = "RESURGO_ATTRIBUTION_PLUGIN_TIMEOUT"
MAX_LINES = 400
MAX_TEXT = 2000
MAX_EVIDENCE = 20


class PluginJob(BaseModel):
    cluster: str | None = None
    job_id: int | None = None
    attempt: int | None = None
    node_list: list[str] = Field(default_factory=list)


class PluginScheduler(BaseModel):
    job: JobObservation | None = None
    nodes: list[NodeObservation] = Field(default_factory=list)
    text: list[str] = Field(default_factory=list)


class PluginRequest(BaseModel):
    """What Resurgo sends (schema_version 1)."""

    schema_version: Literal[1] = 1
    job: PluginJob = Field(default_factory=PluginJob)
    anomaly: Anomaly | None = None
    lines: list[LogLine] = Field(default_factory=list)
    scheduler: PluginScheduler = Field(default_factory=PluginScheduler)
    verdict: Attribution


class PluginResponse(BaseModel):
    """What the plugin answers; unknown fields are ignored, wrong types are an error."""

    model_config = ConfigDict(extra="ignore")

    category: Category | None = None
    culprit_nodes: list[str] = Field(default_factory=list, max_length=10_000)
    culprit_ranks: list[int] = Field(default_factory=list, max_length=100_000)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    summary: str | None = Field(default=None, max_length=10_000)
    evidence: list[LogLine] = Field(default_factory=list, max_length=1000)


class PluginConfig(BaseModel):
    url: str
    timeout_seconds: float = Field(default=5.0, gt=0)
    retries: int = Field(default=2, ge=0, le=10)
    backoff_seconds: float = Field(default=0.25, ge=0)
    deadline_seconds: float = Field(default=15.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginConfig | None:
        env = os.environ if environ is None else environ
        url = env.get(ENV_URL, "").strip()
        if not url:
            return None
        timeout = env.get(ENV_TIMEOUT, "").strip()
        try:
            return cls(url=url, **({"timeout_seconds": float(timeout)} if timeout else {}))
        except (ValueError, ValidationError):
            return cls(url=url)


class PluginFailed(TransientError):
    """The plugin gave no usable answer (the message says why)."""


class _TryAgain(Exception):
    """A try the plugin may answer next time (no connection, timeout, 429, 5xx)."""


def request_for(
    verdict: Attribution,
    *,
    job_lines: list[LogLine],
    scheduler_lines: list[LogLine] | None = None,
    anomaly: Anomaly | None = None,
    observation: JobObservation | None = None,
    nodes: list[NodeObservation] | None = None,
    cluster: str | None = None,
    job_id: int | None = None,
    attempt: int | None = None,
    node_list: list[str] | None = None,
) -> PluginRequest:
    """The request body: our verdict, its evidence and the tail of the job's output."""
    wanted = {(e.source, e.line_no) for e in verdict.evidence}
    picked = [e for e in job_lines if (e.source, e.line_no) in wanted]
    tail = job_lines[-(MAX_LINES - len(picked)) :] if len(picked) < MAX_LINES else []
    seen: set[tuple[str, int]] = set()
    excerpt: list[LogLine] = []
    for line in [*verdict.evidence, *picked, *tail]:
        key = (line.source, line.line_no)
        if key not in seen:
            seen.add(key)
            excerpt.append(line.model_copy(update={"text": line.text[:MAX_TEXT]}))
    excerpt.sort(key=lambda e: (e.source != "job.log", e.source, e.line_no))
    obs = observation
    return PluginRequest(
        job=PluginJob(
            cluster=cluster,
            job_id=job_id if job_id is not None else (obs.job_id if obs else None),
            attempt=attempt,
            node_list=list(node_list or (obs.node_list if obs else [])),
        ),
        anomaly=anomaly,
        lines=excerpt[: MAX_LINES + MAX_EVIDENCE],
        scheduler=PluginScheduler(
            job=obs,
            nodes=list(nodes or []),
            text=[e.text[:MAX_TEXT] for e in (scheduler_lines or [])[:MAX_LINES]],
        ),
        verdict=verdict,
    )


async def ask(
    request: PluginRequest, config: PluginConfig, client: httpx.AsyncClient | None = None
) -> PluginResponse:
    """One bounded exchange with retries; raises PluginFailed."""
    body = request.model_dump(mode="json")

    async def once(http: httpx.AsyncClient) -> PluginResponse:
        try:
            response = await http.post(
                config.url, json=body, headers=config.headers, timeout=config.timeout_seconds
            )
        except httpx.TimeoutException:
            raise _TryAgain(f"timed out after {config.timeout_seconds:g}s") from None
        except httpx.HTTPError as exc:
            raise _TryAgain(f"{type(exc).__name__}: {exc}") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise _TryAgain(f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise PluginFailed(f"HTTP {response.status_code}")
        try:
            return PluginResponse.model_validate_json(response.content)
        except ValidationError as exc:
            errors = exc.errors()
            where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
            raise PluginFailed(f"malformed answer ({where or 'body'})") from exc

    async def attempt(http: httpx.AsyncClient) -> PluginResponse:
        # Exponential backoff with jitter (stamina), so that the attributions of many jobs
        # failing at once do not retry a struggling plugin in step. Only _TryAgain is retried:
        # a 4xx or a malformed answer will not get better.
        try:
            async for try_ in stamina.retry_context(
                on=_TryAgain,
                attempts=config.retries + 1,
                timeout=None,  # deadline_seconds bounds the whole exchange (below)
                wait_initial=config.backoff_seconds,
                wait_max=max(config.backoff_seconds * 2**config.retries, 0.0),
                wait_jitter=config.backoff_seconds,
            ):
                with try_:
                    return await once(http)
        except _TryAgain as exc:
            raise PluginFailed(str(exc)) from None
        raise PluginFailed("no attempt")  # pragma: no cover: attempts >= 1

    async def run() -> PluginResponse:
        if client is not None:
            return await attempt(client)
        async with httpx.AsyncClient(follow_redirects=False) as http:
            return await attempt(http)

    try:
        return await asyncio.wait_for(run(), timeout=config.deadline_seconds)
    except TimeoutError:
        raise PluginFailed(f"no answer within {config.deadline_seconds:g}s") from None


def merge(verdict: Attribution, answer: PluginResponse, node_list: list[str]) -> Attribution:
    """Enrich our verdict with the plugin's: culprits are added, never removed."""
    allowed = set(node_list)
    extra = [n for n in answer.culprit_nodes if n and (not allowed or n in allowed)]
    update: dict[str, object] = {
        "culprit_nodes": sorted(set(verdict.culprit_nodes) | set(extra)),
        "culprit_ranks": sorted(set(verdict.culprit_ranks) | set(answer.culprit_ranks)),
        "source": "plugin",
    }
    notes = []
    if (
        answer.category is not None
        and answer.category not in (Category.NONE, verdict.category)
        and verdict.category == Category.UNKNOWN
    ):
        update["category"] = answer.category
        if answer.confidence is not None:
            update["confidence"] = answer.confidence
        notes.append(f"category {answer.category.value}")
    if extra:
        notes.append(f"culprits {', '.join(extra)}")
    if answer.summary:
        notes.append(answer.summary[:300])
    if notes:
        update["summary"] = f"{verdict.summary} [plugin: {'; '.join(notes)}]"[:2000]
    evidence = [*verdict.evidence]
    keys = {(e.source, e.line_no) for e in evidence}
    for line in answer.evidence:
        if len(evidence) >= MAX_EVIDENCE:
            break
        if (line.source, line.line_no) not in keys:
            evidence.append(line.model_copy(update={"text": line.text[:MAX_TEXT]}))
    update["evidence"] = evidence
    return verdict.model_copy(update=update)


def with_note(verdict: Attribution, note: str) -> Attribution:
    return verdict.model_copy(
        update={"summary": f"{verdict.summary} [plugin unavailable: {note}]"[:2000]}
    )


async def enrich(
    verdict: Attribution,
    request: PluginRequest,
    config: PluginConfig | None,
    client: httpx.AsyncClient | None = None,
) -> Attribution:
    """Our verdict, enriched by the plugin if it answers usefully in time; never raises."""
    if config is None:
        return verdict
    try:
        answer = await ask(request, config, client)
    except PluginFailed as exc:
        return with_note(verdict, str(exc))
    except Exception as exc:  # never let the plugin break attribution
        return with_note(verdict, f"{type(exc).__name__}: {exc}")
    return merge(verdict, answer, request.job.node_list)


def enrich_sync(
    verdict: Attribution, request: PluginRequest, config: PluginConfig | None
) -> Attribution:
    """`enrich` for synchronous callers (the CLI)."""
    return asyncio.run(enrich(verdict, request, config))


async def enrich_live(
    verdict: Attribution,
    *,
    anomaly: Anomaly | None,
    lines: list[LogLine],
    obs: JobObservation | None,
    nodes: list[NodeObservation],
    node_list: list[str],
    cluster: str | None = None,
    job_id: int | None = None,
    config: PluginConfig | None = None,
) -> Attribution:
    """The attribute activity's hook: consult the plugin configured in the environment
    (`RESURGO_ATTRIBUTION_PLUGIN_URL`, optional `RESURGO_ATTRIBUTION_PLUGIN_TIMEOUT`), if any."""
    config = config or PluginConfig.from_env()
    if config is None:
        return verdict
    request = request_for(
        verdict, job_lines=lines, anomaly=anomaly, observation=obs, nodes=nodes,
        cluster=cluster, job_id=job_id, attempt=anomaly.attempt if anomaly else None,
        node_list=node_list,
    )  # fmt: skip
    return await enrich(verdict, request, config)
