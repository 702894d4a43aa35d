"""deploy/ validated offline: Kubernetes manifests against the API schemas bundled with
kubernetes-validate (strict: unknown fields fail), docker-compose.yml against the Compose
specification's schema (vendored by check-jsonschema), the Grafana dashboard against the
server's metric names; plus the cross-references no schema sees (selectors, probe paths,
setting names, the autoscaler's metric)."""

from __future__ import annotations

import copy
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import tempfile

import jsonschema
import kubernetes_validate
import pytest
import yaml

from sandbox.config import REPO_ROOT, Settings
from sandbox.engine.backends.rootfs import prebuilt_name
from sandbox.runtimes import RuntimeRegistry

DEPLOY = REPO_ROOT / "deploy"
# The oldest Kubernetes minor still commonly run, and a recent one.
KUBERNETES_VERSIONS = ["1.30.0", "1.34.0"]
HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def _served_metrics() -> set[str]:
    """The sandbox_* metrics a real app registers for /metrics (no sandbox needed), as
    PromQL names them: counters with _total, histograms by their base name."""
    from sandbox.api import create_app
    from sandbox.config import Settings

    registry = create_app(Settings(backend="docker")).state.ops.metrics.registry
    return {family.name + ("_total" if family.type == "counter" else "")
            for family in registry.collect() if family.name.startswith("sandbox_")}


SERVER_METRICS = _served_metrics()


def _manifests() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs += [(f"{path.name}: {doc['kind']}", doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def _by_kind(kind: str, name: str = "llm-sandbox") -> dict:
    """The one object of this kind and name (the sandbox servers' unless named)."""
    found = [doc for _, doc in _manifests() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name} in deploy/kubernetes, found {len(found)}"
    return found[0]


HAPROXY = "llm-sandbox-haproxy"   # the HAProxy objects' name
SERVERS = "llm-sandbox-peers"      # the headless Service that lists the sandbox pods


def _pod_labels(name: str = "llm-sandbox") -> dict:
    return _by_kind("StatefulSet", name)["spec"]["template"]["metadata"]["labels"]


def _container(name: str = "llm-sandbox") -> dict:
    return _by_kind("StatefulSet", name)["spec"]["template"]["spec"]["containers"][0]


def _port(container: dict, name: str) -> int:
    return next(p["containerPort"] for p in container["ports"] if p["name"] == name)


def _server_env() -> dict[str, str | dict]:
    """The server's environment: the ConfigMap's values, then the container's own (a
    ``valueFrom`` stays a dict)."""
    env = dict(_by_kind("ConfigMap")["data"])
    for item in _container().get("env", []):
        env[item["name"]] = item.get("value", item.get("valueFrom"))
    return env


def _setting_names(names) -> list[str]:
    """The SANDBOX_* names among ``names`` that no server setting reads (typos, stale names)."""
    fields = set(Settings.model_fields)
    return [n for n in names if n.startswith("SANDBOX_") and n[len("SANDBOX_"):].lower() not in fields]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name, doc", _manifests(), ids=lambda v: v if isinstance(v, str) else "")
def test_kubernetes_manifest_matches_api_schema(name, doc, version):
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{name} is invalid for Kubernetes {version}: {exc.caught.message} "
                    f"at {'/'.join(map(str, exc.caught.absolute_path))}")


def test_schema_validation_rejects_an_unknown_field():
    """The check above must be able to fail: a misspelt field is an error."""
    doc = copy.deepcopy(_by_kind("StatefulSet"))
    doc["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privilged"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[0], strict=True)


def test_every_kubernetes_object_is_there_and_in_one_namespace():
    kinds = sorted(doc["kind"] for _, doc in _manifests())
    assert kinds == sorted(["Namespace", "ConfigMap", "StatefulSet", "Service", "Service",
                            "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy",
                            # HAProxy in front (haproxy.yaml)
                            "ConfigMap", "StatefulSet", "Service", "PodDisruptionBudget",
                            "NetworkPolicy"])
    namespace = _by_kind("Namespace")["metadata"]["name"]
    for name, doc in _manifests():
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == namespace, name
    assert _by_kind("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_selectors_and_references_meet():
    for name in ("llm-sandbox", HAPROXY):
        statefulset = _by_kind("StatefulSet", name)
        pod_labels = _pod_labels(name)
        assert statefulset["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert _by_kind("PodDisruptionBudget", name)["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert _by_kind("NetworkPolicy", name)["spec"]["podSelector"]["matchLabels"] == pod_labels
        container = _container(name)
        port_names = {p["name"] for p in container["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["port"] in port_names, (name, probe)
        pod = statefulset["spec"]["template"]["spec"]
        assert {m["name"] for m in container["volumeMounts"]} == {v["name"] for v in pod["volumes"]}
    # The two kinds of pods are told apart by their labels.
    assert not _pod_labels().items() <= _pod_labels(HAPROXY).items()
    assert not _pod_labels(HAPROXY).items() <= _pod_labels().items()
    # Clients reach HAProxy, never a sandbox pod directly.
    service = _by_kind("Service")
    assert service["spec"]["selector"].items() <= _pod_labels(HAPROXY).items()
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in _container(HAPROXY)["ports"]}
    target = _by_kind("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("StatefulSet", "llm-sandbox")
    container = _container()
    assert container["envFrom"][0]["configMapRef"]["name"] == _by_kind("ConfigMap")["metadata"]["name"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] in ("/healthz", "/v1/ping")
    assert container["startupProbe"]["httpGet"]["port"] == "http"


def test_statefulset_names_its_pods_through_a_headless_service():
    """Sessions live in one pod, named in their ids; HAProxy lists the pods by one DNS name."""
    statefulset = _by_kind("StatefulSet")
    spec = statefulset["spec"]
    headless = _by_kind("Service", SERVERS)
    assert spec["serviceName"] == SERVERS and headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"].items() <= _pod_labels().items()
    assert headless["spec"]["ports"][0]["port"] == _port(_container(), "http")
    # HAProxy checks /readyz itself; a pod briefly unready keeps its place in the DNS answer.
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    # Every pod name the autoscaler can make (<name>-<ordinal>) is a valid replica name.
    replica_pattern = Settings.model_json_schema()["properties"]["replica"]["pattern"]
    last = _by_kind("HorizontalPodAutoscaler")["spec"]["maxReplicas"] - 1
    assert re.fullmatch(replica_pattern, f"{statefulset['metadata']['name']}-{last}")


def test_session_ids_carry_the_pod_name_and_nothing_forwards():
    env = _server_env()
    assert env["SANDBOX_REPLICA"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SANDBOX_INSTANCE"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert not [name for name in env if name.startswith("SANDBOX_PEER")], \
        "servers no longer forward to each other: HAProxy routes sessions"


def _haproxy_env() -> dict[str, str | dict]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in _container(HAPROXY)["env"]}


def _start_script() -> str:
    return _by_kind("ConfigMap", HAPROXY)["data"]["start.sh"]


def test_haproxy_runs_the_shipped_config_over_the_sandbox_pods():
    data = _by_kind("ConfigMap", HAPROXY)["data"]
    shipped = (DEPLOY / "haproxy" / "haproxy.cfg").read_text()
    assert data["haproxy.cfg"] == shipped, "copy deploy/haproxy/haproxy.cfg into haproxy.yaml's ConfigMap"
    container = _container(HAPROXY)
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "config")
    assert container["command"] == ["sh", f"{mount}/start.sh"]
    assert f"-f {mount}/haproxy.cfg -f " in _start_script()
    env = _haproxy_env()
    # Every variable set is one haproxy.cfg reads, and the one it requires is set.
    read = set(re.findall(r"\$\{(SANDBOX_\w+)", shipped))
    assert set(env) <= read, f"haproxy.cfg reads no {set(env) - read}"
    namespace = _by_kind("Namespace")["metadata"]["name"]
    assert env["SANDBOX_SERVERS"] == f"{SERVERS}.{namespace}.svc.cluster.local:{_port(_container(), 'http')}"
    assert int(env["SANDBOX_SERVER_SLOTS"]) >= _by_kind("HorizontalPodAutoscaler")["spec"]["maxReplicas"]
    assert env["SANDBOX_PROXY_BIND"] == f":{_port(container, 'http')}"
    assert env["SANDBOX_PROXY_STATS_BIND"] == f":{_port(container, 'stats')}"
    # HAProxy lets a pod hold more requests than its sandboxes, so its own queue (what the
    # autoscaler reads) can pass the autoscaler's target.
    concurrency = int(_by_kind("ConfigMap")["data"]["SANDBOX_MAX_CONCURRENCY"])
    target, = [float(m["pods"]["target"]["averageValue"])
               for m in _by_kind("HorizontalPodAutoscaler")["spec"]["metrics"] if m["type"] == "Pods"]
    assert int(env["SANDBOX_SERVER_MAXCONN"]) - concurrency > target
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert "monitor-uri /healthz" in shipped
    assert int(env["SANDBOX_PROXY_THREADS"]) <= int(container["resources"]["limits"]["cpu"])


def test_haproxy_replicas_share_the_session_table():
    statefulset = _by_kind("StatefulSet", HAPROXY)
    script = _start_script()
    ordinals = re.search(r'^replicas="([0-9 ]+)"', script, re.M).group(1).split()
    assert ordinals == [str(i) for i in range(statefulset["spec"]["replicas"])]
    assert statefulset["spec"]["replicas"] >= 2
    peers = _by_kind("Service", statefulset["spec"]["serviceName"])
    assert peers["spec"]["clusterIP"] == "None" and peers["spec"]["publishNotReadyAddresses"] is True
    assert peers["spec"]["selector"].items() <= _pod_labels(HAPROXY).items()
    port = _port(_container(HAPROXY), "peers")
    namespace = _by_kind("Namespace")["metadata"]["name"]
    assert f'name="{HAPROXY}-$i"' in script
    assert f'host="$name.{peers["metadata"]["name"]}.{namespace}.svc.cluster.local"' in script
    assert f"bind :{port}" in script and f"$host:{port}" in script
    # The section start.sh writes is the one haproxy.cfg's table names.
    table = re.search(r"^\s*stick-table .*\bpeers (\S+)", (DEPLOY / "haproxy" / "haproxy.cfg").read_text(), re.M)
    assert f"peers {table.group(1)}\\n" in script
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0


def _haproxy_check(env: dict[str, str], peers: str, local_peer: str | None = None) -> None:
    """HAProxy's own parser on deploy/haproxy/haproxy.cfg with ``env`` and a peers section."""
    if shutil.which("haproxy") is None:
        if os.environ.get("SANDBOX_TESTS_REQUIRE_HAPROXY") == "1":
            pytest.fail("haproxy is not installed")
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    with tempfile.NamedTemporaryFile("w", suffix=".cfg") as peers_file:
        peers_file.write(peers)
        peers_file.flush()
        command = ["haproxy", "-c", *(["-L", local_peer] if local_peer else []),
                   "-f", str(DEPLOY / "haproxy" / "haproxy.cfg"), "-f", peers_file.name]
        check = subprocess.run(command, env={"PATH": os.environ["PATH"], **env},
                               capture_output=True, text=True)
    output = check.stdout + check.stderr
    assert check.returncode == 0 and "Warnings were found" not in output, output


def test_haproxy_accepts_its_kubernetes_settings():
    """The StatefulSet's environment, and the peers section start.sh writes for replica 0
    (the other replica at a local address: no cluster DNS here)."""
    env = {name: value for name, value in _haproxy_env().items() if isinstance(value, str)}
    env["SANDBOX_PROXY_SOCKET"] = "/tmp/unused.sock"  # -c binds nothing
    ordinals = range(_by_kind("StatefulSet", HAPROXY)["spec"]["replicas"])
    peers = "peers sandbox\n    bind :10000\n" + "".join(
        f"    server {HAPROXY}-{i}\n" if i == 0 else f"    server {HAPROXY}-{i} 127.0.0.1:{10000 + i}\n"
        for i in ordinals)
    _haproxy_check(env, peers, f"{HAPROXY}-0")


def test_haproxy_for_ray_needs_only_where_the_proxies_are():
    """deploy/haproxy/ray.cfg: valid with SANDBOX_RAY_PROXIES alone (its other settings have
    defaults), refused without it. tests/integration/test_ray.py runs it in front of a cluster."""
    if shutil.which("haproxy") is None:
        if os.environ.get("SANDBOX_TESTS_REQUIRE_HAPROXY") == "1":
            pytest.fail("haproxy is not installed")
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    command = ["haproxy", "-c", "-f", str(DEPLOY / "haproxy" / "ray.cfg")]
    base = {"PATH": os.environ["PATH"], "SANDBOX_PROXY_SOCKET": "/tmp/unused.sock"}
    check = subprocess.run(command, env={**base, "SANDBOX_RAY_PROXIES": "ray-nodes.internal:8000"},
                           capture_output=True, text=True)
    assert check.returncode == 0 and "Warnings were found" not in check.stdout + check.stderr, \
        check.stdout + check.stderr
    missing = subprocess.run(command, env=base, capture_output=True, text=True)
    assert missing.returncode != 0 and "SANDBOX_RAY_PROXIES" in missing.stdout + missing.stderr


def _env_file(path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile reads them (comments, quotes)."""
    pairs = [line.split("=", 1) for line in path.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return {key.strip(): value.strip().strip('"') for key, value in pairs}


def test_vm_fleet_files_agree():
    """deploy/systemd (a server per machine) and deploy/haproxy (HAProxy, dnsmasq, the list)."""
    unit = (DEPLOY / "systemd" / "llm-sandbox.service").read_text()
    server_env = _env_file(DEPLOY / "systemd" / "llm-sandbox.env")
    assert "EnvironmentFile=/etc/default/llm-sandbox" in unit
    assert not _setting_names(server_env), f"no server setting is called {_setting_names(server_env)}"
    proxy_env = _env_file(DEPLOY / "haproxy" / "haproxy.env")
    shipped = (DEPLOY / "haproxy" / "haproxy.cfg").read_text()
    read = set(re.findall(r"\$\{(SANDBOX_\w+)", shipped))
    assert {k for k in proxy_env if k.startswith("SANDBOX_")} <= read
    assert "-f /etc/haproxy/peers.cfg" in proxy_env["EXTRAOPTS"]
    assert int(proxy_env["SANDBOX_SERVER_MAXCONN"]) == 2 * int(server_env["SANDBOX_MAX_CONCURRENCY"])
    # HAProxy asks dnsmasq for the name fleet.hosts lists, on the servers' port.
    dnsmasq = dict(line.split("=", 1) for line in (DEPLOY / "haproxy" / "dnsmasq.conf").read_text().splitlines()
                   if "=" in line and not line.startswith("#"))
    assert proxy_env["SANDBOX_NAMESERVER"] == f"{dnsmasq['listen-address']}:{dnsmasq['port']}"
    name, port = proxy_env["SANDBOX_SERVERS"].rsplit(":", 1)
    assert port == server_env["SANDBOX_PORT"]
    listed = [line.split() for line in (DEPLOY / "haproxy" / "fleet.hosts").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert listed and all(names == [name] for _, *names in listed)
    assert dnsmasq["addn-hosts"].endswith("/fleet.hosts")
    if shutil.which("dnsmasq"):
        test = subprocess.run(["dnsmasq", "--test", f"--conf-file={DEPLOY / 'haproxy' / 'dnsmasq.conf'}"],
                              capture_output=True, text=True)
        assert test.returncode == 0, test.stderr
    env = {k: v for k, v in proxy_env.items() if k.startswith("SANDBOX_")}
    env["SANDBOX_PROXY_SOCKET"] = "/tmp/unused.sock"
    _haproxy_check(env, (DEPLOY / "haproxy" / "peers.cfg").read_text())  # its localpeer


def _allows(rules: list[dict], side: str, port: int, labels: dict | None = None,
            namespace: str | None = None) -> bool:
    """Whether one of ``rules`` (a NetworkPolicy's ingress or egress) lets pods with ``labels``
    in this namespace, or anything in ``namespace``, through on TCP ``port``."""
    for rule in rules:
        if not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in rule.get("ports", [])):
            continue
        for peer in rule.get(side, []):
            if labels is not None and "namespaceSelector" not in peer and "podSelector" in peer \
                    and peer["podSelector"]["matchLabels"].items() <= labels.items():
                return True
            if namespace is not None and "podSelector" not in peer and peer.get("namespaceSelector", {}) \
                    .get("matchLabels") == {"kubernetes.io/metadata.name": namespace}:
                return True
    return False


def test_network_policies_let_clients_reach_haproxy_and_only_haproxy_the_servers():
    servers, proxy = _by_kind("NetworkPolicy")["spec"], _by_kind("NetworkPolicy", HAPROXY)["spec"]
    http, proxy_http = _port(_container(), "http"), _port(_container(HAPROXY), "http")
    peers, stats = _port(_container(HAPROXY), "peers"), _port(_container(HAPROXY), "stats")
    # Sandbox pods: HAProxy and Prometheus in, nothing out (not even DNS: nothing to call).
    assert {"Ingress", "Egress"} <= set(servers["policyTypes"]) and servers["egress"] == []
    assert _allows(servers["ingress"], "from", http, labels=_pod_labels(HAPROXY))
    assert _allows(servers["ingress"], "from", http, namespace="monitoring")
    assert not _allows(servers["ingress"], "from", http, labels=_pod_labels()), \
        "sandbox pods no longer call each other"
    assert not _allows(servers["ingress"], "from", http, labels={"llm-sandbox-client": "true"}), \
        "clients go through HAProxy"
    assert all("namespaceSelector" not in peer or "podSelector" not in peer
               for rule in servers["ingress"] for peer in rule["from"]), "no client from other namespaces"
    # HAProxy: clients in (any namespace), its peer, Prometheus; out to the pods, its peer, DNS.
    assert {"Ingress", "Egress"} <= set(proxy["policyTypes"])
    clients = [peer for rule in proxy["ingress"] for peer in rule["from"]
               if peer.get("podSelector", {}).get("matchLabels") == {"llm-sandbox-client": "true"}]
    assert clients and all(peer.get("namespaceSelector") == {} for peer in clients)
    assert any(p["port"] == proxy_http for rule in proxy["ingress"] for p in rule["ports"]
               if any(peer in clients for peer in rule["from"]))
    assert _allows(proxy["ingress"], "from", peers, labels=_pod_labels(HAPROXY))
    assert _allows(proxy["ingress"], "from", stats, namespace="monitoring")
    assert _allows(proxy["egress"], "to", http, labels=_pod_labels())
    assert _allows(proxy["egress"], "to", peers, labels=_pod_labels(HAPROXY))
    dns = [p for rule in proxy["egress"] for p in rule.get("ports", []) if p["port"] == 53]
    assert {p["protocol"] for p in dns} == {"UDP", "TCP"}, "the pods' DNS name must resolve"


def test_configured_settings_exist_and_fit_the_pod():
    config = _by_kind("ConfigMap")["data"]
    container = _container()
    env_names = list(config) + [e["name"] for e in container.get("env", [])]
    assert not _setting_names(env_names), f"no server setting is called {_setting_names(env_names)}"
    # Sandboxes are charged to the pod: all of them at their ceiling must fit its limit.
    limit_gib = int(container["resources"]["limits"]["memory"].removesuffix("Gi"))
    sandboxes_mib = int(config["SANDBOX_MAX_CONCURRENCY"]) * int(config["SANDBOX_MAX_MEMORY_MB"])
    assert sandboxes_mib + 1024 <= limit_gib * 1024


def test_autoscaler_metric_is_served_and_adapted():
    hpa = _by_kind("HorizontalPodAutoscaler")
    pod_metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert pod_metrics == ["sandbox_queue_depth"]
    adapter = yaml.safe_load((DEPLOY / "prometheus-adapter-values.yaml").read_text())
    rule, = adapter["rules"]["custom"]
    assert rule["name"]["as"] in pod_metrics
    assert re.match(r"(\w+)", rule["seriesQuery"]).group(1) in SERVER_METRICS
    assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]


def _compose_schema() -> dict:
    schemas = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(schemas.joinpath("compose-spec.json").read_text())


def test_compose_file_matches_the_compose_specification():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    validator = jsonschema.Draft202012Validator(_compose_schema())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert not errors, errors
    broken = copy.deepcopy(compose)
    broken["services"]["sandbox"]["healthcheck"]["intervall"] = "5s"
    assert not validator.is_valid(broken), "the compose schema must reject an unknown key"

    service, = compose["services"].values()
    assert "/readyz" in " ".join(service["healthcheck"]["test"])
    assert not _setting_names(service["environment"])
    environment = service["environment"]
    sandboxes_mib = int(environment["SANDBOX_MAX_CONCURRENCY"]) * int(environment["SANDBOX_MAX_MEMORY_MB"])
    assert sandboxes_mib + 1024 <= int(service["mem_limit"].removesuffix("g")) * 1024
    assert all(port.startswith("127.0.0.1:") for port in service["ports"]), "no auth: local only"
    # One replica, so no peers; its session ids carry a fixed, valid name.
    replica_pattern = Settings.model_json_schema()["properties"]["replica"]["pattern"]
    assert re.fullmatch(replica_pattern, environment["SANDBOX_REPLICA"])
    assert "SANDBOX_PEERS" not in environment and "SANDBOX_PEER_URL_TEMPLATE" not in environment


def test_server_image_bakes_every_language_and_sets_real_settings():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    stages = {stage: image for image, stage in re.findall(r"^FROM (\S+) AS (\S+)$", dockerfile, re.M)}
    copied = dict(re.findall(r"^COPY --from=(\S+) / /opt/llm-sandbox/roots/([^/]+)/rootfs/$", dockerfile, re.M))
    baked = {stages.get(stage, stage): folder for stage, folder in copied.items()}
    for image in RuntimeRegistry.load(REPO_ROOT / "runtimes").images:
        assert baked.get(image) == prebuilt_name(image), f"{image} is not baked in"
    env_names = re.findall(r"\b(SANDBOX_[A-Z_]+)=", dockerfile)
    assert "SANDBOX_ROOTFS_DIR" in env_names
    assert not _setting_names(env_names)


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())
    assert dashboard["panels"], "no panels"
    exprs = []
    for panel in dashboard["panels"]:
        assert panel.get("targets"), f"panel {panel['title']!r} queries nothing"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]
        exprs += [t["expr"] for t in panel["targets"]]
    return exprs


def test_dashboard_uses_only_metrics_the_server_exposes_and_all_of_them():
    used = {HISTOGRAM_SUFFIX.sub("", name) if not name.endswith("_total") else name
            for expr in _dashboard_exprs() for name in re.findall(r"\bsandbox_\w+", expr)}
    assert used - SERVER_METRICS == set(), f"unknown metrics: {used - SERVER_METRICS}"
    assert SERVER_METRICS - used == set(), f"metrics without a panel: {SERVER_METRICS - used}"


def test_compose_and_kubernetes_grant_the_same_least_privilege():
    """Both run the server image the one way verified by test_server_image.py."""
    service = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]["sandbox"]
    context = _container()["securityContext"]
    assert not context.get("privileged") and "privileged" not in service
    assert context["capabilities"]["drop"] == service["cap_drop"] == ["ALL"]
    assert sorted(context["capabilities"]["add"]) == sorted(service["cap_add"])
    assert context["seccompProfile"]["type"] == "Unconfined" and "seccomp=unconfined" in service["security_opt"]
    assert context["appArmorProfile"]["type"] == "Unconfined" and "apparmor=unconfined" in service["security_opt"]
    assert context["readOnlyRootFilesystem"] is True and service["read_only"] is True
    pod = _by_kind("StatefulSet")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False, "no API token in a pod running untrusted code"
