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

# insert before|after REGEX PART [FILE...]: prints the FILEs (or stdin,
# which "-" names among them) with the lines of templates/parts/PART.yaml
# inserted before or after every line that matches REGEX (an awk ERE), each
# indented as deep as that line: a part is written relative to the line it
# goes next to. Unlike sed's r (the e2e flavors below, whose parts each have
# one place), one part then fits every depth it is needed at: multihost's
# kubelet argument goes into the control plane's kubeletExtraArgs and the
# workers', two deeper. So a flavor that adds a few fields takes the shared
# parts whole and writes only its own lines. A changed anchor matches
# nothing, so the caller checks that its insertions landed.
insert() {
  local where=$1 regex=$2 part=parts/$3.yaml
  shift 3
  where=$where regex=$regex part=$part awk '
    BEGIN {
      while ((got = (getline line < ENVIRON["part"])) > 0) lines[n++] = line
      if (got < 0) { print "templates.sh: cannot read " ENVIRON["part"] > "/dev/stderr"; exit 1 }
    }
    function emit(   i) {
      match($0, /^ */)
      for (i = 0; i < n; i++) print substr($0, 1, RLENGTH) lines[i]
    }
    $0 ~ ENVIRON["regex"] && ENVIRON["where"] == "before" { emit() }
    { print }
    $0 ~ ENVIRON["regex"] && ENVIRON["where"] == "after" { emit() }
  ' "$@"
}

# Every flavor users get has a MachineHealthCheck on each set of machines
# (parts/mhc-*.yaml, docs/remediation.md); the e2e remediation flavors below
# bring their own instead.
flavor cluster-template.yaml \
"# Default flavor: a KubeadmControlPlane and one MachineDeployment of workers,
# every machine a container of the node image, and a MachineHealthCheck on
# each. Variables: docs/templates.md. Generated from templates/parts by
# hack/templates.sh; edit the parts." \
  cluster control-plane machinedeployment mhc-control-plane mhc-machinedeployment

flavor cluster-template-dualstack.yaml \
"# Flavor \"dualstack\": the default flavor with IPv4 and IPv6 pod and service
# networks and a dual-stack container network. Variables: docs/templates.md.
# Generated from templates/parts by hack/templates.sh; edit the parts." \
  cluster-dualstack control-plane machinedeployment mhc-control-plane mhc-machinedeployment

flavor cluster-template-machinepool.yaml \
"# Flavor \"machinepool\": workers in a MachinePool backed by a ContainerMachinePool
# (needs EXP_MACHINE_POOL=true, the default). Variables: docs/templates.md.
# Generated from templates/parts by hack/templates.sh; edit the parts." \
  cluster control-plane machinepool mhc-control-plane mhc-machinepool

flavor cluster-template-quickstart.yaml \
"# Flavor \"quickstart\": the default flavor plus a MachinePool, so that one
# cluster shows both kinds of workers (make quickstart uses it). Variables:
# docs/templates.md. Generated from templates/parts by hack/templates.sh;
# edit the parts." \
  cluster control-plane machinedeployment machinepool mhc-control-plane mhc-machinedeployment mhc-machinepool

# Multihost: the default flavor's parts with the ContainerCluster's engines
# and, for every node, the cluster-network address as the kubelet's node IP
# and (control planes) kubeadm's advertise address (docs/multihost.md,
# section 4 "Node addresses"). Workers get no failure domain, so they spread
# over the engines.
multihost=cluster-template-multihost.yaml
flavor "$multihost" \
"# Flavor \"multihost\": the default flavor on the ContainerEngines CAPCT_ENGINES
# lists, whose nodes advertise and register their address on the cluster
# network, not the default route's (docs/multihost.md). Variables:
# docs/templates.md. Generated from templates/parts by hack/templates.sh;
# edit the parts."
{
  insert before '^  network:$' multihost-engines parts/cluster.yaml
  insert after '^    initConfiguration:$' multihost-init-endpoint parts/control-plane.yaml |
    insert after '^    joinConfiguration:$' multihost-join-endpoint |
    insert after '^ *kubeletExtraArgs:$' multihost-node-ip - parts/machinedeployment.yaml
  part mhc-control-plane
  part mhc-machinedeployment
} >> "$multihost"
[[ $(grep -c '^  engines: ' "$multihost") -eq 1 &&
  $(grep -c 'advertiseAddress: "{{ ds.meta_data.local_ipv4 }}"' "$multihost") -eq 2 &&
  $(grep -c 'value: "{{ ds.meta_data.local_ipv4 }}"' "$multihost") -eq 3 ]] ||
  { echo "templates.sh: parts/cluster.yaml, control-plane.yaml or machinedeployment.yaml lack a '  network:', '    initConfiguration:', '    joinConfiguration:' or three 'kubeletExtraArgs:' lines to extend" >&2; exit 1; }

# The flavors Cluster API's e2e specs use (test/e2e/config/container.yaml
# names this folder): the same parts, so that the specs test what users get.
# No CNI part: CAPCT's node IPAM gives the pod routes (docs/e2e.md).
e2e=../test/e2e/data/infrastructure-container
mkdir -p "$e2e"
flavor "$e2e/cluster-template.yaml" \
"# Default flavor for Cluster API's e2e specs (QuickStartSpec): a
# KubeadmControlPlane and one MachineDeployment, and a MachineHealthCheck on
# each. Generated from templates/parts by hack/templates.sh; edit the parts." \
  cluster control-plane machinedeployment mhc-control-plane mhc-machinedeployment

flavor "$e2e/cluster-template-machinepool.yaml" \
"# Flavor \"machinepool\" for Cluster API's e2e specs (MachinePoolSpec):
# workers in a MachinePool backed by a ContainerMachinePool. Generated from
# templates/parts by hack/templates.sh; edit the parts." \
  cluster control-plane machinepool mhc-control-plane mhc-machinepool

flavor "$e2e/cluster-template-dualstack.yaml" \
"# Flavor \"dualstack\" for Cluster API's e2e specs (QuickStartSpec on dual
# stack): IPv4 and IPv6 pod and service networks on the management
# cluster's dual-stack network. Generated from templates/parts by
# hack/templates.sh; edit the parts." \
  cluster-dualstack control-plane machinedeployment mhc-control-plane mhc-machinedeployment

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
# shellcheck disable=SC2016 # a clusterctl variable in the template, matched as text
sed -e '/^      image: ${CAPCT_NODE_IMAGE/r ../test/e2e/parts/self-hosted-machine.yaml' \
  parts/control-plane.yaml parts/machinedeployment.yaml >> "$self_hosted"
[[ $(grep -c 'hostPath: /var/run/docker.sock' "$self_hosted") -eq 2 ]] ||
  { echo "templates.sh: the ContainerMachineTemplates in parts/ have no '      image: \${CAPCT_NODE_IMAGE' line to extend" >&2; exit 1; }

# QuickStartSpec with ClusterClass: the shipped topology flavor and its
# ClusterClass as they are (they take their network from CAPCT_NETWORK and
# CAPCT_NETWORK_MODE like every flavor).
cp cluster-template-topology.yaml clusterclass-quick-start.yaml "$e2e/"

# ClusterUpgradeConformanceSpec (flavor "upgrades"): the topology flavor
# with a MachinePool beside the MachineDeployment, so that an upgrade of the
# topology's version rolls the control plane, the MachineDeployment and the
# MachinePool (test/e2e/cluster_upgrade_test.go).
upgrades=$e2e/cluster-template-upgrades.yaml
{
  echo "# Flavor \"upgrades\" for Cluster API's ClusterUpgradeConformanceSpec: the"
  echo "# topology flavor with a MachinePool beside the MachineDeployment, and the"
  echo "# etcd and CoreDNS tags the spec sets when it upgrades the version."
  echo "# Generated from templates/cluster-template-topology.yaml by"
  echo "# hack/templates.sh."
  # shellcheck disable=SC2016 # clusterctl variables in the template, matched and written as text
  sed -e '/^        replicas: ${WORKER_MACHINE_COUNT}$/a\
      machinePools:\
      - class: default-worker\
        name: mp-0\
        replicas: ${WORKER_MACHINE_COUNT}' \
    -e '/^    variables:$/a\
    # Empty until the spec upgrades the topology and sets them to the tags\
    # the new version preloads (ETCD_VERSION_UPGRADE_TO and\
    # COREDNS_VERSION_UPGRADE_TO of the e2e config).\
    - name: etcdImageTag\
      value: ""\
    - name: coreDNSImageTag\
      value: ""' cluster-template-topology.yaml
} > "$upgrades"
grep -q '^      machinePools:$' "$upgrades" ||
  { echo "templates.sh: cluster-template-topology.yaml has no '        replicas: \${WORKER_MACHINE_COUNT}' line to add a MachinePool after" >&2; exit 1; }
