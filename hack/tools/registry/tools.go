//go:build tools

// Package tools pins the distribution project's registry server, which
// images/registry/build.sh builds into capct/registry:<version>: the
// registry that CAPCT's pull tests (internal/test/registry) run as a
// container on the local engine, since no public registry is reachable
// from the build machines.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
