"""A stand-in Kubernetes API server, for the faults a real one cannot be made to give at a
chosen moment.

The kubernetes driver runs on a real cluster in tests/kubernetes/ (test_driver.py,
test_driver_hpa.py and the end-to-end tests). This double is left for what cannot be caused
there on demand: a 5xx or a 429 answer to one chosen call (`fail_next`), a read that misses an
object another controller has just created (a create race: `fail_next(404)` on the read,
then the real 409 on the create), and another client's write between the driver's read and
its replace (`change_before_next`). The tests that use it are in
tests/drivers/test_kubernetes.py and tests/drivers/test_kubernetes_hpa.py, each saying so.

It serves the real REST paths the official client uses for what the driver does, and nothing
else:

- `/apis/apps/v1/namespaces/{ns}/deployments[/{name}]`
- `/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects[/{name}]`
- `/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers[/{name}]`
- `/api/v1/namespaces/{ns}/pods` (GET: always empty; no pods run here)

with GET (one, or a list filtered by `labelSelector` equality terms), POST (201, or 409 when
the name exists), PUT (optimistic concurrency on `metadata.resourceVersion`: 409 on a stale
one) and DELETE (404 when absent), answering Kubernetes `Status` documents on errors. It
validates nothing, has no garbage collector and runs nothing: the real server's behaviour is
tested on the real server.
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
from typing import Any
from urllib.parse import parse_qs, urlsplit

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


class ApiServerDouble:
    """The objects, the request log and the injected faults of one double."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        #: (status, plural or None, method or None) of the answers to inject, in order.
        self.faults: list[tuple[int, str | None, str | None]] = []
        #: (method, plural) of the requests before which another client writes the object.
        self.changes: list[tuple[str, str]] = []
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

    def fail_next(
        self, status: int, times: int = 1, *, plural: str | None = None, method: str | None = None
    ) -> None:
        """Answer the next `times` requests (on `plural`, with `method`, when given) with
        `status`, without doing them."""
        self.faults.extend([(status, plural, method)] * times)

    def change_before_next(self, method: str, plural: str) -> None:
        """Just before the next `method` request on an object of `plural`, another client
        writes that object (its resourceVersion moves on), as a controller or an autoscaler
        writing its status would between the driver's read and its write."""
        self.changes.append((method, plural))

    def of_kind(self, plural: str, namespace: str = "default") -> list[dict[str, Any]]:
        return [
            o for (p, ns, _), o in sorted(self.objects.items()) if (p, ns) == (plural, namespace)
        ]

    def writes(self) -> Iterator[tuple[str, str, Any]]:
        """(method, path, body) of every POST, PUT and DELETE the client sent."""
        return (r for r in self.requests if r[0] in ("POST", "PUT", "DELETE"))

    # -- request handling (under self.lock) -----------------------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        self.requests.append((method, path, body))
        match = _PATH.match(path)
        plural = match["plural"] if match is not None else None
        for i, (code, plural_only, method_only) in enumerate(self.faults):
            if plural_only in (None, plural) and method_only in (None, method):
                del self.faults[i]
                return code, _status(code, "Injected", "injected fault")
        if match is None:
            return 404, _status(404, "NotFound", f"the server could not find {path}")
        plural, ns, name = match["plural"], match["ns"], match["name"]
        api_version = match["group"] or match["core"]
        if _GROUPS[plural] != api_version:
            return 404, _status(404, "NotFound", f"the server could not find {path}")
        if (method, plural) in self.changes and (plural, ns, name) in self.objects:
            self.changes.remove((method, plural))
            changed = self.objects[(plural, ns, name)]["metadata"]
            changed["resourceVersion"] = str(next(self._versions))
        if name is None and method == "GET":
            return self._list(plural, ns, api_version, query)  # pods: none run here
        if plural == "pods":
            return 405, _status(405, "MethodNotAllowed", f"the double does not {method} pods")
        if name is None and method == "POST":
            return self._create(plural, ns, body)
        if name is None:
            return 405, _status(405, "MethodNotAllowed", method)
        return self._item(method, plural, ns, name, body)

    def _list(
        self, plural: str, ns: str, api_version: str, query: dict[str, list[str]]
    ) -> tuple[int, Any]:
        selector = (query.get("labelSelector") or [""])[0]
        objects = self.of_kind(plural, ns)
        items = [o for o in objects if matches(o["metadata"].get("labels") or {}, selector)]
        meta = {"resourceVersion": str(next(self._versions))}
        kind = f"{_KINDS[plural]}List"
        return 200, {"apiVersion": api_version, "kind": kind, "metadata": meta, "items": items}

    def _item(self, method: str, plural: str, ns: str, name: str, body: Any) -> tuple[int, Any]:
        current = self.objects.get((plural, ns, name))
        if current is None:
            return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
        if method == "GET":
            return 200, current
        if method == "DELETE":
            del self.objects[(plural, ns, name)]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}}
        if method == "PUT":
            wanted = body.get("metadata", {}).get("resourceVersion")
            if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified")
            return 200, self._store(plural, ns, body, current)
        return 405, _status(405, "MethodNotAllowed", method)

    def _create(self, plural: str, ns: str, body: Any) -> tuple[int, Any]:
        name = body.get("metadata", {}).get("name")
        if (plural, ns, name) in self.objects:
            return 409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists')
        return 201, self._store(plural, ns, body, None)

    def _store(
        self, plural: str, ns: str, body: Any, current: dict[str, Any] | None
    ) -> dict[str, Any]:
        manifest = copy.deepcopy(body)
        meta = manifest.setdefault("metadata", {})
        meta["namespace"] = ns
        meta["uid"] = current["metadata"]["uid"] if current else str(uuid.uuid4())
        meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
        meta["generation"] = (current["metadata"]["generation"] + 1) if current else 1
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(plural, ns, meta["name"])] = manifest
        return manifest


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

        do_GET = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
