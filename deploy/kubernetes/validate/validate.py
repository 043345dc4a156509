"""Validates Kubernetes manifests offline, without a cluster.

Every YAML document is checked against the Kubernetes API's JSON schema for its apiVersion and
kind (PyPI's kubernetes-validate, pinned in requirements.txt, ships those schemas, so no network
is needed), in strict mode so that a misspelt field is refused rather than silently dropped by
the API server. Then the documents together are checked against what a ddpd deployment needs
(deploy/README.md, "Kubernetes"). Prints one line per problem, naming the file, the document
and the field, and exits 1 if there is any.

    validate.py [--kubernetes-version X.Y.Z] FILE...
"""

import argparse
import re
import sys

import kubernetes_validate
import yaml
from kubernetes_validate.utils import VersionNotSupportedError, all_versions, major_minor

# The Kubernetes release whose API the manifests are checked against by default: the newest that
# kubernetes-validate 1.37.0 (requirements.txt) ships schemas for. Raise it with that pin.
DEFAULT_KUBERNETES_VERSION = "1.37.0"

# What an apiVersion and a kind look like. kubernetes-validate makes a schema's file name from
# them, so anything else (a "/" or ".." in a kind) is refused before it reaches the file system.
API_VERSION = re.compile(r"^([a-z0-9][a-z0-9.-]*/)?v[0-9a-z]+$")
KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")

# jsonschema's type names as a message says them.
TYPE_NAMES = {"integer": "an integer", "number": "a number", "string": "a string",
              "boolean": "a boolean", "object": "an object", "array": "an array"}


class Document:
    """One YAML document: its parsed content and how problems name it."""

    def __init__(self, file, number, data):
        self.file = file
        self.data = data
        self.kind = data.get("kind")
        self.name = text(get(data, "metadata", "name"))
        # By kind and name as kubectl does; by its place in the file when it has neither.
        self.where = (f"{file}: {self.kind or '?'} {self.name or '?'}" if self.kind or self.name
                      else f"{file}: document {number}")


# A broken document may hold anything anywhere; these read it without raising, so that the
# schema's one clear message is what reports it rather than a traceback here.

def get(data, *path):
    """The value at path in nested dicts, or None where any step is missing (like JS's ?.)."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def items(value):
    """A list's dict items; nothing when the value is not a list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def text(value):
    """A string value, or None for anything else (names compared and put in sets)."""
    return value if isinstance(value, str) else None


# --- Parsing and the Kubernetes API's schemas ---------------------------------------------------

def load_documents(file, problems):
    """The file's non-empty YAML documents as dicts; a file that is not YAML is one problem."""
    try:
        with open(file, encoding="utf-8") as stream:
            parsed = list(yaml.safe_load_all(stream))
    except OSError as error:
        problems.append(f"{file}: cannot read: {error.strerror}")
        return []
    except yaml.YAMLError as error:
        problems.append(f"{file}: not YAML: {' '.join(str(error).split())}")
        return []
    documents = []
    for index, data in enumerate(parsed):
        if data is None:
            continue  # an empty document, e.g. after a trailing ---
        if not isinstance(data, dict):
            problems.append(f"{file}: document {index + 1}: not a Kubernetes object "
                            f"(a mapping with apiVersion and kind)")
            continue
        documents.append(Document(file, index + 1, data))
    return documents


def field_path(path):
    """A schema error's path as data/spec/ports/0, the form the messages name fields in."""
    return "/".join(["data", *(str(step) for step in path)])


def type_names(types):
    """A schema's type (a name or a list, null left out) as 'an integer or a string'."""
    types = [types] if isinstance(types, str) else list(types)
    return " or ".join(TYPE_NAMES.get(t, t) for t in types if t != "null")


def describe(error):
    """A jsonschema error as 'data/FIELD must ...'; jsonschema's own wording where none fits."""
    at = field_path(error.path)
    instance, rule, value = error.instance, error.validator, error.validator_value
    if rule == "type":
        return f"{at} must be {type_names(value)}, not {instance!r}"
    if rule == "required" and isinstance(instance, dict):
        missing = [name for name in value if name not in instance]
        return f"{at} must have required property {', '.join(missing)}"
    if rule == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties", {})
        unknown = [name for name in instance if name not in known]
        if unknown:
            return "; ".join(f"{at}/{name} is an unknown field (not in the API schema)"
                             for name in unknown)
    if rule == "enum":
        return f"{at} must be one of {', '.join(map(repr, value))}, not {instance!r}"
    if rule in ("oneOf", "anyOf") and all(set(s) == {"type"} for s in value):
        # Kubernetes' int-or-string and quantities: a choice between types.
        return f"{at} must be {' or '.join(type_names(s['type']) for s in value)}, not {instance!r}"
    return f"{at}: {error.message}"


def check_schema(document, version, problems):
    """Problems of one document against the API schema; False when its kind has no schema."""
    api_version, kind = document.data.get("apiVersion"), document.kind
    if not isinstance(api_version, str) or not isinstance(kind, str):
        problems.append(f"{document.where}: needs apiVersion and kind (strings)")
        return False
    unknown = (f"{document.where}: unknown apiVersion/kind {api_version}/{kind} "
               f"(no schema for it in Kubernetes {major_minor(version)})")
    if not API_VERSION.match(api_version) or not KIND.match(kind):
        problems.append(unknown)
        return False
    try:
        kubernetes_validate.validate(document.data, version, strict=True)
    except (kubernetes_validate.SchemaNotFoundError, VersionNotSupportedError):
        # The version was checked against the shipped ones; this is a group with no schemas.
        problems.append(unknown)
        return False
    except kubernetes_validate.ValidationError as error:
        problems.append(f"{document.where}: {describe(error)}")
    return True


# --- ddpd's own requirements --------------------------------------------------------------------

def check_workers(of, problems, everywhere):
    """Workers run as a StatefulSet behind a headless Service (stable pod names) or an indexed
    Job (one rank per index). Returns the workload documents that run workers."""
    stateful_sets = of("StatefulSet")
    indexed_jobs = [d for d in of("Job") if get(d.data, "spec", "completionMode") == "Indexed"]
    if not stateful_sets and not indexed_jobs:
        problems.append(f"{everywhere}: workers: no StatefulSet or indexed Job")
    for document in stateful_sets:
        service_name = get(document.data, "spec", "serviceName")
        service = next((s for s in of("Service")
                        if service_name is not None and s.name == service_name), None)
        if service is None:
            problems.append(f"{document.where}: spec/serviceName names no Service in these "
                            f"manifests")
        elif get(service.data, "spec", "clusterIP") != "None":
            problems.append(f"{document.where}: its Service {service_name} is not headless "
                            f"(spec/clusterIP: None)")
    return stateful_sets + indexed_jobs


def runs_coordinator(document):
    """Whether a Deployment's pods run ddpd-coordinator."""
    containers = items(get(document.data, "spec", "template", "spec", "containers"))
    return any("ddpd-coordinator" in c["command"] for c in containers
               if isinstance(c.get("command"), list))


def selects(service, labels):
    """Whether a non-headless Service's selector picks pods with these labels."""
    selector = get(service.data, "spec", "selector")
    # An empty selector selects no pods (the Service's endpoints are managed by hand).
    return (isinstance(selector, dict) and bool(selector) and isinstance(labels, dict)
            and get(service.data, "spec", "clusterIP") != "None"
            and all(labels.get(key) == value for key, value in selector.items()))


def check_coordinator(of, problems, everywhere):
    """Exactly one coordinator Deployment (it owns the SQLite store), reached through a Service
    that selects its pods. Returns the coordinator Deployments."""
    coordinators = [d for d in of("Deployment") if runs_coordinator(d)]
    if not coordinators:
        problems.append(f"{everywhere}: coordinator: no Deployment running ddpd-coordinator")
    elif len(coordinators) > 1:
        problems.append(f"{everywhere}: coordinator: {len(coordinators)} Deployments run "
                        f"ddpd-coordinator; one owns the SQLite store")
    for document in coordinators:
        labels = get(document.data, "spec", "template", "metadata", "labels")
        if not any(selects(s, labels) for s in of("Service")):
            problems.append(f"{document.where}: no Service selects the coordinator's pods")
    return coordinators


def check_container(container, where, secrets, problems):
    """A container is probed (restarted when stuck, sent traffic once ready), requests what it
    needs, and reads DDPD_TOKEN from a Secret in these manifests, never from plain text."""
    at = f"{where}: container {container.get('name')}"
    if not container.get("readinessProbe"):
        problems.append(f"{at}: no readinessProbe")
    if not container.get("livenessProbe"):
        problems.append(f"{at}: no livenessProbe")
    if not (get(container, "resources", "requests", "cpu")
            and get(container, "resources", "requests", "memory")):
        problems.append(f"{at}: resources/requests needs cpu and memory")
    token = next((e for e in items(container.get("env")) if e.get("name") == "DDPD_TOKEN"), None)
    secret_ref = get(token, "valueFrom", "secretKeyRef")
    if not secret_ref:
        problems.append(f"{at}: DDPD_TOKEN must come from a Secret "
                        f"(env/valueFrom/secretKeyRef)")
    elif text(get(secret_ref, "name")) not in secrets:
        problems.append(f"{at}: DDPD_TOKEN's Secret {get(secret_ref, 'name')} is not in these "
                        f"manifests")


def claim_names(documents):
    """The PersistentVolumeClaims the documents' pods mount, by name."""
    volumes = [volume for d in documents
               for volume in items(get(d.data, "spec", "template", "spec", "volumes"))]
    return [get(v, "persistentVolumeClaim", "claimName") for v in volumes
            if get(v, "persistentVolumeClaim", "claimName")]


def check_pods(workloads, of, problems):
    """Every workload's containers (check_container) and the claims its volumes name."""
    secrets = {d.name for d in of("Secret")}
    claims = {d.name for d in of("PersistentVolumeClaim")}
    for document in workloads:
        pod = get(document.data, "spec", "template", "spec")
        for container in items(get(pod, "containers")):
            check_container(container, document.where, secrets, problems)
        for volume in items(get(pod, "volumes")):
            claim = get(volume, "persistentVolumeClaim", "claimName")
            if claim and text(claim) not in claims:
                problems.append(f"{document.where}: volume {volume.get('name')} claims {claim}, "
                                f"not in these manifests")


def check_ddpd(documents, files, problems):
    """What a ddpd deployment needs across the documents (deploy/README.md)."""
    def of(kind):
        return [d for d in documents if d.kind == kind]
    # Problems of the whole set name every file, since no one document is at fault.
    everywhere = ", ".join(files)
    workers = check_workers(of, problems, everywhere)
    coordinators = check_coordinator(of, problems, everywhere)
    check_pods(of("Deployment") + workers, of, problems)
    # Both must survive a pod's restart: the job history and the checkpoints a job resumes from.
    if not claim_names(coordinators):
        problems.append(f"{everywhere}: coordinator: its SQLite store is on no "
                        f"PersistentVolumeClaim")
    if not claim_names(workers):
        problems.append(f"{everywhere}: workers: checkpoints are on no PersistentVolumeClaim")


# --- Command line --------------------------------------------------------------------------------

def parse_arguments():
    parser = argparse.ArgumentParser(
        description="Validates Kubernetes manifests against the Kubernetes API's JSON schemas "
                    "(kubernetes-validate, offline) and what a ddpd deployment needs.")
    parser.add_argument("--kubernetes-version", default=DEFAULT_KUBERNETES_VERSION,
                        metavar="X.Y.Z",
                        help=f"the Kubernetes API to check against "
                             f"(default {DEFAULT_KUBERNETES_VERSION})")
    parser.add_argument("files", nargs="+", metavar="FILE")
    arguments = parser.parse_args()
    # kubernetes-validate picks the newest schema not newer than the version asked for, comparing
    # versions as strings; asking only for a release it ships keeps that choice exact.
    version = arguments.kubernetes_version.removeprefix("v")
    shipped = [major_minor(v) for v in all_versions()]
    if major_minor(version) not in shipped:
        parser.error(f"--kubernetes-version {arguments.kubernetes_version}: kubernetes-validate "
                     f"{kubernetes_validate.__version__} has schemas for Kubernetes "
                     f"{shipped[0]} to {shipped[-1]}")
    arguments.kubernetes_version = version
    return arguments


def main():
    arguments = parse_arguments()
    problems, documents = [], []
    for file in arguments.files:
        for document in load_documents(file, problems):
            if check_schema(document, arguments.kubernetes_version, problems):
                documents.append(document)
    check_ddpd(documents, arguments.files, problems)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"valid: {len(documents)} documents ({', '.join(d.kind for d in documents)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
