"""Schemathesis hooks for tests/openapi_conformance_test.py (loaded through SCHEMATHESIS_HOOKS).

Two kinds of request are legal but would only make the run wait, so they are bounded here:
  * WatchJob with follow=true streams until the job ends (never, for a queued job): follow is
    turned off;
  * KvGet and KvWait may wait up to the controller's maximum (600 s) for missing keys: their
    timeout_ms is capped at 200 ms.
Everything else is sent as generated.

It also adds one check that schemathesis cannot do itself: every line of a newline-delimited
JSON stream (application/x-ndjson, the watch routes) must be an object conforming to the
document's schema for the route's 200 response, or the stream's final {"error": Error} line.
"""

import json
import os
import urllib.request

import jsonschema_rs
import schemathesis

_KV_TIMEOUT_CAP_MS = 200


def _truthy(value):
    return str(value).lower() in ("true", "1", "yes", "")


@schemathesis.hook
def before_call(ctx, case, kwargs):
    """Runs for the cases of every phase (map_* hooks miss the coverage phase's)."""
    query = case.query
    if query and "follow" in query and _truthy(query["follow"]):
        query["follow"] = "false"
    body = case.body
    if case.path in ("/v1/kv:wait", "/v1/kv:get") and isinstance(body, dict):
        for key in ("timeout_ms", "timeoutMs"):
            timeout = body.get(key)
            if isinstance(timeout, int) and not isinstance(timeout, bool):
                body[key] = min(timeout, _KV_TIMEOUT_CAP_MS)


_validators = {}


def _document():
    url = os.environ["DHP_OPENAPI_URL"]
    if "doc" not in _validators:
        with urllib.request.urlopen(url, timeout=10) as r:
            _validators["doc"] = json.load(r)
    return _validators["doc"]


def _validator(ref):
    if ref not in _validators:
        doc = _document()
        root = {"$ref": ref, "components": doc["components"]}
        _validators[ref] = jsonschema_rs.Draft4Validator(root)
    return _validators[ref]


@schemathesis.check
def ndjson_lines_conform(ctx, response, case):
    content_type = response.headers.get("content-type", [""])
    if isinstance(content_type, list):
        content_type = content_type[0] if content_type else ""
    if response.status_code != 200 or not content_type.startswith("application/x-ndjson"):
        return None
    doc = _document()
    item = doc["paths"][case.operation.path][case.method.lower()]["responses"]["200"]
    ref = item["content"]["application/x-ndjson"]["schema"]["$ref"]
    error = _validator("#/components/schemas/Error")
    lines = response.content.decode("utf-8").splitlines()
    for n, line in enumerate(lines):
        value = json.loads(line)
        if not isinstance(value, dict):
            raise AssertionError(f"line {n + 1} of the stream is not an object: {line!r}")
        if set(value) == {"error"} and n == len(lines) - 1:
            error.validate(value["error"])
        else:
            _validator(ref).validate(value)
    return None
