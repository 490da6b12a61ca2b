#!/usr/bin/python3
"""Offline checks of cordon's deployment files (make test; ctest -R deploy).

- Every YAML file under deploy/ parses (python3-yaml), and every document in
  it validates against tests/deploy/schema.json for its kind
  (python3-jsonschema, draft 2020-12). The schema is closed: an unknown or
  misspelt field is an error.
- Across documents: a SandboxWarmPool names a SandboxTemplate that is
  defined; a Deployment's selector matches its pod labels and a Service's
  selector matches some pod; probes and Service targetPorts name ports the
  container has; every volumeMount names a volume; every pod runs the same
  image (the Containerfile's), and its cordon container runs `serve`; a
  pod in the node's user namespace mounts the node's /run/cordon/ids.
- The Containerfile: known instructions only, FROM first, a base from
  Debian, every COPY source present in the repository or the build tree.
- The systemd unit: `systemd-analyze verify` finds no directive it cannot
  parse (where systemd is installed; only the installed binary's absence
  is allowed).
- The validator itself: a document with a misspelt securityContext field,
  one with a bad enum value and a Deployment whose id leases are its own
  are rejected (the checks are not vacuous).

Prints one line per file and a verdict; exit status 1 on any problem.
"""

import copy
import json
import pathlib
import shutil
import subprocess
import sys

import jsonschema
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO / "tests/deploy/schema.json"
KINDS = {
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate"),
    ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool"),
}


def load_schema():
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def validator_for(schema, kind):
    sub = {"$ref": "#/$defs/" + kind, "$defs": schema["$defs"]}
    return jsonschema.Draft202012Validator(sub)


def schema_problems(schema, doc):
    if not isinstance(doc, dict):
        return ["a document must be a mapping, not " + type(doc).__name__]
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in KINDS:
        return [
            "apiVersion/kind %s/%s has no schema in %s (known: %s)"
            % (key[0], key[1], SCHEMA_PATH.relative_to(REPO),
               ", ".join(sorted(k for _, k in KINDS)))
        ]
    problems = []
    for e in sorted(validator_for(schema, key[1]).iter_errors(doc), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in e.absolute_path) or "(document)"
        problems.append("%s: %s" % (where, e.message))
    return problems


def pod_specs(doc):
    """(where, pod metadata, pod spec) of a document that makes pods."""
    kind = doc.get("kind")
    if kind == "Deployment":
        t = doc["spec"]["template"]
        return [("spec.template", t.get("metadata", {}), t["spec"])]
    if kind == "SandboxTemplate":
        t = doc["spec"]["podTemplate"]
        return [("spec.podTemplate", t.get("metadata", {}), t["spec"])]
    return []


def cross_problems(docs):
    problems = []
    templates = {d["metadata"]["name"] for _, d in docs if d.get("kind") == "SandboxTemplate"}
    pod_labels = []
    images = set()
    for name, d in docs:
        kind, meta = d.get("kind"), d["metadata"]["name"]
        at = "%s %s/%s" % (name, kind, meta)
        if kind == "SandboxWarmPool":
            ref = d["spec"]["sandboxTemplateRef"]["name"]
            if ref not in templates:
                problems.append("%s: sandboxTemplateRef.name %r names no SandboxTemplate in deploy/"
                                % (at, ref))
        if kind == "Deployment":
            want = d["spec"]["selector"].get("matchLabels", {})
            have = d["spec"]["template"].get("metadata", {}).get("labels", {})
            if not want or any(have.get(k) != v for k, v in want.items()):
                problems.append("%s: spec.selector.matchLabels %s does not match the pod labels %s"
                                % (at, want, have))
        for where, pod_meta, spec in pod_specs(d):
            pod_labels.append(pod_meta.get("labels", {}))
            volumes = {v["name"] for v in spec.get("volumes", [])}
            containers = spec.get("initContainers", []) + spec["containers"]
            for c in containers:
                images.add(c["image"])
                ports = {p.get("name") for p in c.get("ports", [])}
                ports |= {p["containerPort"] for p in c.get("ports", [])}
                for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                    port = c.get(probe, {}).get("httpGet", {}).get("port")
                    if port is not None and port not in ports:
                        problems.append("%s: %s.containers[%s].%s names port %r, which the "
                                        "container does not declare" % (at, where, c["name"], probe,
                                                                        port))
                for m in c.get("volumeMounts", []):
                    if m["name"] not in volumes:
                        problems.append("%s: %s.containers[%s] mounts volume %r, which is not in "
                                        "volumes" % (at, where, c["name"], m["name"]))
            main = spec["containers"][0]
            if main.get("args", [None])[0] != "serve":
                problems.append("%s: %s's first container must run `cordon serve` (args: [serve, "
                                "...]), not %s" % (at, where, main.get("args")))
            elif spec.get("hostUsers", True):
                problems += id_lease_problems("%s: %s" % (at, where), spec, main)
    for name, d in docs:
        if d.get("kind") != "Service":
            continue
        sel = d["spec"].get("selector", {})
        if not any(all(labels.get(k) == v for k, v in sel.items()) for labels in pod_labels):
            problems.append("%s Service/%s: selector %s matches no pod in deploy/"
                            % (name, d["metadata"]["name"], sel))
    if len(images) > 1:
        problems.append("the pods run different images %s: they should all run the one the "
                        "Containerfile builds" % sorted(images))
    return problems


def id_lease_problems(where, spec, container):
    """A pod in the node's user namespace leases its sandboxes' outside ids
    in the node's /run/cordon/ids, shared with every other such pod and with
    a cordon on the node: in a directory of its own, each pod would lease
    from the same first id, and two pods' sandboxes would share a host uid."""
    mounted = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    volume = next((v for v in spec.get("volumes", []) if v["name"] == mounted.get(IDS)), None)
    if volume is None or volume.get("hostPath", {}).get("path") != IDS:
        return ["%s: container %s must mount the node's %s (a hostPath volume) at %s: its "
                "sandboxes' id leases must be seen by every pod of the node"
                % (where, container["name"], IDS, IDS)]
    return []


IDS = "/run/cordon/ids"

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
                "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK",
                "SHELL"}


def containerfile_problems(path):
    """The syntax podman/buildah would read, as far as it can be checked here."""
    problems = []
    lines, current = [], ""
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        current += (" " if current else "") + stripped.rstrip("\\").strip()
        if stripped.endswith("\\"):
            continue
        lines.append((number, current))
        current = ""
    if current:
        problems.append("%s: the last instruction ends with a line continuation" % path.name)
    if not lines or not lines[0][1].upper().startswith("FROM "):
        problems.append("%s: the first instruction must be FROM" % path.name)
    for number, text in lines:
        word = text.split(None, 1)[0]
        if word.upper() not in INSTRUCTIONS:
            problems.append("%s:%d: unknown instruction %r" % (path.name, number, word))
            continue
        if word.upper() == "FROM" and not text.split()[1].startswith("debian:"):
            problems.append("%s:%d: the base must be Debian's image (debian:bookworm)"
                            % (path.name, number))
        if word.upper() == "COPY":
            args = [a for a in text.split()[1:] if not a.startswith("--")]
            if args and args[0].startswith("["):
                problems.append("%s:%d: use the plain COPY form" % (path.name, number))
                continue
            for src in args[:-1]:
                if not (REPO / src).exists() and not src.startswith("build/"):
                    problems.append("%s:%d: COPY source %s does not exist in the repository"
                                    % (path.name, number, src))
        if word.upper() in ("ENTRYPOINT", "CMD") and text.split(None, 1)[1].startswith("["):
            try:
                json.loads(text.split(None, 1)[1])
            except ValueError as e:
                problems.append("%s:%d: %s is not a JSON array: %s" % (path.name, number, word, e))
    return problems


def unit_problems(path):
    """What systemd's own parser says of the unit (no running systemd needed)."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None
    out = subprocess.run([tool, "verify", str(path)], capture_output=True, text=True, timeout=30)
    lines = (out.stdout + out.stderr).splitlines()
    # ExecStart names the installed path (/usr/local/bin/cordon), not the build.
    return ["%s: %s" % (path.name, l) for l in lines if l.strip() and "is not executable" not in l]


def self_test(schema, docs):
    """The validator rejects what it should: mutations of a real document."""
    problems = []
    deployment = next((d for _, d in docs if d.get("kind") == "Deployment"), None)
    pool = next((d for _, d in docs if d.get("kind") == "SandboxWarmPool"), None)
    if deployment is None or pool is None:
        return ["self-test: deploy/ has no Deployment or no SandboxWarmPool to mutate"]
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privilegd"] = True
    if not schema_problems(schema, bad):
        problems.append("self-test: a misspelt securityContext field was accepted")
    bad = copy.deepcopy(pool)
    bad["spec"]["updateStrategy"] = {"type": "Rolling"}
    if not schema_problems(schema, bad):
        problems.append("self-test: SandboxWarmPool updateStrategy.type 'Rolling' was accepted")
    bad = copy.deepcopy(pool)
    bad["spec"]["replicas"] = -1
    if not schema_problems(schema, bad):
        problems.append("self-test: SandboxWarmPool replicas -1 was accepted")
    bad = copy.deepcopy(deployment)
    for v in bad["spec"]["template"]["spec"]["volumes"]:
        if v.get("hostPath", {}).get("path") == IDS:
            v.pop("hostPath")
            v["emptyDir"] = {}
    if not any(IDS in p for p in cross_problems([("self-test", bad)])):
        problems.append("self-test: a Deployment leasing ids in a directory of its own was accepted")
    return problems


def main():
    schema = load_schema()
    failures = 0
    docs = []
    files = sorted(p for p in (REPO / "deploy").rglob("*") if p.suffix in (".yaml", ".yml"))
    if not files:
        print("FAIL: no YAML files under deploy/")
        return 1
    for path in files:
        rel = path.relative_to(REPO)
        try:
            loaded = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except yaml.YAMLError as e:
            print("FAIL %s: does not parse: %s" % (rel, e))
            failures += 1
            continue
        problems = []
        for i, d in enumerate(loaded):
            for p in schema_problems(schema, d):
                problems.append("document %d (%s): %s" % (i + 1, d.get("kind", "?")
                                                          if isinstance(d, dict) else "?", p))
        if problems:
            failures += 1
            print("FAIL %s" % rel)
            for p in problems:
                print("  " + p)
        else:
            print("ok   %s: %d documents (%s)"
                  % (rel, len(loaded), ", ".join(d["kind"] for d in loaded)))
            docs += [(str(rel), d) for d in loaded]
    unit = unit_problems(REPO / "deploy/systemd/cordon.service")
    if unit is None:
        print("skip systemd unit: systemd-analyze is not installed")
    for label, problems in (("cross-document", cross_problems(docs) if not failures else []),
                            ("systemd unit (systemd-analyze verify)", unit or []),
                            ("Containerfile", containerfile_problems(REPO / "Containerfile")),
                            ("validator self-test", self_test(schema, docs))):
        if problems:
            failures += 1
            print("FAIL %s" % label)
            for p in problems:
                print("  " + p)
        else:
            print("ok   %s" % label)
    print("deploy manifests: %s" % ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
