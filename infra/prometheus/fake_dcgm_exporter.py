#!/usr/bin/env python3
"""A tiny stand-in for NVIDIA's dcgm-exporter (plus a training throughput metric), stdlib only.

Serves the Prometheus text exposition format on `GET /metrics`:

    DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-...",device="nvidia0",modelName="NVIDIA H100 80GB
        HBM3",Hostname="node2",DCGM_FI_DRIVER_VERSION="535.183.01"} 0
    DCGM_FI_DEV_GPU_TEMP{...} 41
    training_throughput_samples_per_second{job_id="42",node="node2"} 512

and lets tests change values at runtime:

    POST /set  {"metric": "DCGM_FI_DEV_XID_ERRORS", "host": "node2", "gpu": "0", "value": 79}

(`host` matches the configured host label, `gpu` the `gpu` label, `node`/`job_id` the
throughput labels; `match` may give any other labels). The answer is `{"updated": n}`; 404 when
no series matched. Run: `fake_dcgm_exporter.py --port 0 --port-file F --hosts node1,node2`.
"""

from __future__ import annotations

import argparse
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

XID = "DCGM_FI_DEV_XID_ERRORS"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
THROUGHPUT = "training_throughput_samples_per_second"
HELP = {
    XID: ("gauge", "Value of the last XID error encountered."),
    TEMP: ("gauge", "GPU temperature (in C)."),
    THROUGHPUT: ("gauge", "Training samples processed per second by the job on this node."),
}

Labels = tuple[tuple[str, str], ...]


class Metrics:
    """Series keyed by (metric, labels); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, Labels], float] = {}

    def add(self, metric: str, labels: dict[str, str], value: float) -> None:
        with self._lock:
            self._series[(metric, tuple(labels.items()))] = value

    def set(self, metric: str, match: dict[str, str], value: float) -> int:
        updated = 0
        with self._lock:
            for key in self._series:
                name, labels = key
                have = dict(labels)
                if name == metric and all(have.get(k) == v for k, v in match.items()):
                    self._series[key] = value
                    updated += 1
        return updated

    def exposition(self) -> str:
        with self._lock:
            items = sorted(self._series.items(), key=lambda kv: kv[0][0])
        lines: list[str] = []
        last = ""
        for (name, labels), value in items:
            if name != last:
                kind, text = HELP.get(name, ("gauge", name))
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
                last = name
            rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{name}{{{rendered}}} {value:g}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def build(args: argparse.Namespace) -> tuple[Metrics, dict[str, str]]:
    metrics = Metrics()
    omit = set(args.omit or [])
    hosts = [h for h in args.hosts.split(",") if h]
    for h_index, host in enumerate(hosts):
        for gpu in range(args.gpus):
            labels = {
                "gpu": str(gpu),
                "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{host}/{gpu}')}",
                "device": f"nvidia{gpu}",
                "modelName": "NVIDIA H100 80GB HBM3",
                args.host_label: host,
                "DCGM_FI_DRIVER_VERSION": "535.183.01",
            }
            if XID not in omit:
                metrics.add(XID, labels, 0)
            if TEMP not in omit:
                metrics.add(TEMP, labels, 40 + h_index + gpu)
        if THROUGHPUT not in omit and args.job_id:
            metrics.add(THROUGHPUT, {"job_id": args.job_id, "node": host}, 512.0)
    aliases = {"host": args.host_label}
    return metrics, aliases


def make_handler(metrics: Metrics, aliases: dict[str, str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, status: int, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                self._send(200, metrics.exposition(), "text/plain; version=0.0.4")
            elif self.path == "/healthz":
                self._send(200, "ok\n", "text/plain")
            else:
                self._send(404, "not found\n", "text/plain")

        def do_POST(self) -> None:
            if self.path != "/set":
                self._send(404, "not found\n", "text/plain")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                metric = str(body["metric"])
                value = float(body["value"])
                match = {str(k): str(v) for k, v in dict(body.get("match", {})).items()}
                for key in ("host", "gpu", "node", "job_id"):
                    if key in body:
                        match[aliases.get(key, key)] = str(body[key])
            except (KeyError, TypeError, ValueError) as exc:
                self._send(400, json.dumps({"error": f"bad request: {exc}"}), "application/json")
                return
            updated = metrics.set(metric, match, value)
            status = 200 if updated else 404
            self._send(status, json.dumps({"updated": updated}), "application/json")

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--port-file", help="write the bound port here once listening")
    parser.add_argument("--hosts", default="node1,node2", help="comma-separated host names")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs per host")
    parser.add_argument("--host-label", default="Hostname", help="label carrying the host name")
    parser.add_argument("--job-id", default="42", help="job id of the throughput metric")
    parser.add_argument("--omit", action="append", help="metric name not to export")
    args = parser.parse_args(argv)
    metrics, aliases = build(args)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(metrics, aliases))
    port = server.server_address[1]
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(str(port))
        tmp.replace(args.port_file)
    print(f"fake dcgm exporter listening on http://{args.host}:{port}/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
