#!/usr/bin/env bash
# Prints a CAPD cluster template equivalent to CAPCT's, for
# hack/bench/capd-vs-capct.sh: CAPCT's own KubeadmControlPlane,
# MachineDeployment, MachinePool and their KubeadmConfig(Template)s
# (templates/parts), so that both providers boot the same node image with the
# same kubeadm settings, with CAPD's infrastructure kinds swapped in and
# CAPCT's provider-id kubelet argument dropped (CAPD sets the Node's
# providerID itself). The HAProxy template only lowers maxconn, which this
# host's open-files limit needs (internal/loadbalancer/haproxy.go says why).
#
# CAPD's Nodes need a CNI configuration to go Ready, which CAPCT's node IPAM
# and pod network give its own: every KubeadmConfig gets hack/quickstart/node-cni.sh
# as a file (base64, which clusterctl leaves alone), started after kubeadm, which writes a ptp configuration for
# the Node's pod CIDR; the pod CIDRs come from kube-controller-manager, so
# CAPCT's allocate-node-cidrs=false is dropped here.
set -euo pipefail
parts="$(cd "$(dirname "$0")/../../templates/parts" && pwd)"

cat <<'YAML'
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: ${CLUSTER_NAME}
  namespace: ${NAMESPACE}
spec:
  clusterNetwork:
    pods:
      cidrBlocks: [10.244.0.0/16]
    services:
      cidrBlocks: [10.96.0.0/12]
    serviceDomain: cluster.local
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: DockerCluster
    name: ${CLUSTER_NAME}
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: ${CLUSTER_NAME}-control-plane
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerCluster
metadata:
  name: ${CLUSTER_NAME}
  namespace: ${NAMESPACE}
spec:
  loadBalancer:
    imageRepository: capct
    imageTag: "2.6"
    customHAProxyConfigTemplateRef:
      name: ${CLUSTER_NAME}-haproxy
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ${CLUSTER_NAME}-haproxy
  namespace: ${NAMESPACE}
data:
  value: |
    global
      log stdout format raw local0 info
      maxconn 4000
    resolvers docker
      nameserver dns 127.0.0.11:53
    defaults
      log global
      mode tcp
      timeout connect 5s
      timeout client 3h
      timeout server 3h
      default-server init-addr none
    frontend control-plane
      bind *:{{ .FrontendControlPlanePort }}
      default_backend kube-apiservers
    backend kube-apiservers
      option httpchk GET /healthz
      {{- range $server, $backend := .BackendServers }}
      server {{ $server }} {{ JoinHostPort $backend.Address $.BackendControlPlanePort }} weight {{ $backend.Weight }} check check-ssl verify none resolvers docker resolve-prefer ipv4
      {{- end }}
YAML
# CAPCT's control plane and workers, provider-id dropped, kinds swapped,
# the node CNI configuration added, CAPCT-only fields dropped. yq prints no
# separator before its first document.
echo ---
# shellcheck disable=SC2016 # $script is yq's variable, not the shell's
cat "$parts/control-plane.yaml" "$parts/machinedeployment.yaml" "$parts/machinepool.yaml" |
  sed -e '/# CAPCT.s bootstrap replaces/,/value: "container:\/\/\/{{ ds.meta_data.local_hostname }}"/d' \
    -e 's|infrastructure.cluster.x-k8s.io/v1alpha1|infrastructure.cluster.x-k8s.io/v1beta2|' \
    -e 's|ContainerMachineTemplate|DockerMachineTemplate|' \
    -e 's|ContainerMachinePool|DockerMachinePool|' \
    -e 's|^\(    \)\{0,1\}      image: \(.*\)$|\1      customImage: \2|' \
    -e 's|^    image: \(.*\)$|    customImage: \1|' |
  yq -y --rawfile script "$(dirname "$0")/../quickstart/node-cni.sh" '
    def node_cni:
      .files += [{path: "/usr/local/bin/bench-node-cni", owner: "root:root", permissions: "0755", encoding: "base64", content: ($script | @base64)}]
      | .postKubeadmCommands += ["systemd-run --unit bench-node-cni --collect /usr/local/bin/bench-node-cni"];
    if .kind == "KubeadmControlPlane" then
      .spec.kubeadmConfigSpec |= node_cni
      | .spec.kubeadmConfigSpec.clusterConfiguration.controllerManager.extraArgs |= map(select(.name != "allocate-node-cidrs"))
      | if (.spec.kubeadmConfigSpec.clusterConfiguration.controllerManager.extraArgs | length) == 0
        then del(.spec.kubeadmConfigSpec.clusterConfiguration.controllerManager) else . end
    elif .kind == "KubeadmConfigTemplate" then .spec.template.spec |= node_cni
    elif .kind == "KubeadmConfig" then .spec |= node_cni
    # DockerMachines have no port mappings: strict decoding refuses the field.
    elif .kind == "DockerMachineTemplate" then del(.spec.template.spec.extraPortMappings)
    else . end'
