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
import posixpath
import re
import shlex
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
    return any(is_coordinator(c) for c in containers)


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


def command_words(container):
    """A container's command and args as words; a shell's -c script split as the shell would."""
    words = [w for w in (container.get("command") or []) + (container.get("args") or [])
             if isinstance(w, str)]
    if len(words) >= 2 and posixpath.basename(words[0]) in ("sh", "bash") and "-c" in words:
        script = " ".join(words[words.index("-c") + 1:])
        try:
            return words[:words.index("-c") + 1] + shlex.split(script)
        except ValueError:
            return words
    return words


def is_coordinator(container):
    """Whether a container runs ddpd-coordinator (by any path, or from a shell's -c script)."""
    return any(posixpath.basename(w) == "ddpd-coordinator" for w in command_words(container))


def db_argument(container):
    """The coordinator's --db argument as given (the last one wins), or None."""
    words, path = command_words(container), None
    for index, word in enumerate(words):
        if word == "--db" and index + 1 < len(words):
            path = words[index + 1]
        elif word.startswith("--db="):
            path = word[len("--db="):]
    return path


def store_mount(container, path):
    """The volume mount that holds the directory of path (the store's -wal, -shm and .lock files
    live beside it): the deepest whose mountPath is that directory or above it; None if none."""
    directory = posixpath.dirname(path)
    mounts = []
    for mount in items(container.get("volumeMounts")):
        mount_path = text(mount.get("mountPath"))
        if mount_path and posixpath.isabs(mount_path):
            mount_path = posixpath.normpath(mount_path)
            if directory == mount_path or directory.startswith(mount_path.rstrip("/") + "/"):
                mounts.append((len(mount_path), mount))
    return max(mounts, key=lambda pair: pair[0])[1] if mounts else None


def check_rollout(document, problems):
    """One coordinator pod at a time: replicas 1 (the API's default when absent) and the
    Recreate strategy, which stops the old pod before it starts the new one."""
    replicas = get(document.data, "spec", "replicas")
    if replicas is not None and replicas != 1:
        problems.append(f"{document.where}: spec/replicas must be 1, not {replicas!r}: one "
                        f"coordinator owns the SQLite store")
    strategy = get(document.data, "spec", "strategy", "type")
    if strategy != "Recreate":
        problems.append(f"{document.where}: spec/strategy/type must be Recreate, not "
                        f"{strategy or 'RollingUpdate (the default)'}: a rolling update runs "
                        f"two coordinators on one store")


def check_store_volume(document, container, claims, problems):
    """The container's --db is an absolute path on a ReadWriteOnce PersistentVolumeClaim."""
    at = f"{document.where}: container {container.get('name')}"
    path = db_argument(container)
    if path is None or not posixpath.isabs(path):
        problems.append(f"{at}: --db must be an absolute path on the store's volume, not "
                        f"{path or 'the default ddpd.db in the working directory'}")
        return
    path = posixpath.normpath(path)
    mount = store_mount(container, path)
    if mount is None:
        problems.append(f"{at}: --db {path} is on no volume (the container's own file system "
                        f"is lost with the pod)")
        return
    volumes = {text(v.get("name")): v
               for v in items(get(document.data, "spec", "template", "spec", "volumes"))}
    claim = text(get(volumes.get(text(mount.get("name"))), "persistentVolumeClaim", "claimName"))
    if claim is None:
        problems.append(f"{at}: --db {path} is on volume {mount.get('name')}, which is no "
                        f"PersistentVolumeClaim (the store must outlive the pod)")
    elif claim in claims:  # check_pods names a claim that is not in these manifests
        modes = get(claims[claim].data, "spec", "accessModes")
        modes = [m for m in modes if isinstance(m, str)] if isinstance(modes, list) else []
        if not {"ReadWriteOnce", "ReadWriteOncePod"} & set(modes):
            problems.append(f"{claims[claim].where}: spec/accessModes must be ReadWriteOnce "
                            f"(or ReadWriteOncePod), not {', '.join(modes) or 'none'}: it "
                            f"holds the coordinator's store (--db {path})")


def check_store(document, of, problems):
    """A coordinator restarted on the same --db adopts the jobs still running (docs/systemd.md),
    so the store outlives the pod, and never do two coordinators open it."""
    check_rollout(document, problems)
    claims = {d.name: d for d in of("PersistentVolumeClaim")}
    for container in items(get(document.data, "spec", "template", "spec", "containers")):
        if is_coordinator(container):
            check_store_volume(document, container, claims, problems)


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
    # Both must survive a pod's restart: the job store (which a restarted coordinator adopts
    # running jobs from) and the checkpoints a job resumes from.
    for document in coordinators:
        check_store(document, of, problems)
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
