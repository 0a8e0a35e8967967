#!/usr/bin/env bash
# Composes the flavors clusterctl ships (templates/cluster-template*.yaml)
# from the parts in templates/parts, so that each object is written once and
# every flavor carries the same copy. Run by `make generate`; `make verify`
# fails when the composed files are not committed.
set -euo pipefail
cd "$(dirname "$0")/../templates"

# part NAME: prints templates/parts/NAME.yaml; a NAME with a slash is a
# path from templates/ without .yaml (the e2e-only parts in test/e2e/parts).
part() {
  case $1 in
    */*) cat "$1.yaml" ;;
    *) cat "parts/$1.yaml" ;;
  esac
}

# flavor FILE HEADER PART...: writes FILE as HEADER followed by the parts.
flavor() {
  local file=$1 header=$2
  shift 2
  {
    printf '%s\n' "$header"
    for p in "$@"; do part "$p"; done
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

flavor "$e2e/cluster-template-dualstack.yaml" \
"# Flavor \"dualstack\" for Cluster API's e2e specs (QuickStartSpec on dual
# stack): IPv4 and IPv6 pod and service networks on the management
# cluster's dual-stack network. Generated from templates/parts by
# hack/templates.sh; edit the parts." \
  cluster-dualstack control-plane machinedeployment

flavor "$e2e/cluster-template-md-remediation.yaml" \
"# Flavor \"md-remediation\" for Cluster API's e2e specs
# (MachineDeploymentRemediationSpec): the default flavor and a
# MachineHealthCheck on its workers. Generated from templates/parts and
# test/e2e/parts by hack/templates.sh; edit the parts." \
  cluster control-plane machinedeployment ../test/e2e/parts/mhc-md-remediation

# KCPRemediationSpec: the control plane holds each machine before kubeadm
# until the spec signals it (test/e2e/parts/kcp-wait-signal-*.yaml, inserted
# into the KubeadmControlPlane's files and preKubeadmCommands).
kcp_remediation=$e2e/cluster-template-kcp-remediation.yaml
flavor "$kcp_remediation" \
"# Flavor \"kcp-remediation\" for Cluster API's e2e specs (KCPRemediationSpec):
# a KubeadmControlPlane whose machines wait for the spec's signal before
# kubeadm, and a MachineHealthCheck on them. Generated from templates/parts
# and test/e2e/parts by hack/templates.sh; edit the parts." \
  cluster ../test/e2e/parts/mhc-kcp-remediation
sed -e '/^    files:$/r ../test/e2e/parts/kcp-wait-signal-file.yaml' \
  -e '/^    preKubeadmCommands:$/r ../test/e2e/parts/kcp-wait-signal-command.yaml' \
  parts/control-plane.yaml >> "$kcp_remediation"
[[ $(grep -c wait-signal.sh "$kcp_remediation") -ge 2 ]] ||
  { echo "templates.sh: parts/control-plane.yaml has no '    files:' or '    preKubeadmCommands:' line to extend" >&2; exit 1; }

# SelfHostedSpec: every machine mounts the engine's socket and preloads the
# controllers' images (test/e2e/parts/self-hosted-machine.yaml, inserted into
# each ContainerMachineTemplate after its image).
self_hosted=$e2e/cluster-template-self-hosted.yaml
flavor "$self_hosted" \
"# Flavor \"self-hosted\" for Cluster API's e2e specs (SelfHostedSpec): the
# default flavor whose machines mount the engine's socket and preload the
# controllers' images, so that the cluster can manage itself after
# clusterctl move. Generated from templates/parts and test/e2e/parts by
# hack/templates.sh; edit the parts." \
  cluster
sed -e '/^      image: ${CAPCT_NODE_IMAGE/r ../test/e2e/parts/self-hosted-machine.yaml' \
  parts/control-plane.yaml parts/machinedeployment.yaml >> "$self_hosted"
[[ $(grep -c 'hostPath: /var/run/docker.sock' "$self_hosted") -eq 2 ]] ||
  { echo "templates.sh: the ContainerMachineTemplates in parts/ have no '      image: \${CAPCT_NODE_IMAGE' line to extend" >&2; exit 1; }

# QuickStartSpec with ClusterClass: the shipped topology flavor and its
# ClusterClass as they are (they take their network from CAPCT_NETWORK and
# CAPCT_NETWORK_MODE like every flavor).
cp cluster-template-topology.yaml clusterclass-quick-start.yaml "$e2e/"
