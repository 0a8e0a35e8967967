package engines

import (
	"io"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Client is a client of one ContainerEngine's API, made by a Connector.
// Close releases it and whatever connection it holds (an SSH connection,
// idle TLS sessions).
type Client interface {
	container.Runtime
	io.Closer
}

// Connector makes the client of engine from its spec and secret, the data
// of the Secret its tls or ssh names (nil for an engine that names none).
// It should not contact the engine, which may be away: the first call
// does. A Secret it cannot use is a *container.InvalidCredentialsError,
// which the engine controller reports instead of retrying.
//
// The Registry knows no backend: the manager's composition root (main.go)
// hands it the backend's constructor, docker.Connect, so that only the
// program that runs machines on Docker depends on the Docker client. C is
// the backend's own client type, so that its constructor is passed as it
// is and its callers keep what is particular to it.
type Connector[C Client] func(engine *infrav1.ContainerEngine, secret map[string][]byte) (C, error)

// InvalidCredentialsError says that an engine's Secret is missing, lacks
// what its endpoint needs, or holds something that does not parse
// (container.InvalidCredentialsError, where connectors can return it).
type InvalidCredentialsError = container.InvalidCredentialsError
