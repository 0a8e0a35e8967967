package mirror_test

import (
	"reflect"
	"testing"

	"github.com/capct/cluster-api-provider-container/test/mirror"
)

// Lines as capct/registry writes them: its access log, and its own logfmt
// messages, which come in the same container log.
const (
	agent   = ` "" "containerd/v2.2.0"`
	headTag = `172.18.0.7 - - [07/Dec/2026:06:08:15 +0000] "HEAD /v2/library/busybox/manifests/capct-mirror?ns=docker.io HTTP/1.1" 200 0` + agent
	getMan  = `172.18.0.7 - - [07/Dec/2026:06:08:15 +0000] "GET /v2/library/busybox/manifests/sha256:e2ca?ns=docker.io HTTP/1.1" 200 528` + agent
	getBlob = `172.18.0.7 - - [07/Dec/2026:06:08:15 +0000] "GET /v2/library/busybox/blobs/sha256:3773?ns=docker.io HTTP/1.1" 200 1064344` + agent
	push    = `172.17.0.1 - - [07/Dec/2026:06:08:15 +0000] "PUT /v2/library/busybox/manifests/capct-mirror HTTP/1.1" 201 0 "" "docker/20.10.24 UpstreamClient(Docker-Client/28.2.2 \\(linux\\))"`
	logfmt  = `time="2026-12-07T06:08:15Z" level=info msg="response completed" http.request.method=GET http.request.uri="/v2/"`
	ipv6    = `fd00::7 - - [07/Dec/2026:06:08:15 +0000] "GET /v2/ HTTP/1.1" 401 87` + agent
)

func TestParseAccessLog(t *testing.T) {
	tests := []struct {
		name string
		log  string
		want []mirror.Request
	}{
		{name: "empty", log: "", want: nil},
		{name: "logfmt lines skipped", log: logfmt + "\n" + logfmt, want: nil},
		{name: "query dropped", log: headTag, want: []mirror.Request{
			{Source: "172.18.0.7", Method: "HEAD", Path: "/v2/library/busybox/manifests/capct-mirror", Status: 200}}},
		{name: "escaped quotes in the agent", log: push, want: []mirror.Request{
			{Source: "172.17.0.1", Method: "PUT", Path: "/v2/library/busybox/manifests/capct-mirror", Status: 201}}},
		{name: "IPv6 source", log: ipv6, want: []mirror.Request{{Source: "fd00::7", Method: "GET", Path: "/v2/", Status: 401}}},
		{name: "mixed, CRLF and blank lines", log: logfmt + "\r\n" + headTag + "\r\n\n" + getBlob + "\n", want: []mirror.Request{
			{Source: "172.18.0.7", Method: "HEAD", Path: "/v2/library/busybox/manifests/capct-mirror", Status: 200},
			{Source: "172.18.0.7", Method: "GET", Path: "/v2/library/busybox/blobs/sha256:3773", Status: 200}}},
		{name: "truncated request line", log: `172.18.0.7 - - [07/Dec/2026:06:08:15 +0000] "GET /v2/`, want: nil},
		{name: "no status", log: `172.18.0.7 - - [07/Dec/2026:06:08:15 +0000] "GET /v2/ HTTP/1.1" -`, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mirror.ParseAccessLog(tt.log); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseAccessLog() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFrom(t *testing.T) {
	reqs := mirror.ParseAccessLog(push + "\n" + headTag + "\n" + ipv6)
	tests := []struct {
		name    string
		sources []string
		want    int
	}{
		{name: "none asked", sources: nil, want: 0},
		{name: "one node", sources: []string{"172.18.0.7"}, want: 1},
		{name: "both families of a node", sources: []string{"172.18.0.7", "fd00::7"}, want: 2},
		{name: "unknown", sources: []string{"172.18.0.8"}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mirror.From(reqs, tt.sources...); len(got) != tt.want {
				t.Errorf("From(%v) = %v, want %d requests", tt.sources, got, tt.want)
			}
		})
	}
}

func TestPulled(t *testing.T) {
	tests := []struct {
		name string
		log  string
		want bool
	}{
		{name: "resolved by HEAD, fetched by digest", log: headTag + "\n" + getMan + "\n" + getBlob, want: true},
		{name: "resolved by GET of the tag", log: `172.18.0.7 - - [x] "GET /v2/library/busybox/manifests/capct-mirror HTTP/1.1" 200 528` + agent, want: true},
		{name: "resolved only", log: headTag, want: false},
		{name: "fetched only", log: getMan + "\n" + getBlob, want: false},
		{name: "the push is no pull", log: push, want: false},
		{name: "tag not found", log: `172.18.0.7 - - [x] "HEAD /v2/library/busybox/manifests/capct-mirror HTTP/1.1" 404 0` + agent + "\n" + getBlob, want: false},
		{name: "another tag", log: `172.18.0.7 - - [x] "HEAD /v2/library/busybox/manifests/latest HTTP/1.1" 200 0` + agent + "\n" + getBlob, want: false},
		{name: "another repository", log: `172.18.0.7 - - [x] "HEAD /v2/library/busyboxes/manifests/capct-mirror HTTP/1.1" 200 0` + agent + "\n" + getBlob, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mirror.Pulled(mirror.ParseAccessLog(tt.log), "library/busybox", "capct-mirror"); got != tt.want {
				t.Errorf("Pulled() = %v, want %v", got, tt.want)
			}
		})
	}
}
