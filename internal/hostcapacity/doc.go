// Package hostcapacity keeps machines from launching past the container
// host's kernel limits that every node consumes, such as the inotify
// instances of its systemd, containerd and kubelet
// (fs.inotify.max_user_instances). Past such a limit a node does not fail
// cleanly: containerd's CRI plugin fails to load and kubeadm's preflight
// reports a symptom three layers away (issue #13). A machine that would
// exceed a limit waits instead, with a message that names the sysctl and how
// to raise it, and goes on by itself once there is room.
//
// The host's limits are read from /proc/sys (ProcSys): these sysctls are not
// namespaced without a user namespace, so the manager's container on the
// same host sees the host's values. What the nodes use is estimated, not
// read, because the manager usually cannot see the host's processes: a
// reserve for what CAPCT does not create, plus a measured cost per node
// container of each role on the engine (see Gate).
package hostcapacity
