"""deploy/k8s: the kustomize base renders (kubectl's built-in kustomize, where kubectl is installed),
every file it references exists, the PrometheusRule carries exactly alerts/*.yml, the dashboard
ConfigMaps exactly dashboards/*.json, and the Deployment's probes and config are real."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.app import create_app
from monitor.config import load_settings
from monitor.runtime import Monitor

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy/k8s"
GPU_NODES = BASE / "gpu-nodes"


def _shipped_groups() -> list[dict[str, Any]]:
    return [group for path in sorted((ROOT / "alerts").glob("*.yml"))
            for group in yaml.safe_load(path.read_text())["groups"]]


def _routes() -> set[str]:
    return {getattr(route, "path", "") for route in create_app(Monitor(load_settings(None))).routes}


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:  # not packaged with the other tools; test_every_referenced_file_exists still runs
        pytest.skip("kubectl not installed (kubectl kustomize renders the base)")
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize("directory", [BASE, GPU_NODES], ids=["base", "gpu-nodes"])
def test_every_referenced_file_exists_and_parses(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        documents = [d for d in yaml.safe_load_all((directory / resource).read_text()) if d]
        assert documents and all({"apiVersion", "kind", "metadata"} <= set(d) for d in documents), resource
    for generator in kustomization.get("configMapGenerator", []):
        for entry in generator["files"]:
            assert (directory / entry.split("=", 1)[-1]).is_file(), entry


def test_the_base_renders_with_every_kind() -> None:
    documents = _kustomize(BASE)
    kinds = sorted({d["kind"] for d in documents})
    assert kinds == ["ConfigMap", "Deployment", "Namespace", "PersistentVolumeClaim", "PrometheusRule", "Service",
                     "ServiceMonitor"]
    assert all(d["metadata"].get("namespace") == "inference-monitor" for d in documents if d["kind"] != "Namespace")


def test_prometheus_rule_carries_exactly_the_shipped_rules() -> None:
    rules = [d for d in _kustomize(BASE) if d["kind"] == "PrometheusRule"]
    assert len(rules) == 1 and rules[0]["spec"]["groups"] == _shipped_groups()


def test_dashboard_configmaps_carry_exactly_the_shipped_dashboards() -> None:
    maps = [d for d in _kustomize(BASE) if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    carried = {key: text for m in maps for key, text in m["data"].items()}
    assert carried == {path.name: path.read_text() for path in (ROOT / "dashboards").glob("*.json")}
    assert len(maps) == 5


def test_deployment_probes_config_and_service_fit_together() -> None:
    documents = {(d["kind"], d["metadata"]["name"]): d for d in _kustomize(BASE)}
    deployment = documents[("Deployment", "inference-monitor")]
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert deployment["spec"]["replicas"] == 1 and spec["securityContext"]["runAsNonRoot"] is True
    routes = _routes()
    assert container["livenessProbe"]["httpGet"]["path"] in routes
    assert container["readinessProbe"]["httpGet"]["path"] in routes
    config_name = next(v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v)
    config = documents[("ConfigMap", config_name)]  # the generated name with its hash suffix
    settings_file = Path(container["args"][-1])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert settings_file.parent.as_posix() == mounts["config"]
    assert load_settings(None, yaml.safe_load(config["data"][settings_file.name])).infra.nvml.enabled == "false"
    secret_keys = {e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"]
                   if "secretKeyRef" in e.get("valueFrom", {})}
    example = yaml.safe_load((BASE / "secret.example.yaml").read_text())
    assert set(example["stringData"]) == secret_keys
    service = documents[("Service", "inference-monitor")]
    monitor = documents[("ServiceMonitor", "inference-monitor")]
    assert service["spec"]["ports"][0]["name"] == monitor["spec"]["endpoints"][0]["port"] == "http"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


def test_gpu_node_daemonset() -> None:
    documents = {d["kind"]: d for d in _kustomize(GPU_NODES)}
    spec = documents["DaemonSet"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["INFERMON_INFRA__NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    settings = load_settings(None, yaml.safe_load(documents["ConfigMap"]["data"]["infermon.yml"]))
    assert settings.alerting.enabled is False and settings.infra.nvml.enabled == "true"
    selector = documents["DaemonSet"]["spec"]["selector"]["matchLabels"]
    assert documents["PodMonitor"]["spec"]["selector"]["matchLabels"] == selector
