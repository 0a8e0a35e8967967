// PullImage: an in-memory registry that the fake engine pulls from, with
// basic authentication per registry host, answering as Docker relays a
// real registry's answers.

package fake

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// fakeRegistry is the images the fake's registries serve, by reference as
// written, and the credentials each registry host asks for.
type fakeRegistry struct {
	images map[string][]byte
	// logins maps a host to the user and password it asks for; a host
	// with none serves anyone.
	logins map[string][2]string
	// pulls are the references PullImage was asked for, in order.
	pulls []string
}

// AddRegistryImage makes the fake's registries serve ref with content as
// its saved form; PullImage puts it on the engine as AddImage would.
func (r *Runtime) AddRegistryImage(ref string, content []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.registry.images == nil {
		r.registry.images = map[string][]byte{}
	}
	r.registry.images[ref] = slices.Clone(content)
}

// RequireRegistryLogin makes the registry host (as container.RegistryHost
// names it) serve only pulls that present username and password.
func (r *Runtime) RequireRegistryLogin(host, username, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.registry.logins == nil {
		r.registry.logins = map[string][2]string{}
	}
	r.registry.logins[host] = [2]string{username, password}
}

// PullCalls returns the references PullImage was asked for, in order,
// whether the pull succeeded or not.
func (r *Runtime) PullCalls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.registry.pulls)
}

// PullImage implements container.Runtime.
func (r *Runtime) PullImage(ctx context.Context, ref string, opts container.PullOptions) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registry.pulls = append(r.registry.pulls, ref)
	if err := r.failure(OpPullImage); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return container.NewError("pull", "image", ref, container.KindTransient, err)
	}
	host, err := container.RegistryHost(ref)
	if err != nil {
		return container.NewError("pull", "image", ref, container.KindInvalid, err)
	}
	if login, ok := r.registry.logins[host]; ok {
		switch a := opts.Auth; {
		case a == nil:
			return container.NewError("pull", "image", ref, container.KindUnauthorized,
				fmt.Errorf("registry %s: no basic auth credentials", host))
		case a.Username != login[0] || a.Password != login[1]:
			return container.NewError("pull", "image", ref, container.KindUnauthorized,
				errors.New("unauthorized: authentication required"))
		}
	}
	content, ok := r.registry.images[ref]
	if !ok {
		return container.NewError("pull", "image", ref, container.KindNotFound,
			fmt.Errorf("manifest for %s not found: manifest unknown", ref))
	}
	r.tagLocked(ref, content)
	if opts.Progress != nil {
		opts.Progress(int64(len(content)))
	}
	return nil
}
