//go:build tools

package e2e

// The ginkgo CLI that make test-e2e builds, pinned by this module's go.mod
// to the version of the ginkgo library the suite links.
import _ "github.com/onsi/ginkgo/v2/ginkgo"
