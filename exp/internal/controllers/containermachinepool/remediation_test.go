package containermachinepool

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
)

// TestDiagnosticsNameBoundsThePoolsRecords checks that however many
// machines of a pool fail, their records go into at most keptDiagnostics
// Secrets, named after the pool, each machine always to the same one, and
// that a long pool name still gives a valid name.
func TestDiagnosticsNameBoundsThePoolsRecords(t *testing.T) {
	for _, poolName := range []string{"workers", strings.Repeat("p", 253)} {
		pool := &expinfrav1.ContainerMachinePool{ObjectMeta: metav1.ObjectMeta{Name: poolName}}
		names := map[string]bool{}
		for i := range 200 {
			cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
			name := diagnosticsName(pool, cm)
			if name != diagnosticsName(pool, cm) {
				t.Fatalf("the name of %s's record changes: %s", cm.Name, name)
			}
			if len(name) > 253 || !strings.Contains(name, "-diagnostics-") {
				t.Fatalf("name %q (%d characters)", name, len(name))
			}
			names[name] = true
		}
		if len(names) != keptDiagnostics {
			t.Errorf("200 failed machines of pool %.20s… went into %d Secrets, want %d", poolName, len(names), keptDiagnostics)
		}
	}
}
