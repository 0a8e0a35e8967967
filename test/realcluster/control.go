package realcluster

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// EngineControl runs restart-test.sh's engine-stop or engine-start (script
// is its path): the script knows how this host runs its engine (systemd
// or a pid file) and starts it again on failure, even when the test that
// stopped it does not get to.
func EngineControl(t testing.TB, script, action string) {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), script, action)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v", script, action, err)
	}
}

// Pause waits d, or less when ctx ends.
func Pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
