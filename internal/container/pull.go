package container

import (
	"fmt"
	"time"
)

// ImagePullTimeout bounds PullImage under WithCallTimeout. A pull's length
// is the registry's and the network's, not the engine's: a node image is
// about a gigabyte, so the bound of an API round trip would cut it off.
// Pulls run on goroutines of their own (internal/imagecopy), never on a
// reconcile worker, so a long bound holds nobody; thirty minutes is room
// for a few gigabytes over a slow link.
const ImagePullTimeout = 30 * time.Minute

// RegistryAuth is what an engine presents to a registry when it pulls:
// a user name and password, or a token. It is a secret: its String,
// GoString and MarshalLog show the server only, so that a log line, an
// event or a condition that formats it leaks nothing.
type RegistryAuth struct {
	// ServerAddress is the registry the credentials are for, as the
	// Secret's entry names it (e.g. registry.example.com:5000).
	ServerAddress string
	// Username and Password are basic-authentication credentials.
	Username string
	Password string
	// IdentityToken is an OAuth2 refresh token the engine trades for
	// access tokens, instead of Username and Password.
	IdentityToken string
	// RegistryToken is a bearer token the engine presents as it is.
	RegistryToken string
}

// String shows which server the credentials are for, and none of them.
func (a RegistryAuth) String() string {
	return fmt.Sprintf("credentials for %s (redacted)", a.ServerAddress)
}

// GoString is String, so that %#v redacts too.
func (a RegistryAuth) GoString() string { return a.String() }

// MarshalLog is what logr-based loggers print for the credentials.
func (a RegistryAuth) MarshalLog() any { return a.String() }

// PullOptions are how PullImage pulls.
type PullOptions struct {
	// Auth are the credentials for the image's registry; nil pulls
	// anonymously.
	Auth *RegistryAuth
	// Progress, when set, is called as the pull goes with the bytes of
	// the image's layers fetched so far. It must not block.
	Progress func(downloaded int64)
}
