package container_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// dockerConfig is a config.json whose entries are registry: user:password.
func dockerConfig(t *testing.T, entries map[string]string) []byte {
	t.Helper()
	auths := map[string]map[string]string{}
	for registry, login := range entries {
		auths[registry] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(login))}
	}
	b, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAuthForChoosesTheImagesRegistry(t *testing.T) {
	cfg, err := container.ParseDockerConfigJSON(dockerConfig(t, map[string]string{
		"https://index.docker.io/v1/":     "hub:hub-pw",
		"registry.example.com":            "plain:plain-pw",
		"registry.example.com:5000":       "port:port-pw",
		"https://registry.example.com/v2": "never:chosen", // the same entry as registry.example.com, and first by name
		"registry.example.com/team":       "team:team-pw",
		"registry.example.com/team/sub":   "sub:sub-pw",
		"*.mirror.example.com":            "wild:wild-pw",
		"eu.mirror.example.com":           "eu:eu-pw",
		"127.0.0.1:5001":                  "local:local-pw",
		"HTTP://Upper.Example.com":        "upper:upper-pw",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref, wantUser string
	}{
		{ref: "capct/node:v1.35.4", wantUser: "hub"},
		{ref: "docker.io/library/busybox", wantUser: "hub"},
		{ref: "registry.example.com/app:v1", wantUser: "never"},
		{ref: "registry.example.com:5000/app:v1", wantUser: "port"},
		{ref: "registry.example.com:5001/app:v1"},
		{ref: "registry.example.com/team/app:v1", wantUser: "team"},
		{ref: "registry.example.com/teamwork/app:v1", wantUser: "never"},
		{ref: "registry.example.com/team/sub/app@sha256:" + strings.Repeat("a", 64), wantUser: "sub"},
		{ref: "us.mirror.example.com/app:v1", wantUser: "wild"},
		{ref: "eu.mirror.example.com/app:v1", wantUser: "eu"},
		{ref: "a.b.mirror.example.com/app:v1"},
		{ref: "mirror.example.com/app:v1"},
		{ref: "127.0.0.1:5001/capct-test/open:v1", wantUser: "local"},
		{ref: "upper.example.com/app", wantUser: "upper"},
		{ref: "ghcr.io/capct/node:v1"},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			a, err := cfg.AuthFor(tc.ref)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if a != nil {
				got = a.Username
				if a.Password != got+"-pw" && got != "never" {
					t.Errorf("the password of %s is not its own", got)
				}
			}
			if got != tc.wantUser {
				t.Fatalf("AuthFor(%s) = user %q; want %q", tc.ref, got, tc.wantUser)
			}
		})
	}
	if _, err := cfg.AuthFor("Not A Reference"); err == nil {
		t.Fatal("AuthFor of an invalid reference succeeded")
	}
}

func TestDockerConfigFieldsAndTokens(t *testing.T) {
	cfg, err := container.ParseDockerConfigJSON([]byte(`{"auths":{
		"a.example.com":{"username":"u","password":"p"},
		"b.example.com":{"identitytoken":"refresh"},
		"c.example.com":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("user:pass:with:colons")) + `","username":"ignored"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]container.RegistryAuth{
		"a.example.com/x": {ServerAddress: "a.example.com", Username: "u", Password: "p"},
		"b.example.com/x": {ServerAddress: "b.example.com", IdentityToken: "refresh"},
		"c.example.com/x": {ServerAddress: "c.example.com", Username: "user", Password: "pass:with:colons"},
	} {
		got, err := cfg.AuthFor(ref)
		if err != nil || got == nil || *got != want {
			t.Errorf("AuthFor(%s) = %#v, %v; want %#v", ref, got, err, want)
		}
	}
}

// TestDockerConfigErrorsShowNoData: what does not parse is named by its
// registry and what is wrong, never by its bytes.
func TestDockerConfigErrorsShowNoData(t *testing.T) {
	for name, data := range map[string]string{
		"not JSON":              `{"auths": {"r.example.com": {"auth": "c2VjcmV0LXBhc3N3b3Jk"}}`,
		"not base64":            `{"auths": {"r.example.com": {"auth": "secret-password!"}}}`,
		"no colon":              `{"auths": {"r.example.com": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("secret-password")) + `"}}}`,
		"the wrong shape":       `{"auths": ["secret-password"]}`,
		"an entry with no host": `{"auths": {"https:///path": {"auth": "c2VjcmV0LXBhc3N3b3Jk"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := container.ParseDockerConfigJSON([]byte(data))
			if err == nil {
				t.Fatal("it parsed")
			}
			if strings.Contains(err.Error(), "secret-password") || strings.Contains(err.Error(), "c2VjcmV0") {
				t.Fatalf("the error shows the data: %v", err)
			}
		})
	}
}

// TestRegistryAuthFormatsRedacted: however the credentials are printed or
// logged, only the server shows.
func TestRegistryAuthFormatsRedacted(t *testing.T) {
	a := container.RegistryAuth{ServerAddress: "r.example.com", Username: "user-x", Password: "password-x", IdentityToken: "token-x", RegistryToken: "bearer-x"}
	var logged strings.Builder
	log := funcr.New(func(prefix, args string) { logged.WriteString(args) }, funcr.Options{})
	log.Info("pulling", "auth", a, "ptr", &a)
	for _, out := range []string{fmt.Sprint(a), fmt.Sprintf("%v %+v %#v %s", a, a, a, &a), fmt.Sprint(container.PullOptions{Auth: &a}), logged.String()} {
		for _, secret := range []string{"user-x", "password-x", "token-x", "bearer-x"} {
			if strings.Contains(out, secret) {
				t.Fatalf("%q shows %s", out, secret)
			}
		}
		if !strings.Contains(out, "r.example.com") && out != fmt.Sprint(container.PullOptions{Auth: &a}) {
			t.Errorf("%q does not name the server", out)
		}
	}
}

// pullHang is an engine whose pulls hang until their context ends, and
// which reports the deadline they saw.
type pullHang struct {
	container.Runtime
	deadline chan time.Duration
}

func (p *pullHang) PullImage(ctx context.Context, ref string, _ container.PullOptions) error {
	d, _ := ctx.Deadline()
	p.deadline <- time.Until(d)
	<-ctx.Done()
	return container.NewError("pull", "image", ref, container.KindTransient, ctx.Err())
}

// TestPullGetsItsOwnBound: a pull is bounded by ImagePullTimeout, not by
// the round trip's bound, and the caller's cancellation stays what it is.
func TestPullGetsItsOwnBound(t *testing.T) {
	h := &pullHang{deadline: make(chan time.Duration, 1)}
	rt := container.WithCallTimeout(h, 100*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.PullImage(ctx, "registry.example.com/app:v1", container.PullOptions{}) }()
	if d := <-h.deadline; d < container.ImagePullTimeout-time.Minute || d > container.ImagePullTimeout {
		t.Fatalf("the pull's deadline is %s away; want about %s", d, container.ImagePullTimeout)
	}
	cancel()
	err := <-done
	if container.IsUnreachable(err) || container.IsTimeout(err) || !container.IsTransient(err) {
		t.Fatalf("a pull its caller cancelled = %v; want the cancellation as it was", err)
	}
}
