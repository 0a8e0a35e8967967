// Package multihost holds the tests that need a second container engine,
// the one hack/multihost/engine.sh starts in a network namespace of its own
// and serves only over TCP with TLS. They run through make test-multihost,
// which starts that engine first and removes it after (docs/multihost.md).
package multihost
