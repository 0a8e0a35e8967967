package container

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/distribution/reference"
)

// DockerConfigJSONKey is the key of a kubernetes.io/dockerconfigjson
// Secret, whose value is a Docker config.json: {"auths": {"<registry>":
// {"auth": base64("user:password")}}}.
const DockerConfigJSONKey = ".dockerconfigjson"

// dockerHubHosts are the names Docker Hub's entries go by in config files
// (docker login writes https://index.docker.io/v1/); an image on Docker
// Hub has the domain docker.io.
var dockerHubHosts = map[string]bool{"docker.io": true, "index.docker.io": true, "registry-1.docker.io": true}

// DockerConfig is the credentials of a Docker config.json, per registry.
// Errors about it name a registry entry and what is wrong, never the
// credentials.
type DockerConfig struct {
	entries []authEntry
}

type authEntry struct {
	// key is the entry's name as written; host (lower case, with any
	// port) and path (no slashes at either end) are what it matches.
	key, host, path string
	auth            RegistryAuth
}

// ParseDockerConfigJSON reads a Docker config.json, as a
// kubernetes.io/dockerconfigjson Secret holds it. An entry's "auth"
// (base64 of user:password) wins over its "username" and "password".
func ParseDockerConfigJSON(data []byte) (DockerConfig, error) {
	var doc struct {
		Auths map[string]struct {
			Auth          string `json:"auth"`
			Username      string `json:"username"`
			Password      string `json:"password"`
			IdentityToken string `json:"identitytoken"`
			RegistryToken string `json:"registrytoken"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		// Not err itself: encoding/json quotes the offending bytes.
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return DockerConfig{}, fmt.Errorf("%s is not JSON (syntax error at byte %d)", DockerConfigJSONKey, syntax.Offset)
		}
		return DockerConfig{}, fmt.Errorf("%s is not a Docker config: {\"auths\": {\"<registry>\": {\"auth\": \"<base64 of user:password>\"}}} expected", DockerConfigJSONKey)
	}
	var c DockerConfig
	for key, e := range doc.Auths {
		host, p, err := splitRegistryKey(key)
		if err != nil {
			return DockerConfig{}, err
		}
		a := RegistryAuth{ServerAddress: key, Username: e.Username, Password: e.Password,
			IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
		if e.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return DockerConfig{}, fmt.Errorf("the auth of registry %q in %s is not base64", key, DockerConfigJSONKey)
			}
			user, password, ok := strings.Cut(string(raw), ":")
			if !ok {
				return DockerConfig{}, fmt.Errorf("the auth of registry %q in %s is not base64 of user:password", key, DockerConfigJSONKey)
			}
			a.Username, a.Password = user, password
		}
		c.entries = append(c.entries, authEntry{key: key, host: host, path: p, auth: a})
	}
	// Most specific first: a longer path, then an exact host before a
	// wildcard, then by name, so that the choice never depends on the
	// order of a map.
	sort.Slice(c.entries, func(i, j int) bool {
		a, b := c.entries[i], c.entries[j]
		if len(a.path) != len(b.path) {
			return len(a.path) > len(b.path)
		}
		if wa, wb := strings.Contains(a.host, "*"), strings.Contains(b.host, "*"); wa != wb {
			return wb
		}
		return a.key < b.key
	})
	return c, nil
}

// splitRegistryKey turns an entry's name, such as registry.example.com,
// https://registry.example.com:5000/v2/ or *.example.com/team, into the
// host (with port, lower case) and path it matches. Docker Hub's names all
// become docker.io. A path of v1 or v2 alone is the registry API's
// version, as docker login writes it, not a repository.
func splitRegistryKey(key string) (host, p string, err error) {
	k := strings.TrimSpace(key)
	if i := strings.Index(k, "://"); i >= 0 {
		k = k[i+3:]
	}
	host, p, _ = strings.Cut(k, "/")
	host = strings.ToLower(host)
	p = strings.Trim(p, "/")
	if host == "" {
		return "", "", fmt.Errorf("registry %q in %s names no host", key, DockerConfigJSONKey)
	}
	if dockerHubHosts[host] {
		host = "docker.io"
	}
	if p == "v1" || p == "v2" {
		p = ""
	}
	return host, p, nil
}

// AuthFor returns the credentials for the registry of the image ref: those
// of the most specific entry whose host is the image's registry (a
// wildcard label such as *.example.com matches one label) and whose path,
// if any, starts the image's repository. Nil when no entry matches: the
// image is pulled anonymously.
func (c DockerConfig) AuthFor(ref string) (*RegistryAuth, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("failed to parse image reference %q: %w", ref, err)
	}
	host, repo := strings.ToLower(reference.Domain(named)), reference.Path(named)
	for _, e := range c.entries {
		if hostMatches(e.host, host) && pathMatches(e.path, repo) {
			a := e.auth
			return &a, nil
		}
	}
	return nil, nil
}

// hostMatches compares host[:port] of an entry, whose labels may be
// globs, with the image's registry; ports must be equal.
func hostMatches(pattern, host string) bool {
	pHost, pPort, _ := strings.Cut(pattern, ":")
	hHost, hPort, _ := strings.Cut(host, ":")
	if pPort != hPort {
		return false
	}
	pLabels, hLabels := strings.Split(pHost, "."), strings.Split(hHost, ".")
	if len(pLabels) != len(hLabels) {
		return false
	}
	for i := range pLabels {
		if ok, err := path.Match(pLabels[i], hLabels[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// pathMatches reports whether prefix starts repo at a path segment.
func pathMatches(prefix, repo string) bool {
	return prefix == "" || repo == prefix || strings.HasPrefix(repo, prefix+"/")
}

// RegistryHost returns the registry host of the image ref, as AuthFor
// matches it (docker.io for Docker Hub's images).
func RegistryHost(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("failed to parse image reference %q: %w", ref, err)
	}
	return reference.Domain(named), nil
}
