#!/usr/bin/env python3
"""Renders a kustomization the way `kustomize build` does, for the subset sbx uses.

The CI machine has no kustomize (Debian's kubectl is 1.20, with kustomize 2.0,
and nothing newer is installable from the registries it reaches), so the test
suite renders deploy/kubernetes/ with this instead. Supported, and nothing else
(any other field of a kustomization is refused, so that a manifest cannot come
to rely on something this renderer silently ignores):

* `resources`: YAML files (every document) and directories holding a
  kustomization, rendered recursively;
* `patches` entries with only `path`: strategic-merge patches, each document
  applied to the resource with the same apiVersion, kind, name and namespace.
  Maps merge recursively, `null` deletes a key, lists of maps that all have a
  `name` merge item by item on it (containers, env, volumes, ports, ...), any
  other list is replaced: kustomize's behaviour for those fields.

Usage: render.py DIR                  prints the rendered documents
       render.py DIR --same-as FILE   also checks FILE (another renderer's
                                      output, e.g. `kubectl kustomize DIR`)
                                      holds the same documents
Needs PyYAML (in the validation venv as a dependency of kubernetes-validate).
"""
import copy
import os
import sys

import yaml

ALLOWED = {"apiVersion", "kind", "resources", "patches"}


class RenderError(Exception):
    pass


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def ident(doc):
    meta = doc.get("metadata") or {}
    return (doc.get("apiVersion"), doc.get("kind"), meta.get("namespace"), meta.get("name"))


def merge(base, patch):
    """Strategic merge of `patch` into `base` (both plain YAML values)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = merge(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and keyed(base) and keyed(patch):
        out = [copy.deepcopy(item) for item in base]
        for item in patch:
            for i, existing in enumerate(out):
                if existing["name"] == item["name"]:
                    out[i] = merge(existing, item)
                    break
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def keyed(items):
    return all(isinstance(i, dict) and "name" in i for i in items)


def kustomization_file(directory):
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    raise RenderError(f"{directory}: no kustomization.yaml")


def render(directory, visited=()):
    directory = os.path.realpath(directory)
    # kustomize refuses a resource directory that contains a kustomization it
    # is rendering (a base holding its own overlays): so does this.
    for root in visited:
        if root == directory or root.startswith(directory + os.sep):
            raise RenderError(f"cycle: {directory} contains {root}, which is being rendered")
    visited = visited + (directory,)
    path = kustomization_file(directory)
    with open(path) as f:
        k = yaml.safe_load(f) or {}
    unknown = sorted(set(k) - ALLOWED)
    if unknown:
        raise RenderError(f"{path}: fields this renderer does not support: {', '.join(unknown)}")
    docs = []
    for res in k.get("resources") or []:
        full = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(full):
            docs.extend(render(full, visited))
        elif os.path.isfile(full):
            docs.extend(load_docs(full))
        else:
            raise RenderError(f"{path}: resource {res} not found")
    seen = set()
    for doc in docs:
        if ident(doc) in seen:
            raise RenderError(f"{path}: resource {ident(doc)} defined twice")
        seen.add(ident(doc))
    for patch in k.get("patches") or []:
        if not isinstance(patch, dict) or set(patch) != {"path"}:
            raise RenderError(f"{path}: only patches with just `path` are supported: {patch!r}")
        for p in load_docs(os.path.join(directory, patch["path"])):
            matches = [i for i, d in enumerate(docs) if ident(d) == ident(p)]
            if len(matches) != 1:
                raise RenderError(f"{path}: patch {patch['path']} targets {ident(p)}, found {len(matches)}")
            docs[matches[0]] = merge(docs[matches[0]], p)
    return docs


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--same-as"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        docs = render(argv[1])
    except (RenderError, OSError, yaml.YAMLError) as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 1
    if len(argv) == 4:
        other = load_docs(argv[3])
        mine = sorted(docs, key=lambda d: repr(ident(d)))
        theirs = sorted(other, key=lambda d: repr(ident(d)))
        if mine != theirs:
            print(f"render.py: {argv[1]} renders differently from {argv[3]}", file=sys.stderr)
            print(yaml.safe_dump_all(mine, sort_keys=True), file=sys.stderr)
            return 1
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False, explicit_start=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
