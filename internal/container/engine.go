package container

import (
	"fmt"
	"os"
	"strings"
)

// Engine names a container engine that CAPCT can run machines on.
type Engine string

const (
	// EngineDocker is the Docker Engine (dockerd), the default.
	EngineDocker Engine = "docker"
	// EnginePodman is Podman, through the service that `podman system
	// service` (or podman.socket) runs.
	EnginePodman Engine = "podman"
)

// Engines are the engines CAPCT supports, the default first.
var Engines = []Engine{EngineDocker, EnginePodman}

// EngineEnv names the engine for the manager, the tests and the hack/
// scripts alike. KindProviderEnv is read when it is unset, so that users of
// kind, who select Podman with KIND_EXPERIMENTAL_PROVIDER=podman, need no
// second setting.
const (
	EngineEnv       = "CAPCT_ENGINE"
	KindProviderEnv = "KIND_EXPERIMENTAL_PROVIDER"
)

// ParseEngine reads an engine's name, case-insensitively.
func ParseEngine(s string) (Engine, error) {
	e := Engine(strings.ToLower(strings.TrimSpace(s)))
	for _, known := range Engines {
		if e == known {
			return e, nil
		}
	}
	return "", fmt.Errorf("unknown container engine %q: want one of %v", s, Engines)
}

// EngineFromEnv returns the engine that CAPCT_ENGINE names, or failing that
// KIND_EXPERIMENTAL_PROVIDER, or EngineDocker when neither is set. A value
// that names no engine is an error, never a silent fallback to Docker.
func EngineFromEnv() (Engine, error) {
	for _, env := range []string{EngineEnv, KindProviderEnv} {
		if v := os.Getenv(env); v != "" {
			e, err := ParseEngine(v)
			if err != nil {
				return "", fmt.Errorf("failed to read %s: %w", env, err)
			}
			return e, nil
		}
	}
	return EngineDocker, nil
}
