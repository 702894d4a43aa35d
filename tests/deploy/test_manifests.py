"""deploy/ validated offline: Kubernetes manifests against the API schemas bundled with
kubernetes-validate (strict: unknown fields fail), docker-compose.yml against the Compose
specification's schema (vendored by check-jsonschema), the Grafana dashboard against the
server's metric names; plus the cross-references no schema sees (selectors, probe paths,
setting names, the autoscaler's metric)."""

from __future__ import annotations

import copy
import importlib.resources
import json
import re
from urllib.parse import urlsplit

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


def _by_kind(kind: str) -> dict:
    found = [doc for _, doc in _manifests() if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in deploy/kubernetes, found {len(found)}"
    return found[0]


def _service(headless: bool) -> dict:
    """The one ClusterIP Service clients use, or the one headless Service for the pods' names."""
    found = [doc for _, doc in _manifests() if doc["kind"] == "Service"
             and (doc["spec"].get("clusterIP") == "None") == headless]
    assert len(found) == 1, f"expected one {'headless' if headless else 'ClusterIP'} Service, found {len(found)}"
    return found[0]


def _container() -> dict:
    return _by_kind("StatefulSet")["spec"]["template"]["spec"]["containers"][0]


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
                            "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy"])
    namespace = _by_kind("Namespace")["metadata"]["name"]
    for name, doc in _manifests():
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == namespace, name
    assert _by_kind("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_selectors_and_references_meet():
    statefulset = _by_kind("StatefulSet")
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert statefulset["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert _service(headless=False)["spec"]["selector"].items() <= pod_labels.items()
    assert _by_kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert _by_kind("NetworkPolicy")["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    target = _by_kind("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("StatefulSet", statefulset["metadata"]["name"])
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    port_names = {p["name"] for p in container["ports"]}
    assert _service(headless=False)["spec"]["ports"][0]["targetPort"] in port_names
    assert container["envFrom"][0]["configMapRef"]["name"] == _by_kind("ConfigMap")["metadata"]["name"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] in ("/healthz", "/v1/ping")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in port_names, probe
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert mounts == {v["name"] for v in statefulset["spec"]["template"]["spec"]["volumes"]}


def test_statefulset_names_its_pods_through_a_headless_service():
    """Sessions live in one pod: every pod needs a stable name that the others can resolve."""
    statefulset = _by_kind("StatefulSet")
    spec = statefulset["spec"]
    headless, service = _service(headless=True), _service(headless=False)
    assert spec["serviceName"] == headless["metadata"]["name"] != service["metadata"]["name"]
    assert headless["spec"]["selector"] == service["spec"]["selector"]
    assert headless["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert headless["spec"]["ports"] == service["spec"]["ports"]
    assert headless["spec"]["publishNotReadyAddresses"] is False
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    # Every pod name the autoscaler can make (<name>-<ordinal>) is a valid replica name.
    replica_pattern = Settings.model_json_schema()["properties"]["replica"]["pattern"]
    last = _by_kind("HorizontalPodAutoscaler")["spec"]["maxReplicas"] - 1
    assert re.fullmatch(replica_pattern, f"{statefulset['metadata']['name']}-{last}")


def test_sessions_are_forwarded_to_the_owning_pod_by_its_name():
    env = _server_env()
    assert env["SANDBOX_REPLICA"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SANDBOX_INSTANCE"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "SANDBOX_PEERS" not in env, "the template names every pod, now and after scaling"
    template = env["SANDBOX_PEER_URL_TEMPLATE"]
    url = urlsplit(template)
    namespace = _by_kind("Namespace")["metadata"]["name"]
    headless = _service(headless=True)["metadata"]["name"]
    assert url.scheme == "http" and url.path in ("", "/")
    assert re.fullmatch(rf"\{{replica\}}\.{re.escape(headless)}\.{re.escape(namespace)}\.svc(\.[a-z0-9.-]+)?",
                        url.hostname), url.hostname
    assert url.port == _container()["ports"][0]["containerPort"]
    assert template.count("{replica}") == 1


def test_network_policy_lets_the_pods_forward_to_each_other():
    policy = _by_kind("NetworkPolicy")["spec"]
    pod_labels = _by_kind("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    port = _container()["ports"][0]["containerPort"]

    def pods_on_port(rules, side):
        """Whether a rule lets this namespace's sandbox pods through on ``port`` (TCP)."""
        for rule in rules:
            ports = rule.get("ports")
            port_ok = not ports or any(p.get("port") in (port, "http") and p.get("protocol", "TCP") == "TCP"
                                       for p in ports)
            peers = rule.get(side)
            peer_ok = not peers or any("namespaceSelector" not in peer and "ipBlock" not in peer
                                       and peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
                                       for peer in peers)
            if port_ok and peer_ok:
                return True
        return False

    assert {"Ingress", "Egress"} <= set(policy["policyTypes"])
    assert pods_on_port(policy["ingress"], "from"), "peers cannot reach a pod to forward to it"
    assert pods_on_port(policy["egress"], "to"), "a pod cannot reach its peers to forward"
    dns = [p for rule in policy["egress"] for p in rule.get("ports", []) if p["port"] == 53]
    assert {p["protocol"] for p in dns} == {"UDP", "TCP"}, "peer names must resolve"


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
