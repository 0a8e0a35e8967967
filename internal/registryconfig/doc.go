// Package registryconfig renders what a node's containerd and kubelet need
// to reach image registries, as steps of the node's bootstrap:
//
//   - containerd's hosts files: /etc/containerd/certs.d/<registry>/hosts.toml
//     and its CA files, one folder per entry of the ContainerCluster's
//     spec.registryMirrors (mirrors tried in order, a private registry's
//     address and CA). The node image's containerd reads that folder
//     (config_path, images/node/files/containerd-config.toml) at each pull.
//   - the proxy environment: HTTP_PROXY, HTTPS_PROXY and NO_PROXY (and their
//     lower-case forms) of the manager, as Cluster API's Docker provider
//     passes its own to its nodes, written as an environment file that
//     systemd drop-ins give containerd.service and kubelet.service, with
//     NO_PROXY always holding the cluster's own addresses (NoProxy).
//
// The package is pure: HostsSteps and ProxySteps turn their inputs into
// provisioning steps, which the Bootstrap phase (internal/lifecycle) puts
// before the bootstrap data's, so that they are in place before kubeadm
// makes containerd pull. Machines made after a change get it; CAPCT never
// rewrites these files in a running node, nor restarts its containerd.
// Proxy values may carry credentials (http://user:password@proxy): no
// error names a value, only the variable that holds it.
package registryconfig
