"""The Helm chart (infra/helm/resurgo), linted and rendered offline by Helm's own engine.

`helm-python-sdk` binds Helm v4's Go SDK (libhelm_c, shipped in the wheel): `lint` and
`Chart.render` are `helm lint` / `helm template` without a cluster. The rendered manifests are
checked object by object, and the generated resurgo.toml is loaded by Resurgo's own config model.
"""

from __future__ import annotations

import base64
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from resurgo.config import ResurgoConfig

helm = pytest.importorskip(
    "helm_python", reason="helm-python-sdk (Helm's engine for Python) is not installed"
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "infra" / "helm" / "resurgo"
VALUES_FILES = ["values.yaml", "values-production.yaml", "values-ssh.yaml"]
RELEASE = "rsg"
WARNING = 2

pytestmark = pytest.mark.timeout(120)


def values_of(name: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / name).read_text()) or {}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=RELEASE, namespace="resurgo", is_install=True)
    docs = []
    for path, text in manifests.items():
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def notes(values: dict[str, Any]) -> str:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=RELEASE, namespace="resurgo", is_install=True)
    return next(t for p, t in manifests.items() if p.endswith("NOTES.txt"))


def kinds(docs: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d["metadata"]["name"])
    return out


def workloads(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))


def by_name(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name}; have {kinds(docs)}")


def pod_of(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def config_toml(docs: list[dict[str, Any]]) -> str:
    return by_name(docs, "ConfigMap", f"{RELEASE}-resurgo-config")["data"]["resurgo.toml"]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render(values_of(name)) for name in VALUES_FILES}


# ------------------------------------------------------------------ lint


@pytest.mark.parametrize("values_file", VALUES_FILES)
def test_lint_is_clean(values_file: str) -> None:
    report = helm.lint(str(CHART), values_of(values_file), strict=True, namespace="resurgo")
    assert report["errors"] == [], report
    problems = [m for m in report["messages"] if m["severity"] >= WARNING]
    assert problems == [], problems
    assert report["total_charts_linted"] == 1


# ------------------------------------------------------------------ what gets rendered


def test_quickstart_kinds(rendered: dict[str, list[dict[str, Any]]]) -> None:
    k = kinds(rendered["values.yaml"])
    assert sorted(k["Deployment"]) == sorted(
        f"{RELEASE}-resurgo-{c}"
        for c in ("worker", "api", "temporal", "controller-local", "watchdog-local")
    )
    assert k["StatefulSet"] == [f"{RELEASE}-mysql"]
    assert sorted(k["Service"]) == sorted(
        [f"{RELEASE}-resurgo-api", f"{RELEASE}-resurgo-temporal", f"{RELEASE}-mysql"]
    )
    assert k["ConfigMap"] == [f"{RELEASE}-resurgo-config"]
    assert k["Secret"] == [f"{RELEASE}-mysql"]  # generated MySQL passwords, quick start only
    assert k["ServiceAccount"] == [f"{RELEASE}-resurgo"]


def test_production_uses_external_temporal_and_mysql(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["values-production.yaml"]
    k = kinds(docs)
    assert "StatefulSet" not in k and "Secret" not in k
    assert f"{RELEASE}-resurgo-temporal" not in k["Deployment"]
    assert sorted(k["Deployment"]) == sorted(
        f"{RELEASE}-resurgo-{c}" for c in ("worker", "api", "controller-prod-a", "watchdog-prod-a")
    )
    cfg = tomllib.loads(config_toml(docs))
    prod = values_of("values-production.yaml")
    assert cfg["temporal"] == {
        "address": prod["temporal"]["address"], "namespace": prod["temporal"]["namespace"]
    }  # fmt: skip
    worker = by_name(docs, "Deployment", f"{RELEASE}-resurgo-worker")
    external = prod["audit"]["external"]
    assert audit_url_source(worker) == (external["existingSecret"], external["urlKey"])


@pytest.mark.parametrize("values_file", VALUES_FILES)
def test_config_toml_is_a_valid_resurgo_config(
    values_file: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    docs = rendered[values_file]
    raw = tomllib.loads(config_toml(docs))
    cfg = ResurgoConfig.model_validate(raw)
    clusters = deep_merge(values_of("values.yaml"), values_of(values_file))["clusters"]
    assert sorted(cfg.clusters) == sorted(c["name"] for c in clusters)
    for c in clusters:
        settings = cfg.cluster(c["name"])
        assert settings.mode == c.get("mode", "local")
        # Observe first: no shipped values file acknowledges scheduler actions.
        assert settings.acknowledge_scheduler_actions is False
        assert settings.partitions == c.get("partitions", [])
    assert cfg.audit.url is None  # the password never reaches the ConfigMap
    assert "password" not in config_toml(docs).lower()


# ------------------------------------------------------------------ images, probes, resources


@pytest.mark.parametrize("values_file", VALUES_FILES)
def test_images_pinned_probes_resources_non_root(
    values_file: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    for w in workloads(rendered[values_file]):
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, w["metadata"]["name"]
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            where = f"{w['metadata']['name']}/{c['name']}"
            image = c["image"]
            repo, _, tag = image.rpartition(":")
            assert repo and tag and "/" not in tag and tag != "latest", f"{where}: {image}"
            assert "readinessProbe" in c and "livenessProbe" in c, where
            assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"], where
            assert c["resources"]["limits"]["memory"], where
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, where


def test_probes_are_the_real_health_checks(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["values.yaml"]

    def container(name: str) -> dict[str, Any]:
        return pod_of(by_name(docs, "Deployment", f"{RELEASE}-resurgo-{name}"))["containers"][0]

    assert container("worker")["readinessProbe"]["exec"]["command"][-2:] == ["pollers", "resurgo"]
    assert container("controller-local")["readinessProbe"]["exec"]["command"][-2:] == [
        "pollers", "slurm.local",
    ]  # fmt: skip
    assert container("api")["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container("api")["livenessProbe"]["httpGet"]["path"] == "/healthz"
    script = REPO / "infra" / "docker" / "healthcheck.py"
    assert container("worker")["readinessProbe"]["exec"]["command"][1] == (
        "/opt/resurgo/" + str(script.relative_to(REPO))
    )
    assert container("temporal")["readinessProbe"]["exec"]["command"][:4] == [
        "temporal", "operator", "cluster", "health",
    ]  # fmt: skip


# ------------------------------------------------------------------ secrets referenced, not inline


def _secret_refs(doc: dict[str, Any]) -> set[str]:
    pod = doc["spec"]["template"]["spec"]
    refs = {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    for c in pod["containers"]:
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add(ref["name"])
    return refs


def audit_url_source(doc: dict[str, Any]) -> tuple[str, str]:
    """(Secret, key) behind the file RESURGO_AUDIT__URL_FILE names in a pod: the env var, a
    read-only mount above that path and a Secret volume item landing exactly on it."""
    pod, container = pod_of(doc), pod_of(doc)["containers"][0]
    env = env_of(container)
    assert not [k for k in env if k.startswith("RESURGO_MYSQL_")], doc["metadata"]["name"]
    url_file = env["RESURGO_AUDIT__URL_FILE"]
    mount = next(m for m in container["volumeMounts"] if url_file.startswith(m["mountPath"] + "/"))
    assert mount.get("readOnly"), mount
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])["secret"]
    rel = url_file[len(mount["mountPath"]) + 1 :]
    (item,) = [i for i in volume["items"] if i["path"] == rel]
    return volume["secretName"], item["key"]


@pytest.mark.parametrize("values_file", VALUES_FILES)
def test_every_resurgo_pod_reads_the_audit_url_from_a_secret_file(
    values_file: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    values = deep_merge(values_of("values.yaml"), values_of(values_file))
    docs = rendered[values_file]
    if values["mysql"]["enabled"]:
        expected = (f"{RELEASE}-mysql", "url")
    else:
        external = values["audit"]["external"]
        expected = (external["existingSecret"], external["urlKey"])
    pods = [w for w in workloads(docs) if "RESURGO_CONFIG" in env_of(pod_of(w)["containers"][0])]
    names = {w["metadata"]["name"].removeprefix(f"{RELEASE}-resurgo-") for w in pods}
    assert {"worker", "api"} <= names and any(n.startswith("controller-") for n in names)
    assert any(n.startswith("watchdog-") for n in names)
    for w in pods:
        assert audit_url_source(w) == expected, w["metadata"]["name"]


@pytest.mark.parametrize("values_file", ["values-production.yaml", "values-ssh.yaml"])
def test_existing_secrets_are_referenced_never_inlined(
    values_file: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    values = deep_merge(values_of("values.yaml"), values_of(values_file))
    docs = rendered[values_file]
    expected = {values["api"]["tokens"]["existingSecret"]}
    for c in values["clusters"]:
        access = c["slurm"] if c.get("mode", "local") == "local" else c["ssh"]
        expected.add(access["existingSecret"])
    if not values["mysql"]["enabled"]:
        expected.add(values["audit"]["external"]["existingSecret"])
        assert "Secret" not in kinds(docs)
    refs = set().union(*(_secret_refs(w) for w in workloads(docs)))
    assert expected <= refs, (expected, refs)
    for w in workloads(docs):
        for c in w["spec"]["template"]["spec"]["containers"]:
            for e in c.get("env", []):
                assert "PASSWORD" not in e["name"] or e["name"].endswith("_FILE"), e
                assert "://" not in str(e.get("value", "")) or "@" not in str(e.get("value")), e


def test_bundled_mysql_secret_is_generated_and_used(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["values.yaml"]
    secret = by_name(docs, "Secret", f"{RELEASE}-mysql")
    for key in ("mysql-password", "mysql-root-password"):
        assert len(base64.b64decode(secret["data"][key])) >= 24
    mysql = by_name(docs, "StatefulSet", f"{RELEASE}-mysql")
    assert _secret_refs(mysql) == {f"{RELEASE}-mysql"}
    env = env_of(pod_of(mysql)["containers"][0])
    assert env["MYSQL_PASSWORD_FILE"].startswith("/var/run/secrets/")
    worker = by_name(docs, "Deployment", f"{RELEASE}-resurgo-worker")
    assert audit_url_source(worker) == (f"{RELEASE}-mysql", "url")
    # The URL the pods read reaches the bundled MySQL with the password MySQL is given.
    url = make_url(base64.b64decode(secret["data"]["url"]).decode())
    mysql_values = values_of("values.yaml")["mysql"]["auth"]
    assert (url.drivername, url.host, url.port) == ("mysql+pymysql", f"{RELEASE}-mysql", 3306)
    assert (url.username, url.database) == (mysql_values["username"], mysql_values["database"])
    assert url.password == base64.b64decode(secret["data"]["mysql-password"]).decode()
    service = by_name(docs, "Service", f"{RELEASE}-mysql")
    assert [p["port"] for p in service["spec"]["ports"]] == [url.port]


def test_bundled_mysql_url_quotes_the_user_and_follows_the_values() -> None:
    user, database = "ops@audit: x+y/z", "resurgo_audit"
    docs = render({"mysql": {"auth": {"username": user, "database": database}}})
    secret = by_name(docs, "Secret", f"{RELEASE}-mysql")
    url = make_url(base64.b64decode(secret["data"]["url"]).decode())
    assert (url.username, url.host, url.database) == (user, f"{RELEASE}-mysql", database)
    assert url.password == base64.b64decode(secret["data"]["mysql-password"]).decode()
    ported = render({"mysql": {"service": {"port": 3307}}})
    ported_secret = by_name(ported, "Secret", f"{RELEASE}-mysql")
    url = make_url(base64.b64decode(ported_secret["data"]["url"]).decode())
    assert url.port == 3307


def test_bundled_mysql_with_existing_secret_renders_no_secret() -> None:
    docs = render({"mysql": {"auth": {"existingSecret": "my-mysql"}}})
    assert "Secret" not in kinds(docs)
    assert _secret_refs(by_name(docs, "StatefulSet", f"{RELEASE}-mysql")) == {"my-mysql"}
    worker = by_name(docs, "Deployment", f"{RELEASE}-resurgo-worker")
    assert audit_url_source(worker) == ("my-mysql", "url")


def test_external_audit_secret_and_url_key_come_from_values() -> None:
    external = {"existingSecret": "managed-db", "urlKey": "audit-url"}
    docs = render({"mysql": {"enabled": False}, "audit": {"external": external}})
    assert "Secret" not in kinds(docs) and "StatefulSet" not in kinds(docs)
    pods = [w for w in workloads(docs) if "RESURGO_CONFIG" in env_of(pod_of(w)["containers"][0])]
    assert len(pods) >= 4  # worker, api, a controller and a watchdog
    for w in pods:
        assert audit_url_source(w) == ("managed-db", "audit-url"), w["metadata"]["name"]


# ------------------------------------------------------------------ values drive the manifests


def test_replicas_come_from_values() -> None:
    docs = render(
        {
            "worker": {"replicas": 5},
            "api": {"replicas": 3},
            "clusters": [
                {"name": "local", "slurm": {"existingSecret": "s"}, "controller": {"replicas": 2}}
            ],
        }
    )
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in workloads(docs)}
    assert replicas[f"{RELEASE}-resurgo-worker"] == 5
    assert replicas[f"{RELEASE}-resurgo-api"] == 3
    assert replicas[f"{RELEASE}-resurgo-controller-local"] == 2
    assert replicas[f"{RELEASE}-resurgo-watchdog-local"] == 1


def test_in_cluster_mode_mounts_munge_key_and_slurm_conf(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["values-production.yaml"]
    for component in ("controller", "watchdog"):
        d = by_name(docs, "Deployment", f"{RELEASE}-resurgo-{component}-prod-a")
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        assert c["image"].startswith("registry.example.com/resurgo/resurgo-controller:")
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["RESURGO_MUNGE_KEY_FILE"] == "/etc/resurgo/slurm/prod_a/munge.key"
        assert env["SLURM_CONF"] == "/etc/resurgo/slurm/prod_a/slurm.conf"
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts["slurm"] == "/etc/resurgo/slurm/prod_a"
        assert mounts["scratch"] == "/lustre/scratch"  # the jobs' output files
        slurm = next(v for v in pod["volumes"] if v["name"] == "slurm")
        assert slurm["secret"]["secretName"] == "resurgo-slurm-prod-a"
        assert {i["path"] for i in slurm["secret"]["items"]} == {"munge.key", "slurm.conf"}
    cfg = ResurgoConfig.model_validate(tomllib.loads(config_toml(docs)))
    assert cfg.cluster("prod_a").slurm_conf == "/etc/resurgo/slurm/prod_a/slurm.conf"
    assert cfg.cluster("prod_a").partitions == ["canary"]


def test_ssh_mode_mounts_the_key_secret(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["values-ssh.yaml"]
    cfg = ResurgoConfig.model_validate(tomllib.loads(config_toml(docs)))
    hpc = cfg.cluster("hpc")
    assert hpc.mode == "ssh" and hpc.ssh is not None
    assert hpc.ssh.host == "login1.cluster.example"
    for component in ("controller", "watchdog"):
        d = by_name(docs, "Deployment", f"{RELEASE}-resurgo-{component}-hpc")
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        assert c["image"] == "resurgo:0.1.0"  # no Slurm client needed in SSH mode
        ssh = next(v for v in pod["volumes"] if v["name"] == "ssh")
        assert ssh["secret"]["secretName"] == "resurgo-ssh-hpc"
        assert ssh["secret"]["defaultMode"] == 0o440
        mount = next(m for m in c["volumeMounts"] if m["name"] == "ssh")
        assert mount["readOnly"] is True
        files = {f"{mount['mountPath']}/{i['path']}" for i in ssh["secret"]["items"]}
        assert set(hpc.ssh.client_keys) <= files
        assert hpc.ssh.known_hosts in files
        assert hpc.ssh.max_sessions == 8
        env = {e["name"] for e in c["env"]}
        assert "RESURGO_MUNGE_KEY_FILE" not in env
        assert "slurm" not in {v["name"] for v in pod["volumes"]}


def test_production_guide_registers_every_search_attribute() -> None:
    from resurgo.workflows.search_attributes import ALL_KEYS

    guide = (REPO / "docs" / "production.md").read_text()
    types = {"KEYWORD": "Keyword", "INT": "Int", "BOOL": "Bool"}
    for key in ALL_KEYS:
        assert f"{key.name}:{types[key.indexed_value_type.name]}" in guide, key.name
    assert "temporal operator search-attribute create" in guide


def test_watchdog_acts_fail_open_and_records_where_it_can_write(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    d = by_name(rendered["values.yaml"], "Deployment", f"{RELEASE}-resurgo-watchdog-local")
    c = d["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][:3] == ["watchdog", "--cluster", "local"] and "--act" in c["args"]
    record = c["args"][c["args"].index("--record") + 1]
    assert any(record.startswith(m["mountPath"] + "/") for m in c["volumeMounts"])
    off = render({"clusterDefaults": {"watchdog": {"act": False}}})
    c = pod_of(by_name(off, "Deployment", f"{RELEASE}-resurgo-watchdog-local"))["containers"][0]
    assert "--act" not in c["args"]


def test_api_gets_tokens_from_a_secret(rendered: dict[str, list[dict[str, Any]]]) -> None:
    d = by_name(rendered["values.yaml"], "Deployment", f"{RELEASE}-resurgo-api")
    c = d["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][:5] == ["api", "--host", "0.0.0.0", "--port", "8000"]
    tokens = c["args"][c["args"].index("--tokens-file") + 1]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "api-tokens")
    assert tokens.startswith(mount["mountPath"] + "/")
    assert "--insecure" not in c["args"]


def test_action_mode_is_an_explicit_value() -> None:
    docs = render(
        {"clusters": [{"name": "local", "slurm": {"existingSecret": "s"},
                       "acknowledgeSchedulerActions": True, "partitions": ["canary"]}]}
    )  # fmt: skip
    cfg = ResurgoConfig.model_validate(tomllib.loads(config_toml(docs)))
    assert cfg.cluster("local").acknowledge_scheduler_actions is True
    assert "ACTION mode acknowledged" in notes(
        {"clusters": [{"name": "local", "slurm": {"existingSecret": "s"},
                       "acknowledgeSchedulerActions": True}]}
    )  # fmt: skip


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"image": {"tag": "latest"}}, "pin a tag"),
        ({"mysql": {"enabled": False}}, "audit.external.existingSecret"),
        # Values of the chart before the URL Secret: refused with the upgrade steps.
        (
            {"mysql": {"enabled": False}, "audit": {"external": {"host": "db"}}},
            "audit.external.host is no longer read.*whole audit URL",
        ),
        (
            {
                "mysql": {"enabled": False},
                "audit": {"external": {"existingSecret": "s", "passwordKey": "mysql-password"}},
            },
            "audit.external.passwordKey is no longer read.*audit.external.urlKey",
        ),
        ({"audit": {"external": {"urlKey": ""}}}, "/audit/external/urlKey"),
        ({"audit": {"external": {"urlkey": "url"}}}, "'urlkey' not allowed"),
        ({"audit": {"url": "mysql://u:p@h/d"}}, "'url' not allowed"),  # never a URL in values
        ({"temporalDev": {"enabled": False}}, "temporal.address is required"),
        ({"clusters": [{"name": "local"}]}, "slurm.existingSecret"),
        ({"clusters": [{"name": "x", "mode": "ssh"}]}, "ssh.host is required"),
        (
            {"clusters": [{"name": "x", "mode": "ssh", "ssh": {"host": "h"}}]},
            "ssh.existingSecret",
        ),
        # values.schema.json refuses these before the templates do.
        (
            {"clusters": [{"name": "Bad-Name", "slurm": {"existingSecret": "s"}}]},
            "does not match pattern",
        ),
        ({"clusters": [{"name": "x", "mode": "rest"}]}, "clusters/0/mode"),
        ({"api": {"port": 0}}, "api/port"),
        ({"apii": {"port": 8000}}, "apii"),
        ({"podDisruptionBudget": {"maxUnavailable": 0}}, "maxUnavailable"),
        ({"api": {"tokens": {"existingSecret": ""}}}, "api.tokens.existingSecret"),
        ({"metrics": {"ports": {"worker": 70000}}}, "metrics/ports/worker"),
        ({"metrics": {"ports": {"api": 9000}}}, "api"),  # the API serves on api.port
        ({"metrics": {"podMonitr": {"enabled": True}}}, "podMonitr"),
        ({"temporal": {"apiKey": {"existingSecret": "k"}}}, "temporal.apiKey needs"),
        ({"temporal": {"tls": {"enabled": True, "caFile": "x"}}}, "caFile"),
    ],
)
def test_refuses_unsafe_or_incomplete_values(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)


# ------------------------------------------------------------------ availability and access


def test_disruption_budgets_never_block_a_drain(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for values_file in VALUES_FILES:
        docs = rendered[values_file]
        budgets = {
            d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"
        }
        assert set(budgets) == {f"{RELEASE}-resurgo-worker", f"{RELEASE}-resurgo-api"}
        for name, spec in budgets.items():
            assert spec == {"maxUnavailable": 1, "selector": spec["selector"]}
            target = by_name(docs, "Deployment", name)
            assert spec["selector"]["matchLabels"] == target["spec"]["selector"]["matchLabels"]
    off = render({"podDisruptionBudget": {"enabled": False}})
    assert "PodDisruptionBudget" not in kinds(off)


def test_network_policy_is_opt_in_and_opens_only_the_api_and_metrics_ports() -> None:
    assert "NetworkPolicy" not in kinds(render({}))
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
    docs = render(
        {
            "networkPolicy": {
                "enabled": True, "apiIngressFrom": [peer], "metricsIngressFrom": [monitoring]
            }
        }
    )  # fmt: skip
    policy = by_name(docs, "NetworkPolicy", f"{RELEASE}-resurgo")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/instance": RELEASE}
    assert policy["policyTypes"] == ["Ingress"]
    same_release, api, metrics = policy["ingress"]
    assert same_release["from"][0]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/instance": RELEASE
    }
    api_port = values_of("values.yaml")["api"]["port"]
    assert api == {"ports": [{"port": api_port, "protocol": "TCP"}], "from": [peer]}
    metrics_ports = sorted(values_of("values.yaml")["metrics"]["ports"].values())
    assert metrics == {
        "ports": [{"port": p, "protocol": "TCP"} for p in metrics_ports],
        "from": [monitoring],
    }
    # Metrics off: no rule for them.
    off = {k: 0 for k in ("worker", "controller", "watchdog")}
    docs = render({"networkPolicy": {"enabled": True}, "metrics": {"ports": off}})
    assert len(by_name(docs, "NetworkPolicy", f"{RELEASE}-resurgo")["spec"]["ingress"]) == 2


def test_helm_test_checks_readiness_through_the_service() -> None:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render({}, name=RELEASE, namespace="resurgo", is_install=True)
    tests = [yaml.safe_load(t) for p, t in manifests.items() if "/tests/" in p]
    assert len(tests) == 1
    pod = tests[0]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    service = by_name(render({}), "Service", f"{RELEASE}-resurgo-api")
    port = service["spec"]["ports"][0]["port"]
    assert pod["spec"]["containers"][0]["command"][-2:] == [
        "http", f"http://{RELEASE}-resurgo-api:{port}/readyz",
    ]  # fmt: skip


def test_one_api_port_in_the_code_and_the_chart() -> None:
    from resurgo.config import API_PORT, ApiSettings

    api = values_of("values.yaml")["api"]
    assert ApiSettings().port == API_PORT == api["port"] == api["service"]["port"]


def test_service_monitor_is_opt_in_and_scrapes_the_api_metrics() -> None:
    assert "ServiceMonitor" not in kinds(render({}))
    docs = render(
        {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prom"}}}}
    )
    monitor = by_name(docs, "ServiceMonitor", f"{RELEASE}-resurgo-api")
    assert monitor["metadata"]["labels"]["release"] == "kube-prom"
    service = by_name(docs, "Service", f"{RELEASE}-resurgo-api")
    # A ServiceMonitor selects Services by their labels.
    wanted = monitor["spec"]["selector"]["matchLabels"].items()
    assert wanted <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}


def metrics_ports_of(docs: list[dict[str, Any]]) -> dict[str, int]:
    """Component of each Deployment -> the `metrics` port of its container (and the env var)."""
    found: dict[str, int] = {}
    for doc in workloads(docs):
        component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
        (container,) = pod_of(doc)["containers"]
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        env = env_of(container).get("RESURGO_METRICS_PORT")
        if component in ("worker", "controller", "watchdog"):
            assert env == (str(ports["metrics"]) if "metrics" in ports else None), doc
            if "metrics" in ports:
                found[component] = ports["metrics"]
    return found


def test_worker_controllers_and_watchdogs_serve_metrics_on_their_ports(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    from resurgo.metrics.exporter import DEPLOYED_PORTS

    assert values_of("values.yaml")["metrics"]["ports"] == DEPLOYED_PORTS
    for name, docs in rendered.items():
        assert metrics_ports_of(docs) == DEPLOYED_PORTS, name
    assert metrics_ports_of(render({"metrics": {"ports": {"worker": 0}}})) == {
        "controller": 9465, "watchdog": 9466
    }  # fmt: skip
    assert (
        metrics_ports_of(render({"metrics": {"ports": {"controller": 9100}}}))["controller"] == 9100
    )


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels + matchExpressions In) matched against labels."""
    if not selector["matchLabels"].items() <= labels.items():
        return False
    return all(
        e["operator"] == "In" and labels.get(e["key"]) in e["values"]
        for e in selector.get("matchExpressions", [])
    )


def test_pod_monitor_is_opt_in_and_scrapes_every_process_but_the_api() -> None:
    assert "PodMonitor" not in kinds(render({}))
    docs = render({"metrics": {"podMonitor": {"enabled": True, "labels": {"release": "kp"}}}})
    (name,) = kinds(docs)["PodMonitor"]
    monitor = by_name(docs, "PodMonitor", name)
    assert monitor["metadata"]["labels"]["release"] == "kp"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics"
    scraped = []
    for doc in workloads(docs):
        template = doc["spec"]["template"]
        if not selects(monitor["spec"]["selector"], template["metadata"]["labels"]):
            continue
        scraped.append(template["metadata"]["labels"]["app.kubernetes.io/component"])
        ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert endpoint["port"] in ports, doc["metadata"]["name"]
    # The API has its ServiceMonitor; Temporal's dev server and MySQL are not Resurgo's.
    assert sorted(scraped) == ["controller", "watchdog", "worker"]


# ------------------------------------------------------------------ Temporal TLS


TLS_VALUES: dict[str, Any] = {
    "temporal": {
        "address": "ns.acct.tmprl.cloud:7233",
        "namespace": "ns.acct",
        "tls": {"enabled": True, "existingSecret": "temporal-mtls", "serverName": "t.example"},
        "apiKey": {"existingSecret": "temporal-cloud", "key": "key"},
    },
    "temporalDev": {"enabled": False},
}


def test_temporal_tls_and_api_key_reach_every_resurgo_pod_as_files() -> None:
    docs = render(TLS_VALUES)
    temporal = ResurgoConfig.model_validate(tomllib.loads(config_toml(docs))).temporal
    assert temporal.tls and temporal.tls_server_name == "t.example"
    files = {temporal.tls_ca_file, temporal.tls_cert_file, temporal.tls_key_file}
    assert None not in files and "api_key" not in config_toml(docs)  # the key: a file only
    pods = [w for w in workloads(docs) if "RESURGO_CONFIG" in env_of(pod_of(w)["containers"][0])]
    assert {w["metadata"]["name"].rsplit("-", 1)[-1] for w in pods} >= {"worker", "api"}
    for w in pods:
        pod, container = pod_of(w), pod_of(w)["containers"][0]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        tls = volumes[next(m["name"] for p, m in mounts.items() if p.endswith("temporal-tls"))][
            "secret"
        ]
        assert tls["secretName"] == "temporal-mtls"
        tls_dir = next(p for p in mounts if p.endswith("temporal-tls"))
        # Every file the config names is an item of the mounted Secret, under its mount.
        assert {f"{tls_dir}/{i['path']}" for i in tls["items"]} == files, w["metadata"]["name"]
        key_file = env_of(container)["RESURGO_TEMPORAL__API_KEY_FILE"]
        key_volume = volumes["temporal-api-key"]["secret"]
        assert key_volume["secretName"] == "temporal-cloud"
        assert key_volume["items"] == [{"key": "key", "path": "api-key"}]
        key_mount = next(m for p, m in mounts.items() if key_file.startswith(p + "/"))
        assert key_mount["name"] == "temporal-api-key" and key_mount["readOnly"]


def test_tls_without_client_certificate_or_private_ca() -> None:
    """caKey/certKey/keyKey "": TLS with the system roots only, nothing mounted for them."""
    values = deep_merge(
        TLS_VALUES,
        {"temporal": {"tls": {"caKey": "", "certKey": "", "keyKey": ""}, "apiKey": {}}},
    )
    values["temporal"]["apiKey"] = {"existingSecret": ""}  # deep_merge keeps the old one
    docs = render(values)
    temporal = ResurgoConfig.model_validate(tomllib.loads(config_toml(docs))).temporal
    assert temporal.tls and temporal.tls_ca_file is None and temporal.tls_cert_file is None
    for w in workloads(docs):
        names = {v["name"] for v in pod_of(w).get("volumes", [])}
        assert not names & {"temporal-tls", "temporal-api-key"}, w["metadata"]["name"]


def test_plain_temporal_by_default(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for docs in rendered.values():
        assert not ResurgoConfig.model_validate(tomllib.loads(config_toml(docs))).temporal.tls
        for w in workloads(docs):
            names = {v["name"] for v in pod_of(w).get("volumes", [])}
            assert not names & {"temporal-tls", "temporal-api-key"}
