package main

import (
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// requestCounter counts the requests of the management clients that it
// wraps (rest.Config.Wrap), by user agent, verb and resource, so that the
// benchmark tells CAPCT's manager from Cluster API's. Each process counts
// its own: Cluster API's hands its counts to the parent when it stops
// (snapshot, merge), and the parent's workload proxy counts both
// managers' requests to the workload clusters.
type requestCounter struct {
	mu     sync.Mutex
	counts map[requestKey]int
	// bytes are the response bytes read per key, as the client read them
	// (compressed when the server compressed them).
	bytes map[requestKey]int64
}

type requestKey struct {
	Agent    string `json:"agent"`
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
}

func newRequestCounter() *requestCounter {
	return &requestCounter{counts: map[requestKey]int{}, bytes: map[requestKey]int64{}}
}

// wrap is a transport.WrapperFunc.
func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		k := c.add("", req.Header.Get("User-Agent"), req.Method, req.URL)
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, c: c, k: k}
		}
		return resp, err
	})
}

// countingBody adds what is read of a response to its key's bytes.
type countingBody struct {
	io.ReadCloser
	c *requestCounter
	k requestKey
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.mu.Lock()
		b.c.bytes[b.k] += int64(n)
		b.c.mu.Unlock()
	}
	return n, err
}

// add counts one request; prefix tells the workload clusters' requests
// from the management cluster's.
func (c *requestCounter) add(prefix, agent, method string, u *url.URL) requestKey {
	res, collection := resource(u.Path)
	v := verb(method, u)
	if v == "get" && collection {
		v = "list"
	}
	k := requestKey{Agent: prefix + agent, Verb: v, Resource: res}
	c.mu.Lock()
	c.counts[k]++
	c.mu.Unlock()
	return k
}

// requestRecord is one key's counts, as Cluster API's process hands them
// to the parent.
type requestRecord struct {
	requestKey
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
}

// snapshot returns every key's counts, sorted so that the report reads
// the same from run to run.
func (c *requestCounter) snapshot() []requestRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	recs := make([]requestRecord, 0, len(c.counts))
	for k, n := range c.counts {
		recs = append(recs, requestRecord{requestKey: k, Count: n, Bytes: c.bytes[k]})
	}
	slices.SortFunc(recs, func(a, b requestRecord) int {
		return strings.Compare(a.Agent+" "+a.Verb+" "+a.Resource, b.Agent+" "+b.Verb+" "+b.Resource)
	})
	return recs
}

// merge adds another counter's records (Cluster API's process's) to c.
func (c *requestCounter) merge(recs []requestRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		c.counts[r.requestKey] += r.Count
		if r.Bytes != 0 {
			c.bytes[r.requestKey] += r.Bytes
		}
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func verb(method string, u *url.URL) string {
	switch method {
	case http.MethodGet:
		if u.Query().Get("watch") == "true" {
			return "watch"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(method)
}

// resource returns the resource (and subresource) a request's path names,
// and whether it is the collection:
// /api/v1/namespaces/ns/secrets/x → secrets,
// /apis/g/v/namespaces/ns/things/x/status → things/status.
func resource(path string) (string, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "discovery", false
	case 1:
		return parts[0], true
	case 2:
		return parts[0], false
	default:
		return parts[0] + "/" + parts[2], false
	}
}

// requestStats are the counted requests of one user agent.
type requestStats struct {
	Total  int `json:"total"`
	Writes int `json:"writes"`
	// ByVerbResource is "verb resource" → count, for the analysis.
	ByVerbResource map[string]int `json:"byVerbResource"`
	// ResponseMiB are the response bytes read (management cluster only),
	// and by "verb resource".
	ResponseMiB               float64            `json:"responseMiB"`
	ResponseMiBByVerbResource map[string]float64 `json:"responseMiBByVerbResource"`
}

func (c *requestCounter) stats(agent string) requestStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := requestStats{ByVerbResource: map[string]int{}, ResponseMiBByVerbResource: map[string]float64{}}
	for k, n := range c.bytes {
		if strings.HasPrefix(k.Agent, agent) {
			s.ResponseMiB += float64(n) / mib
			s.ResponseMiBByVerbResource[k.Verb+" "+k.Resource] += float64(n) / mib
		}
	}
	for k, n := range c.counts {
		if !strings.HasPrefix(k.Agent, agent) {
			continue
		}
		s.Total += n
		if slices.Contains([]string{"create", "update", "patch", "delete"}, k.Verb) {
			s.Writes += n
		}
		s.ByVerbResource[k.Verb+" "+k.Resource] += n
	}
	return s
}
