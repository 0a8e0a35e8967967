#!/usr/bin/env bash
# Composes the flavors clusterctl ships (templates/cluster-template*.yaml)
# from the parts in templates/parts, so that each object is written once and
# every flavor carries the same copy. Run by `make generate`; `make verify`
# fails when the composed files are not committed.
set -euo pipefail
cd "$(dirname "$0")/../templates"

# flavor FILE HEADER PART...: writes FILE as HEADER followed by the parts.
flavor() {
  local file=$1 header=$2
  shift 2
  {
    printf '%s\n' "$header"
    for part in "$@"; do cat "parts/$part.yaml"; done
  } > "$file"
}

flavor cluster-template.yaml \
"# Default flavor: a KubeadmControlPlane and one MachineDeployment of workers,
# every machine a container of the node image. Variables: docs/templates.md.
# Generated from templates/parts by hack/templates.sh; edit the parts." \
  cluster control-plane machinedeployment

flavor cluster-template-dualstack.yaml \
"# Flavor \"dualstack\": the default flavor with IPv4 and IPv6 pod and service
# networks and a dual-stack container network. Variables: docs/templates.md.
# Generated from templates/parts by hack/templates.sh; edit the parts." \
  cluster-dualstack control-plane machinedeployment

flavor cluster-template-machinepool.yaml \
"# Flavor \"machinepool\": workers in a MachinePool backed by a ContainerMachinePool
# (needs EXP_MACHINE_POOL=true, the default). Variables: docs/templates.md.
# Generated from templates/parts by hack/templates.sh; edit the parts." \
  cluster control-plane machinepool

flavor cluster-template-quickstart.yaml \
"# Flavor \"quickstart\": the default flavor plus a MachinePool, so that one
# cluster shows both kinds of workers (make quickstart uses it). Variables:
# docs/templates.md. Generated from templates/parts by hack/templates.sh;
# edit the parts." \
  cluster control-plane machinedeployment machinepool

# The flavors Cluster API's e2e specs use (test/e2e/config/container.yaml
# names this folder): the same parts, so that the specs test what users get.
# No CNI part: CAPCT's node IPAM gives the pod routes (docs/e2e.md).
e2e=../test/e2e/data/infrastructure-container
mkdir -p "$e2e"
flavor "$e2e/cluster-template.yaml" \
"# Default flavor for Cluster API's e2e specs (QuickStartSpec): a
# KubeadmControlPlane and one MachineDeployment. Generated from
# templates/parts by hack/templates.sh; edit the parts." \
  cluster control-plane machinedeployment

flavor "$e2e/cluster-template-machinepool.yaml" \
"# Flavor \"machinepool\" for Cluster API's e2e specs (MachinePoolSpec):
# workers in a MachinePool backed by a ContainerMachinePool. Generated from
# templates/parts by hack/templates.sh; edit the parts." \
  cluster control-plane machinepool

# QuickStartSpec with ClusterClass: the shipped topology flavor and its
# ClusterClass as they are (they take their network from CAPCT_NETWORK and
# CAPCT_NETWORK_MODE like every flavor).
cp cluster-template-topology.yaml clusterclass-quick-start.yaml "$e2e/"
