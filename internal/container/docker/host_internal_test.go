package docker

import "testing"

// TestRemoteHostPathsAreNotLookedUpHere checks that a runtime of an engine
// on another host does not judge that host's paths by the manager's files:
// a path missing here may be there, and /lib/modules always is.
func TestRemoteHostPathsAreNotLookedUpHere(t *testing.T) {
	const missingHere = "/nonexistent-capct-host-path"
	local, err := New()
	if err != nil {
		t.Fatal(err)
	}
	remote, err := New(WithRemoteHost())
	if err != nil {
		t.Fatal(err)
	}
	if local.statHost(missingHere) {
		t.Errorf("the local engine's host has %s, which this machine lacks", missingHere)
	}
	if !remote.statHost(missingHere) {
		t.Errorf("a remote engine's host was judged by this machine's files")
	}
}
