"""A stand-in Kubernetes API server: no cluster can run where these tests run.

It serves the real REST paths the official client uses for what the kubernetes driver does,
and nothing else:

- `/apis/apps/v1/namespaces/{ns}/deployments[/{name}]`
- `/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects[/{name}]`
- `/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers[/{name}]`
- `/api/v1/namespaces/{ns}/pods[/{name}]` (GET only: a test plays the kubelet, `put_pod`)

with GET (one, or a list filtered by `labelSelector` equality terms), POST (201, or 409 when
the name exists), PUT (optimistic concurrency on `metadata.resourceVersion`: 409 on a stale
one), PATCH (JSON merge patch) and DELETE (404 when absent), answering Kubernetes `Status`
documents on errors. Like a real API server it refuses what its schemas refuse (422):
Deployments and HorizontalPodAutoscalers are checked with `kubernetes-validate` (Kubernetes
1.29, strict: the JSON schemas it ships are generated from the upstream OpenAPI document),
ScaledObjects with the KEDA schema in `schemas/`. Deleting an object also deletes the objects
whose `metadata.ownerReferences` name its uid, as the garbage collector does (at once, not in
the background). It does not run pods, roll Deployments or scale anything: a test that needs
pods (a crash loop, say) stores them as the kubelet would report them (`put_pod`).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import kubernetes_validate

KUBERNETES_VERSION = "1.29"
SCHEMAS = Path(__file__).parent / "schemas"
SCALED_OBJECT_SCHEMA = json.loads((SCHEMAS / "keda-scaledobject-v1alpha1.json").read_text())
TRIGGER_AUTHENTICATION_SCHEMA = json.loads(
    (SCHEMAS / "keda-triggerauthentication-v1alpha1.json").read_text()
)

_PATH = re.compile(
    r"^/api(?:s/(?P<group>apps/v1|keda\.sh/v1alpha1|autoscaling/v2)|/(?P<core>v1))"
    r"/namespaces/(?P<ns>[^/]+)/"
    r"(?P<plural>deployments|scaledobjects|horizontalpodautoscalers|pods)"
    r"(?:/(?P<name>[^/]+))?$"
)
_KINDS = {
    "deployments": "Deployment",
    "scaledobjects": "ScaledObject",
    "horizontalpodautoscalers": "HorizontalPodAutoscaler",
    "pods": "Pod",
}
_GROUPS = {
    "deployments": "apps/v1",
    "scaledobjects": "keda.sh/v1alpha1",
    "horizontalpodautoscalers": "autoscaling/v2",
    "pods": "v1",
}
#: Objects only the cluster itself writes: read-only through the API.
_READ_ONLY = frozenset({"pods"})


def validate(manifest: dict[str, Any]) -> None:
    """Raise when `manifest` is not valid for its kind (Kubernetes 1.29 or our KEDA schema)."""
    kind = manifest.get("kind")
    if kind == "ScaledObject":
        jsonschema.validate(manifest, SCALED_OBJECT_SCHEMA)
    elif kind == "TriggerAuthentication":
        jsonschema.validate(manifest, TRIGGER_AUTHENTICATION_SCHEMA)
    else:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def matches(labels: dict[str, str], selector: str) -> bool:
    """Equality-based label selector: `a=b,c==d,e!=f`."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        else:
            k, v = re.split("==?", term, maxsplit=1)
            if labels.get(k) != v:
                return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


class ApiServerDouble:
    """The objects, the request log and injected faults of one double."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.faults: list[tuple[int, str | None]] = []
        self.lock = threading.Lock()
        self._versions = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ApiServerDouble:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def fail_next(self, status: int, times: int = 1, *, plural: str | None = None) -> None:
        """Answer the next `times` requests (on `plural` only, when given) with `status`."""
        self.faults.extend([(status, plural)] * times)

    def of_kind(self, plural: str, namespace: str = "default") -> list[dict[str, Any]]:
        return [
            o for (p, ns, _), o in sorted(self.objects.items()) if (p, ns) == (plural, namespace)
        ]

    def put_pod(self, pod: dict[str, Any], namespace: str = "default") -> None:
        """Store (or replace) a Pod as the cluster would report it: what the kubelet does
        (its `status.containerStatuses`: restarts, last termination) is the test's to say."""
        with self.lock:
            meta = pod.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta["namespace"] = namespace
            meta["resourceVersion"] = str(next(self._versions))
            self.objects[("pods", namespace, meta["name"])] = copy.deepcopy(pod)

    def writes(self) -> Iterator[dict[str, Any]]:
        """Every body the client sent with POST or PUT."""
        return (body for method, _, body in self.requests if method in ("POST", "PUT"))

    # -- request handling (under self.lock) -----------------------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        self.requests.append((method, path, body))
        match = _PATH.match(path)
        for i, (code, plural_only) in enumerate(self.faults):
            if plural_only is None or (match is not None and match["plural"] == plural_only):
                del self.faults[i]
                return code, _status(code, "Injected", "injected fault")
        if match is None:
            return 404, _status(404, "NotFound", f"the server could not find {path}")
        plural, ns, name = match["plural"], match["ns"], match["name"]
        api_version = match["group"] or match["core"]
        if _GROUPS[plural] != api_version:
            return 404, _status(404, "NotFound", f"the server could not find {path}")
        if plural in _READ_ONLY and method != "GET":
            return 405, _status(405, "MethodNotAllowed", f"the double does not {method} {plural}")
        if name is None and method == "GET":
            selector = (query.get("labelSelector") or [""])[0]
            items = [
                o for o in self.of_kind(plural, ns)
                if matches(o["metadata"].get("labels") or {}, selector)
            ]  # fmt: skip
            kind = f"{_KINDS[plural]}List"
            meta = {"resourceVersion": str(next(self._versions))}
            return 200, {"apiVersion": api_version, "kind": kind, "metadata": meta, "items": items}
        if name is None and method == "POST":
            return self._create(plural, ns, body)
        if name is None:
            return 405, _status(405, "MethodNotAllowed", method)
        return self._item(method, plural, ns, name, body)

    def _item(self, method: str, plural: str, ns: str, name: str, body: Any) -> tuple[int, Any]:
        current = self.objects.get((plural, ns, name))
        if current is None:
            return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
        if method == "GET":
            return 200, current
        if method == "DELETE":
            del self.objects[(plural, ns, name)]
            self._collect_dependents(ns, current["metadata"]["uid"])
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}}
        if method == "PUT":
            wanted = body.get("metadata", {}).get("resourceVersion")
            if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified")
            return self._store(plural, ns, body, current)
        if method == "PATCH":
            return self._store(plural, ns, merge_patch(current, body), current)
        return 405, _status(405, "MethodNotAllowed", method)

    def _collect_dependents(self, ns: str, uid: str) -> None:
        """Delete what `uid` owned (and what that owned), as the garbage collector would."""
        for where, o in list(self.objects.items()):
            owners = o["metadata"].get("ownerReferences") or []
            if where[1] == ns and where in self.objects and any(r["uid"] == uid for r in owners):
                del self.objects[where]
                self._collect_dependents(ns, o["metadata"]["uid"])

    def _create(self, plural: str, ns: str, body: Any) -> tuple[int, Any]:
        name = body.get("metadata", {}).get("name")
        if (plural, ns, name) in self.objects:
            return 409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists')
        code, stored = self._store(plural, ns, body, None)
        return (201 if code == 200 else code), stored

    def _store(
        self, plural: str, ns: str, body: Any, current: dict[str, Any] | None
    ) -> tuple[int, Any]:
        manifest = copy.deepcopy(body)
        meta = manifest.setdefault("metadata", {})
        for server_field in ("resourceVersion", "uid", "creationTimestamp", "generation"):
            meta.pop(server_field, None)
        try:
            validate(manifest)
        except Exception as exc:  # noqa: BLE001  (kubernetes_validate raises several kinds)
            message = str(exc).splitlines()[0]
            return 422, _status(422, "Invalid", message)
        if manifest.get("kind") != _KINDS[plural]:
            return 400, _status(400, "BadRequest", f"a {manifest.get('kind')} is no {plural}")
        if meta.get("namespace", ns) != ns:
            return 400, _status(400, "BadRequest", "namespace does not match the path")
        meta["namespace"] = ns
        meta["uid"] = current["metadata"]["uid"] if current else str(uuid.uuid4())
        meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
        meta["generation"] = (current["metadata"]["generation"] + 1) if current else 1
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(plural, ns, meta["name"])] = manifest
        return 200, manifest


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _handler(double: ApiServerDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            with double.lock:
                code, answer = double.handle(self.command, url.path, parse_qs(url.query), body)
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
