// Package webhooks holds the admission checks and defaults that CEL markers
// on the API types cannot express: template immutability, which must let
// ClusterClass topology dry-runs through, and defaults that depend on other
// fields of Cluster API's own types.
package webhooks
