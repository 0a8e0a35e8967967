package imagecopy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// MaxPullRetryAfter bounds the backoff between the pulls of an image that
// keep failing: RetryAfter after the first failure, doubling with each
// one after it. A registry that refuses is not asked every minute, and a
// fixed Secret or a registry back is tried within five.
const MaxPullRetryAfter = 5 * time.Minute

// pullRetryAfter is how long the failure of a pull is reported before the
// next request starts it again, after failures failures in a row.
func pullRetryAfter(failures int) time.Duration {
	d := RetryAfter
	for i := 1; i < failures && d < MaxPullRetryAfter; i++ {
		d *= 2
	}
	return min(d, MaxPullRetryAfter)
}

// PullError says that an engine could not pull an image: the registry's
// answer, as the engine relays it. It never carries the credentials.
type PullError struct {
	Ref, Engine string
	Err         error
}

func (e *PullError) Error() string {
	msg := fmt.Sprintf("%s could not pull image %q", engineDescription(e.Engine), e.Ref)
	if container.IsUnauthorized(e.Err) {
		msg += " (the registry answered 401 Unauthorized: the credentials for it are missing or wrong; they come from the ContainerCluster's spec.imagePullSecretRef)"
	}
	return msg + ": " + e.Err.Error()
}

func (e *PullError) Unwrap() error { return e.Err }

// Pull reports the pull of ref onto the engine target from the image's
// registry, starting it when none runs and the last one did not fail
// within its backoff (pullRetryAfter). auth is asked for the credentials
// only when a pull starts; its error is reported and starts nothing.
// Machines that ask while a pull runs join it, whatever credentials they
// have, and waiter is woken when it ends. Callers ask only for an image
// the target lacks.
func (c *Copier) Pull(target, ref string, auth func() (*container.RegistryAuth, error), waiter types.NamespacedName) Status {
	key := jobKey{target: target, ref: ref, pull: true}
	c.mu.Lock()
	st, ok := c.pullStatusLocked(c.jobs[key], waiter)
	c.mu.Unlock()
	if ok {
		return st
	}
	// Outside the lock: the credentials may be an API request away.
	var creds *container.RegistryAuth
	if auth != nil {
		var err error
		if creds, err = auth(); err != nil {
			return Status{Err: err}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.jobs[key]
	if st, ok := c.pullStatusLocked(j, waiter); ok {
		// Another request started it meanwhile.
		return st
	}
	next := &job{waiters: map[types.NamespacedName]struct{}{waiter: {}}}
	if j != nil && j.err != nil {
		next.failures = j.failures
	}
	c.jobs[key] = next
	go c.run(next, func() error { return c.pull(key, next, creds) })
	return Status{Pulling: true}
}

// pullStatusLocked is the status of the pull j, when it says something:
// it runs (waiter joins it), or it failed within its backoff.
func (c *Copier) pullStatusLocked(j *job, waiter types.NamespacedName) (Status, bool) {
	switch {
	case j == nil:
		return Status{}, false
	case !j.done:
		j.waiters[waiter] = struct{}{}
		return Status{Pulling: true, Copied: j.copied.Load()}, true
	case j.err != nil && c.clock.Since(j.finished) < pullRetryAfter(j.failures):
		return Status{Err: j.err}, true
	}
	return Status{}, false
}

// pulling reports the pull of ref onto target while it runs or its
// failure is reported, without starting one.
func (c *Copier) pulling(target, ref string, waiter types.NamespacedName) (Status, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pullStatusLocked(c.jobs[jobKey{target: target, ref: ref, pull: true}], waiter)
}

// pull has the engine pull the image, counting what it fetched into j.
func (c *Copier) pull(key jobKey, j *job, auth *container.RegistryAuth) error {
	rt, err := c.engines.Get(key.target)
	if err != nil {
		return fmt.Errorf("failed to reach %s to pull image %q onto: %w", engineDescription(key.target), key.ref, err)
	}
	err = rt.PullImage(c.base, key.ref, container.PullOptions{Auth: auth, Progress: func(n int64) { j.copied.Store(n) }})
	if err != nil {
		return &PullError{Ref: key.ref, Engine: key.target, Err: err}
	}
	return nil
}

// Missing is an image that an object needs on an engine that lacks it.
type Missing struct {
	// Field names the field that asks for it, e.g. spec.preLoadImages[0].
	Field string
	// Ref is the image.
	Ref string
	// Pull says that the object's pull policy lets the engine pull it.
	Pull bool
	// PolicyField names the pull policy's field, for messages.
	PolicyField string
}

// Request is what Obtain puts on an engine.
type Request struct {
	// Target is the engine that lacks the images; engines.Local for the
	// manager's own.
	Target string
	// Sources are the engines an image may be copied from, in order (see
	// Sources); none for the manager's own engine, which gets images by
	// load or pull only.
	Sources []string
	// Missing are the images the engine lacks.
	Missing []Missing
	// Auth returns the credentials for ref's registry, or nil to pull
	// anonymously; asked only when a pull starts. Nil pulls anonymously.
	Auth func(ref string) (*container.RegistryAuth, error)
	// Waiter is woken when a copy or a pull it waits for ends.
	Waiter types.NamespacedName
}

// Wait is why an object waits for its images: its condition's reason and
// message.
type Wait struct {
	Reason, Message string
}

// Obtain has each missing image put on the engine: copied from the first
// source that holds it, so that the machines of a cluster on several
// engines run the very image its other engines run, else, where the
// object's pull policy allows, pulled from its registry. Images go one at
// a time: the first still under way is the Wait (CopyingImage or
// PullingImage, saying how far); once none is, the Wait names every image
// that could not be had, ImagePullFailed when a pull failed and
// ImageNotOnHost otherwise.
func (c *Copier) Obtain(req Request) Wait {
	var failed []string
	pullFailed := false
	for _, m := range req.Missing {
		if m.Pull {
			// A pull under way, or failed a moment ago, stands: asking for
			// a copy again meanwhile would only hide it.
			if st, ok := c.pulling(req.Target, m.Ref, req.Waiter); ok {
				if st.Pulling {
					return Wait{Reason: infrav1.PullingImageReason, Message: st.Describe(m.Ref, m.Field, req.Target)}
				}
				pullFailed = true
				failed = append(failed, fmt.Sprintf("%s: %v", m.Field, st.Err))
				continue
			}
		}
		if len(req.Sources) > 0 {
			st := c.Ensure(req.Target, m.Ref, req.Sources, req.Waiter)
			if st.Copying {
				return Wait{Reason: infrav1.CopyingImageReason, Message: st.Describe(m.Ref, m.Field, req.Target)}
			}
			var none *NoSourceError
			if !errors.As(st.Err, &none) {
				failed = append(failed, fmt.Sprintf("%s: image %q is not on %s, and CAPCT could not copy it from another engine: %v",
					m.Field, m.Ref, engineDescription(req.Target), st.Err))
				continue
			}
		}
		if !m.Pull {
			failed = append(failed, notPulled(m, req))
			continue
		}
		auth := func() (*container.RegistryAuth, error) {
			if req.Auth == nil {
				return nil, nil
			}
			return req.Auth(m.Ref)
		}
		st := c.Pull(req.Target, m.Ref, auth, req.Waiter)
		if st.Pulling {
			return Wait{Reason: infrav1.PullingImageReason, Message: st.Describe(m.Ref, m.Field, req.Target)}
		}
		pullFailed = true
		failed = append(failed, fmt.Sprintf("%s: %v", m.Field, st.Err))
	}
	reason := infrav1.ImageNotOnHostReason
	if pullFailed {
		reason = infrav1.ImagePullFailedReason
	}
	return Wait{Reason: reason, Message: strings.Join(failed, "; ")}
}

// notPulled says why an image the engine lacks stays missing under the
// pull policy Never.
func notPulled(m Missing, req Request) string {
	where := "the container host"
	if len(req.Sources) > 0 {
		where = fmt.Sprintf("%s, no other engine of the cluster holds it to copy,", engineDescription(req.Target))
	}
	return fmt.Sprintf("%s: image %q is not on %s and %s is Never: load it there (docker load), or let CAPCT pull it (IfNotPresent)",
		m.Field, m.Ref, where, m.PolicyField)
}

// PullSecretAuth returns the credentials function of a Request for the
// images of cc: those of cc's spec.imagePullSecretRef (a
// kubernetes.io/dockerconfigjson Secret in cc's namespace), read through
// reader (the manager's API reader: it never caches Secrets) once, when
// the first pull starts, and chosen per image by its registry's host. A
// cluster without the reference pulls anonymously. Its errors name the
// Secret and what is wrong, never the Secret's data.
func PullSecretAuth(ctx context.Context, reader client.Reader, cc *infrav1.ContainerCluster) func(ref string) (*container.RegistryAuth, error) {
	if cc == nil || cc.Spec.ImagePullSecretRef == nil {
		return nil
	}
	key := client.ObjectKey{Namespace: cc.Namespace, Name: cc.Spec.ImagePullSecretRef.Name}
	var (
		read bool
		cfg  container.DockerConfig
		err  error
	)
	return func(ref string) (*container.RegistryAuth, error) {
		if !read {
			read = true
			cfg, err = readPullSecret(ctx, reader, key)
		}
		if err != nil {
			return nil, err
		}
		return cfg.AuthFor(ref)
	}
}

// readPullSecret reads and parses the pull Secret key.
func readPullSecret(ctx context.Context, reader client.Reader, key client.ObjectKey) (container.DockerConfig, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, key, s); err != nil {
		return container.DockerConfig{}, fmt.Errorf("spec.imagePullSecretRef: failed to read Secret %s: %w", klog.KRef(key.Namespace, key.Name), err)
	}
	if s.Type != corev1.SecretTypeDockerConfigJson {
		return container.DockerConfig{}, fmt.Errorf("spec.imagePullSecretRef: Secret %s is of type %q, not %s",
			klog.KObj(s), s.Type, corev1.SecretTypeDockerConfigJson)
	}
	cfg, err := container.ParseDockerConfigJSON(s.Data[corev1.DockerConfigJsonKey])
	if err != nil {
		return container.DockerConfig{}, fmt.Errorf("spec.imagePullSecretRef: Secret %s: %w", klog.KObj(s), err)
	}
	return cfg, nil
}

// engineDescription names an engine in a sentence: "engine <name>", or
// the manager's own.
func engineDescription(name string) string {
	if name == engines.Local {
		return "the manager's engine"
	}
	return "engine " + name
}
