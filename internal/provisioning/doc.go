// Package provisioning turns Cluster API bootstrap data (the `value` of the
// bootstrap Secret, in the format named by its `format` key) into an ordered
// list of Steps that CAPCT runs inside a node container.
//
// CAPCT's machines are containers: they run no cloud-init and no Ignition, so
// CAPCT interprets the bootstrap data itself, the way CAPD does. This package
// is pure: it does no I/O and knows nothing about container runtimes. Script
// renders the steps as the files of one detached run (staged file contents
// and a shell script) that writes each file and runs each command in the
// node, in order, stopping at the first failure, then checks for
// SentinelPath; Marks, ParseExit and LaunchCommand are the rest of the
// contract between that run and the Bootstrap phase that starts it and
// reads its marks.
//
// # Supported input
//
//   - cloud-config (FormatCloudConfig, or an empty format): the modules
//     bootcmd, write_files and runcmd, in cloud-init's order (bootcmd, then
//     write_files without defer, then deferred write_files, then runcmd),
//     whatever order they appear in. Other modules are ignored and reported
//     in Result.Ignored.
//   - Ignition (FormatIgnition), spec 2.x and 3.x JSON: storage.files and
//     systemd.units (with their dropins). Other sections are ignored and
//     reported.
//
// # Adaptations for container nodes
//
//   - `kubeadm init` and `kubeadm join`, in runcmd items (string or list,
//     also wrapped in `sh -c '...'` or called by a full path) and in
//     Ignition's /etc/kubeadm.sh, get the preflight checks that container
//     nodes fail (IgnoredPreflightErrors) added to --ignore-preflight-errors,
//     merged into an existing flag rather than adding a second one.
//   - The cloud-init jinja variables for the instance's hostname
//     ({{ ds.meta_data.hostname }}, {{ ds.meta_data.local_hostname }},
//     {{ v1.local_hostname }}) are replaced with Vars.Hostname, and the one
//     for its private IPv4 address ({{ ds.meta_data.local_ipv4 }}) with
//     Vars.LocalIPv4, in paths, file contents and commands.
//
// Bad input is reported as an error wrapping ErrMalformed (or
// ErrUnknownFormat, ErrMissingHostname, ErrMissingAddress, or ErrTooLarge
// when the data is larger than MaxDataSize or decodes to more than
// MaxPlanSize); it never panics.
package provisioning
