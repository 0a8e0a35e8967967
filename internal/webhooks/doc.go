// Package webhooks holds the admission checks and defaults that CEL markers
// on the API types cannot express: what objects may ask of the container
// host (the manager's policy, internal/policy), mount targets the node
// needs, a preset providerID, the per-cluster machine cap, template
// immutability (which must let ClusterClass topology dry-runs through), and
// defaults that depend on other fields of Cluster API's own types.
package webhooks
