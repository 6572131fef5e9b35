"""Validates Kubernetes objects against the schemas kubernetes-validate ships.

stdin: {"versions": ["1.29.0", ...], "objects": [{...}, ...]} (JSON).
stdout: one JSON list, an entry per object and version:
  {"index", "kind", "name", "version", "ok", "error"}.
Strict schemas: a field the API does not know is an error, as the API server's
strict field validation makes it. A kind without a schema is an error too
(never a silent pass).
"""
import json
import sys

import kubernetes_validate
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError


def main() -> None:
    request = json.load(sys.stdin)
    results = []
    for version in request["versions"]:
        for index, obj in enumerate(request["objects"]):
            entry = {
                "index": index,
                "kind": obj.get("kind"),
                "name": (obj.get("metadata") or {}).get("name"),
                "version": version,
                "ok": True,
                "error": None,
            }
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                entry.update(ok=False, error=f"{path or '(root)'}: {e.message}")
            except SchemaNotFoundError as e:
                entry.update(ok=False, error=e.message)
            results.append(entry)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
