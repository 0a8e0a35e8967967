package container

import "testing"

func TestEngineFromEnv(t *testing.T) {
	for _, tc := range []struct {
		capct, kind string
		want        Engine
		wantErr     bool
	}{
		{"", "", EngineDocker, false},
		{"podman", "", EnginePodman, false},
		{"", "podman", EnginePodman, false},
		{"Docker", "podman", EngineDocker, false},
		{" PODMAN ", "", EnginePodman, false},
		{"containerd", "", "", true},
		{"", "nerdctl", "", true},
	} {
		t.Setenv(EngineEnv, tc.capct)
		t.Setenv(KindProviderEnv, tc.kind)
		got, err := EngineFromEnv()
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s=%q %s=%q: got %q, %v; want %q (error %v)", EngineEnv, tc.capct, KindProviderEnv, tc.kind, got, err, tc.want, tc.wantErr)
		}
	}
}
