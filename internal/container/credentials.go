package container

import "fmt"

// The keys of a ContainerEngine's Secret, which a backend's connector
// reads. The TLS ones are those of a kubernetes.io/tls Secret plus the CA;
// the SSH key is that of a kubernetes.io/ssh-auth Secret. They live here,
// not in the backend, so that the manager's registry, its controllers and
// their tests name them without depending on any backend.
const (
	SecretCA         = "ca.crt"
	SecretCert       = "tls.crt"
	SecretKey        = "tls.key"
	SecretSSHKey     = "ssh-privatekey"
	SecretKnownHosts = "known_hosts"
)

// InvalidCredentialsError says that an engine's Secret lacks what its
// endpoint needs, or holds something that does not parse. Retrying does not
// help until the Secret changes. Its message never carries the Secret's
// data. A backend's connector returns it, and so does the registry for a
// Secret it cannot read, so that the engine controller tells it apart from
// an engine that does not answer without knowing the backend.
type InvalidCredentialsError struct {
	Engine string
	Err    error
}

func (e *InvalidCredentialsError) Error() string {
	return fmt.Sprintf("invalid credentials for ContainerEngine %s: %v", e.Engine, e.Err)
}

func (e *InvalidCredentialsError) Unwrap() error { return e.Err }
