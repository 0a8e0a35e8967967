package mirror

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Request is one request in the registry's access log.
type Request struct {
	// Source is the client's address as the registry saw it: a node's
	// address on the network it shares with the registry.
	Source string
	// Method and Path are the request's; Path is without its query, as
	// containerd adds ?ns=<registry> to what it asks a mirror.
	Method, Path string
	// Status is the registry's HTTP status code.
	Status int
}

func (r Request) String() string {
	return fmt.Sprintf("%s %s %s %d", r.Source, r.Method, r.Path, r.Status)
}

// ParseAccessLog reads the requests in the registry's log: the lines in
// the combined log format that the distribution registry writes to stdout
// for each request,
//
//	<source> - <user> [<time>] "<method> <uri> <protocol>" <status> <size> "<referer>" "<agent>"
//
// Its other lines (its own logfmt messages) are skipped.
func ParseAccessLog(log string) []Request {
	var out []Request
	for _, line := range strings.Split(log, "\n") {
		source, rest, ok := strings.Cut(strings.TrimRight(line, "\r"), " ")
		if !ok || net.ParseIP(source) == nil {
			continue
		}
		_, rest, ok = strings.Cut(rest, `] "`)
		if !ok {
			continue
		}
		request, rest, ok := strings.Cut(rest, `"`)
		if !ok {
			continue
		}
		parts, after := strings.Fields(request), strings.Fields(rest)
		if len(parts) != 3 || len(after) == 0 {
			continue
		}
		status, err := strconv.Atoi(after[0])
		if err != nil {
			continue
		}
		path, _, _ := strings.Cut(parts[1], "?")
		out = append(out, Request{Source: source, Method: parts[0], Path: path, Status: status})
	}
	return out
}

// From are the requests of reqs whose source is one of sources.
func From(reqs []Request, sources ...string) []Request {
	var out []Request
	for _, r := range reqs {
		if slices.Contains(sources, r.Source) {
			out = append(out, r)
		}
	}
	return out
}

// Pulled is true when reqs (one client's) pulled repo:tag: the tag's
// manifest was asked for, by HEAD (containerd resolves a tag with HEAD
// first, then fetches by digest) or GET, and a manifest or blob of repo
// was fetched with GET, each answered 200 OK.
func Pulled(reqs []Request, repo, tag string) bool {
	prefix := "/v2/" + repo + "/"
	resolved, fetched := false, false
	for _, r := range reqs {
		if r.Status != 200 || !strings.HasPrefix(r.Path, prefix) {
			continue
		}
		kind, ref, _ := strings.Cut(strings.TrimPrefix(r.Path, prefix), "/")
		if kind == "manifests" && ref == tag && (r.Method == "HEAD" || r.Method == "GET") {
			resolved = true
		}
		if (kind == "manifests" || kind == "blobs") && r.Method == "GET" {
			fetched = true
		}
	}
	return resolved && fetched
}
