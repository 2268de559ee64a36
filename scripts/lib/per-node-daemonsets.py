#!/usr/bin/env python3
"""Turns each DaemonSet of a rendered chart into one DaemonSet per node of the test cluster.

scripts/k8s-lab's nodes are network namespaces that share one filesystem, so a node agent's
host directories (its sockets, the CNI configuration and binaries it installs) must be the
node's own, or a second node's agent would take over the first's. This is the patch that
`helm template` output gets, in place of hand-written copies of the chart's manifests: each
DaemonSet is copied per node with the node's name as a suffix, pinned to the node, its pods
and selector labelled with the node, and its hostPath volumes moved by the map given (the
container side of a moved path is moved too where the agent hands that path to processes
outside its container, as istio-cni does with its run directory). Everything else passes
through unchanged.

Usage: per-node-daemonsets.py NODES HOST_PATH=NODE_PATH... < chart.yaml > per-node.yaml
NODE_PATH may contain {n}, the node's number. A HOST_PATH prefixed with '=' (e.g.
'=/var/run/istio-cni=...') also moves the container's mount and sets the environment variable
given after a second '@' (e.g. '=/var/run/istio-cni=/run/x/node-{n}/istio-cni@CNI_AGENT_RUN_DIR').
"""
import copy
import sys

import yaml


def parse_moves(args):
    moves = []
    for arg in args:
        same_inside = arg.startswith("=")
        arg = arg.lstrip("=")
        env = None
        if "@" in arg:
            arg, env = arg.rsplit("@", 1)
        host, node = arg.split("=", 1)
        moves.append((host.rstrip("/"), node, same_inside, env))
    return moves


def per_node(ds, n, moves):
    ds = copy.deepcopy(ds)
    node = f"node-{n}"
    ds["metadata"]["name"] = f"{ds['metadata']['name']}-{node}"
    label = {"meshbench.io/node": node}
    ds["spec"]["selector"].setdefault("matchLabels", {}).update(label)
    pod = ds["spec"]["template"]
    pod["metadata"].setdefault("labels", {}).update(label)
    spec = pod["spec"]
    spec.setdefault("nodeSelector", {})["kubernetes.io/hostname"] = node
    moved_volumes = {}
    for volume in spec.get("volumes", []):
        path = volume.get("hostPath", {}).get("path", "").rstrip("/")
        for host, target, same_inside, env in moves:
            if path == host:
                volume["hostPath"]["path"] = target.format(n=n)
                moved_volumes[volume["name"]] = (target.format(n=n), same_inside, env)
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        for mount in container.get("volumeMounts", []):
            moved = moved_volumes.get(mount["name"])
            if moved and moved[1]:
                mount["mountPath"] = moved[0]
                if moved[2]:
                    env = container.setdefault("env", [])
                    env[:] = [e for e in env if e.get("name") != moved[2]]
                    env.append({"name": moved[2], "value": moved[0]})
    return ds


def main():
    nodes = int(sys.argv[1])
    moves = parse_moves(sys.argv[2:])
    out = []
    for doc in yaml.safe_load_all(sys.stdin):
        if not doc:
            continue
        if doc.get("kind") == "DaemonSet":
            out.extend(per_node(doc, n, moves) for n in range(1, nodes + 1))
        else:
            out.append(doc)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
