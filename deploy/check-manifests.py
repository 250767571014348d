#!/usr/bin/env python3
"""Checks the Kubernetes manifests under deploy/k8s without a cluster or kustomize.

- Every kustomization.yaml names only files and directories that exist.
- Each kustomization is rendered the way kustomize would for the features used here
  (resources, namespace, labels, images, strategic-merge patches with $patch: delete),
  and every rendered object, plus the Job manifests, is validated with kubernetes-validate
  (strict) against the given Kubernetes version. CRDs without a published schema
  (ServiceMonitor, KEDA's ScaledObject) are checked by hand below.
- Cross-checks: selectors match the pods they select, the grace period outlasts the relay's
  shutdown timeout, the key Secret is mounted read-only with mode 0400, and KEDA's ScaledObject
  scales the relay on the lag of the group and topic the relay reads, never past the partitions.

With --print-env KUSTOMIZATION, prints the relay container's arguments and environment
(ConfigMap values and env) as JSON instead: the smoke test starts the binary with them.
"""
import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.abspath(__file__))
K8S = os.path.join(ROOT, "k8s")
problems = []


def problem(text):
    problems.append(text)


def load_all(path):
    with open(path) as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


def kustomizations():
    for directory, _, files in os.walk(K8S):
        if "kustomization.yaml" in files:
            yield directory


def check_references(directory):
    kustomization = load_all(os.path.join(directory, "kustomization.yaml"))[0]
    for field in ("resources", "components"):
        for entry in kustomization.get(field, []):
            path = os.path.normpath(os.path.join(directory, entry))
            if os.path.isdir(path):
                if not os.path.exists(os.path.join(path, "kustomization.yaml")):
                    problem(f"{directory}: {field} entry {entry} is a directory without kustomization.yaml")
            elif not os.path.isfile(path):
                problem(f"{directory}: {field} entry {entry} does not exist")
    for patch in kustomization.get("patches", []) + kustomization.get("patchesStrategicMerge", []):
        entry = patch["path"] if isinstance(patch, dict) else patch
        if not os.path.isfile(os.path.join(directory, entry)):
            problem(f"{directory}: patch {entry} does not exist")
    return kustomization


def merge(base, patch):
    """Strategic merge for maps and for lists of maps keyed by `name` (containers, env, volumes)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        result = copy.deepcopy(base)
        for key, value in patch.items():
            result[key] = merge(base[key], value) if key in base else value
        return result
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(item, dict) and "name" in item for item in base + patch):
        result = copy.deepcopy(base)
        for item in patch:
            index = next((i for i, existing in enumerate(result) if existing["name"] == item["name"]), None)
            if item.get("$patch") == "delete":
                if index is None:
                    problem(f"patch deletes {item['name']}, which the base does not have")
                else:
                    result.pop(index)
            elif index is None:
                result.append(item)
            else:
                result[index] = merge(result[index], item)
        return result
    return copy.deepcopy(patch)


def render(directory):
    kustomization = check_references(directory)
    objects = []
    for entry in kustomization.get("resources", []):
        path = os.path.join(directory, entry)
        objects += render(path) if os.path.isdir(path) else load_all(path)
    for patch in kustomization.get("patches", []):
        for change in load_all(os.path.join(directory, patch["path"])):
            targets = [o for o in objects if o["kind"] == change["kind"] and o["metadata"]["name"] == change["metadata"]["name"]]
            if not targets:
                problem(f"{directory}: patch {patch['path']} targets {change['kind']}/{change['metadata']['name']}, which is not rendered")
            for target in targets:
                objects[objects.index(target)] = merge(target, change)
    for obj in objects:
        if "namespace" in kustomization and obj["kind"] != "Namespace":
            obj["metadata"]["namespace"] = kustomization["namespace"]
        for label in kustomization.get("labels", []):
            obj["metadata"].setdefault("labels", {}).update(label["pairs"])
        for container in containers(obj):
            for image in kustomization.get("images", []):
                if container["image"] == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    return objects


def pod_spec(obj):
    if obj["kind"] == "Deployment":
        return obj["spec"]["template"]["spec"]
    if obj["kind"] == "Job":
        return obj["spec"]["template"]["spec"]
    return None


def containers(obj):
    spec = pod_spec(obj)
    return spec["containers"] if spec else []


def pod_labels(obj):
    return obj["spec"]["template"]["metadata"].get("labels", {})


def selects(selector, labels):
    return all(labels.get(key) == value for key, value in selector.items())


def duration_seconds(text):
    match = re.fullmatch(r"(\d+)(ms|s|m|h)?", text)
    factor = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    return int(match.group(1)) * factor


def relay_environment(objects):
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    environment = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name)
        environment.update(config["data"])
    for variable in container.get("env", []):
        environment[variable["name"]] = variable["value"]
    return deployment, container, environment


def cross_check(name, objects):
    deployment, container, environment = relay_environment(objects)
    labels = pod_labels(deployment)
    for obj in objects:
        kind = obj["kind"]
        if kind == "Service" and not selects(obj["spec"]["selector"], labels):
            problem(f"{name}: Service {obj['metadata']['name']} selects no relay pod")
        if kind in ("PodDisruptionBudget", "ServiceMonitor") and not selects(obj["spec"]["selector"]["matchLabels"], labels if kind == "PodDisruptionBudget" else service_labels(objects)):
            problem(f"{name}: {kind} {obj['metadata']['name']} selects nothing")
        if kind == "ServiceMonitor":
            ports = {p["name"] for s in objects if s["kind"] == "Service" for p in s["spec"]["ports"]}
            if any(e["port"] not in ports for e in obj["spec"]["endpoints"]):
                problem(f"{name}: ServiceMonitor names a port no Service has")
        if kind == "ScaledObject":
            check_scaled_object(name, obj, deployment, environment)
    autoscalers = [o for o in objects if o["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")]
    if len(autoscalers) > 1:
        problem(f"{name}: {len(autoscalers)} autoscalers drive one Deployment and would fight")
    grace = deployment["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    shutdown = duration_seconds(environment.get("FLEET_RELAY_SHUTDOWN_TIMEOUT", "20s"))
    if grace <= shutdown:
        problem(f"{name}: terminationGracePeriodSeconds {grace} does not outlast the relay's shutdown timeout {shutdown} s")
    for volume in deployment["spec"]["template"]["spec"].get("volumes", []):
        if "secret" in volume and volume["secret"].get("defaultMode") != 0o400:
            problem(f"{name}: Secret volume {volume['name']} is not mode 0400")
    if "FLEET_RELAY_KEY_FILE" not in environment and environment.get("FLEET_RELAY_SIGNER") not in ("iam", "token-service"):
        problem(f"{name}: the relay has neither a key file nor a remote signer")


SCALED_OBJECT_FIELDS = {"apiVersion", "kind", "metadata", "spec"}
SCALED_OBJECT_SPEC = {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod",
                      "advanced", "triggers", "idleReplicaCount", "fallback"}
KAFKA_TRIGGER = {"bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
                 "offsetResetPolicy", "allowIdleConsumers", "scaleToZeroOnInvalidOffset", "excludePersistentLag",
                 "limitToPartitionsWithLag", "version", "partitionLimitation", "sasl", "tls"}


def check_scaled_object(name, obj, deployment, environment):
    """KEDA's ScaledObject (keda.sh/v1alpha1) by hand: known fields, the relay as its target, and a
    Kafka trigger on the relay's own brokers, group and topic that never exceeds the partitions."""
    label = f"{name}: ScaledObject {obj['metadata']['name']}"
    spec = obj.get("spec", {})
    for unknown in (set(obj) - SCALED_OBJECT_FIELDS) | (set(spec) - SCALED_OBJECT_SPEC):
        problem(f"{label} has an unknown field {unknown}")
    target = spec.get("scaleTargetRef", {})
    if target.get("name") != deployment["metadata"]["name"] or target.get("kind", "Deployment") != "Deployment":
        problem(f"{label} does not target the relay's Deployment")
    minimum, maximum = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if not (isinstance(minimum, int) and isinstance(maximum, int) and 1 <= minimum <= maximum):
        problem(f"{label}: replica counts must be integers with 1 <= minReplicaCount <= maxReplicaCount")
    triggers = spec.get("triggers", [])
    if [t.get("type") for t in triggers] != ["kafka"]:
        problem(f"{label} must scale on one kafka trigger (consumer lag)")
        return
    metadata = triggers[0].get("metadata", {})
    for unknown in set(metadata) - KAFKA_TRIGGER:
        problem(f"{label}: the kafka trigger has an unknown field {unknown}")
    for field, variable in (("bootstrapServers", "FLEET_RELAY_BROKERS"), ("consumerGroup", "FLEET_RELAY_GROUP"),
                            ("topic", "FLEET_RELAY_TOPIC")):
        if metadata.get(field) != environment.get(variable):
            problem(f"{label}: the trigger's {field} {metadata.get(field)!r} is not the relay's {variable} {environment.get(variable)!r}")
    if metadata.get("allowIdleConsumers", "false") != "false":
        problem(f"{label}: allowIdleConsumers would scale past the partition count, where replicas sit idle")
    if not str(metadata.get("lagThreshold", "")).isdigit():
        problem(f"{label}: lagThreshold must be a whole number of records, as a string")
    if metadata.get("offsetResetPolicy") != "earliest":
        problem(f"{label}: offsetResetPolicy must be earliest, as the relay's auto.offset.reset is")


def service_labels(objects):
    return next(o["metadata"].get("labels", {}) for o in objects if o["kind"] == "Service")


def validate(objects, version, label):
    checkable = [o for o in objects if o["apiVersion"] not in ("monitoring.coreos.com/v1", "keda.sh/v1alpha1")]
    with tempfile.TemporaryDirectory() as scratch:
        paths = []
        for index, obj in enumerate(checkable):
            path = os.path.join(scratch, f"{index:02d}-{obj['kind'].lower()}.yaml")
            with open(path, "w") as handle:
                yaml.safe_dump(obj, handle)
            paths.append(path)
        result = subprocess.run(["kubernetes-validate", "--strict", "--quiet", "-k", version] + paths,
                                capture_output=True, text=True)
        if result.returncode != 0:
            problem(f"{label}: kubernetes-validate failed:\n{result.stdout}{result.stderr}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubernetes-version", default="1.33.0")
    parser.add_argument("--print-env", metavar="KUSTOMIZATION")
    parser.add_argument("--render-dir", help="also write each kustomization's rendered objects here (for checkov)")
    arguments = parser.parse_args()
    if arguments.print_env:
        _, container, environment = relay_environment(render(os.path.join(ROOT, arguments.print_env)))
        print(json.dumps({"args": container.get("args", []), "env": environment}))
        return 1 if problems else 0
    for directory in sorted(kustomizations()):
        name = os.path.relpath(directory, ROOT)
        objects = render(directory)
        cross_check(name, objects)
        if arguments.render_dir:
            target = os.path.join(arguments.render_dir, name.replace("/", "-") + ".yaml")
            os.makedirs(arguments.render_dir, exist_ok=True)
            with open(target, "w") as handle:
                yaml.safe_dump_all(objects, handle)
        validate(objects, arguments.kubernetes_version, name)
        print(f"{name}: {len(objects)} objects rendered and checked")
    jobs = os.path.join(K8S, "jobs")
    for entry in sorted(os.listdir(jobs)):
        validate(load_all(os.path.join(jobs, entry)), arguments.kubernetes_version, f"k8s/jobs/{entry}")
        print(f"k8s/jobs/{entry}: checked")
    for text in problems:
        print(f"error: {text}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
