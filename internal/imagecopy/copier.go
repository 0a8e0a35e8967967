// Package imagecopy puts an image on a container engine that lacks it,
// copied from another engine through the manager (SaveImages piped into
// LoadImages), so that machines on several engines need no registry
// (docs/multihost.md, section 5).
//
// A copy is pinned to the image's content, not its tag. A tag is a name
// anyone with an engine can point at any image, so the source of truth is
// the image ID (the digest the engine derives from the image's bytes), and
// the rule is that every source engine that answers and holds the tag must
// hold the same image under it: sources that disagree make the copy refuse
// (AmbiguousImageError) rather than pick one, since a machine must not run
// whatever image happened to be asked first. The image is then saved by
// that ID (a tag moved meanwhile changes nothing), loaded, found on the
// target by that ID, which the target derived from the bytes it received,
// and only then tagged there (ImageMismatchError otherwise).
//
// It also has engines pull images from their registries (Pull), where an
// object's imagePullPolicy allows, the same way: once per engine and
// image, on a goroutine of its own, with the progress reported and the
// waiters woken at the end; a failed pull is tried again after a backoff
// that doubles up to MaxPullRetryAfter. Obtain decides between the two
// for the images an object lacks: a copy from an engine of its cluster
// first, so that all of a cluster's machines run the same image, and a
// pull only when none holds it (docs/registries.md).
package imagecopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// DefaultMaxSize is the default of --max-image-copy-size: room for the
// node image (about 1.4 GB, docs/node-image.md) and then some, while an
// image that would fill a host is refused.
const DefaultMaxSize int64 = 4 << 30

// RetryAfter is how long a failed copy is reported before the next
// request starts it again: a source may have gained the image since.
const RetryAfter = time.Minute

// ErrTooLarge is why a copy stopped at the size bound.
var ErrTooLarge = errors.New("the image is larger than --max-image-copy-size")

// NoSourceError says that no engine the copy may come from holds the image.
type NoSourceError struct {
	Ref     string
	Sources []string
}

func (e *NoSourceError) Error() string {
	names := make([]string, 0, len(e.Sources))
	for _, s := range e.Sources {
		names = append(names, engineName(s))
	}
	return fmt.Sprintf("no engine to copy image %q from holds it (asked: %s)", e.Ref, strings.Join(names, ", "))
}

// AmbiguousImageError says that the engines the copy may come from hold
// different images under the reference: which one the machines should run
// is not CAPCT's to guess.
type AmbiguousImageError struct {
	Ref string
	// IDs is the image ID each engine holding Ref has under it.
	IDs map[string]string
}

func (e *AmbiguousImageError) Error() string {
	held := make([]string, 0, len(e.IDs))
	for _, s := range slices.Sorted(maps.Keys(e.IDs)) {
		held = append(held, fmt.Sprintf("engine %s has %s", engineName(s), e.IDs[s]))
	}
	return fmt.Sprintf("refusing to copy image %q: the engines that hold it hold different images under it (%s); make them agree, or use a reference by digest",
		e.Ref, strings.Join(held, ", "))
}

// ImageMismatchError says that what the target holds after the copy is not
// the image the source held under the reference.
type ImageMismatchError struct {
	Ref, Source, Target string
	// Want is the image ID on the source; Got what the target has ("" for
	// no image of that ID).
	Want, Got string
}

func (e *ImageMismatchError) Error() string {
	got := "no image of that ID"
	if e.Got != "" {
		got = "image " + e.Got
	}
	return fmt.Sprintf("refusing image %q copied from engine %s to engine %s: the source holds image %s under it, the target has %s",
		e.Ref, engineName(e.Source), engineName(e.Target), e.Want, got)
}

// Copier runs each copy once, on a goroutine of its own, so that no
// reconcile worker is held for the minutes a gigabyte takes: machines that
// need the same image on the same engine join the copy in flight, and all
// are woken when it ends. A copy interrupted by a restart leaves no tagged
// image behind (the engine tags an image once its load completes), so it
// simply starts again.
type Copier struct {
	base    context.Context
	engines engines.Set
	maxSize int64
	notify  func(types.NamespacedName)
	clock   clock.PassiveClock

	mu   sync.Mutex
	jobs map[jobKey]*job
}

// jobKey is what a job puts where: a copy and a pull of the same image to
// the same engine are jobs of their own, so that a copy that found no
// source never stands for the pull that follows it.
type jobKey struct {
	target, ref string
	pull        bool
}

type job struct {
	source string
	// copied counts the bytes copied, or fetched by a pull.
	copied atomic.Int64
	// done, err, finished and failures are guarded by Copier.mu.
	done     bool
	err      error
	finished time.Time
	// failures counts the pulls of the key that failed in a row, this one
	// included once it has; it sets the pull's backoff.
	failures int
	waiters  map[types.NamespacedName]struct{}
}

// New returns a Copier whose copies run under base (the manager's
// lifetime), between engines of set, each at most maxSize bytes (0 means
// DefaultMaxSize), and that calls notify for each machine waiting on a copy
// when it ends. clk nil means the real clock.
func New(base context.Context, set engines.Set, maxSize int64, notify func(types.NamespacedName), clk clock.PassiveClock) *Copier {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Copier{base: base, engines: set, maxSize: maxSize, notify: notify, clock: clk, jobs: map[jobKey]*job{}}
}

// Status is where the copy or the pull of an image to an engine stands.
type Status struct {
	// Copying is true while a copy runs: from Source, Copied bytes so far.
	Copying bool
	Source  string
	Copied  int64
	// Pulling is true while a pull runs, Copied bytes fetched so far.
	Pulling bool
	// Err is why the last copy or pull failed, reported until RetryAfter
	// (for a pull, its backoff) has passed.
	Err error
}

// Ensure reports the copy of ref to the engine target, starting it when
// none runs (and a failed one is older than RetryAfter): from the first of
// sources, in order, that holds ref, provided all of them that do hold the
// same image under it. waiter is woken when the copy ends.
// Callers ask only for an image the target lacks; a copy that succeeded is
// started again if they ask once more.
func (c *Copier) Ensure(target, ref string, sources []string, waiter types.NamespacedName) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := jobKey{target: target, ref: ref}
	j := c.jobs[key]
	switch {
	case j != nil && !j.done:
		j.waiters[waiter] = struct{}{}
		return Status{Copying: true, Source: j.source, Copied: j.copied.Load()}
	case j != nil && j.err != nil && c.clock.Since(j.finished) < RetryAfter:
		return Status{Err: j.err}
	}
	j = &job{waiters: map[types.NamespacedName]struct{}{waiter: {}}}
	c.jobs[key] = j
	sources = slices.DeleteFunc(slices.Clone(sources), func(s string) bool { return s == target })
	go c.run(j, func() error { return c.transfer(key, j, sources) })
	return Status{Copying: true}
}

// run runs a job's work, records the outcome and wakes the waiters.
func (c *Copier) run(j *job, work func() error) {
	err := work()
	c.mu.Lock()
	j.done, j.err, j.finished = true, err, c.clock.Now()
	if err != nil {
		j.failures++
	}
	waiters := j.waiters
	j.waiters = nil
	c.mu.Unlock()
	for w := range waiters {
		c.notify(w)
	}
}

// transfer finds a source and pipes its archive of the image into the
// target, counting the bytes into j.
func (c *Copier) transfer(key jobKey, j *job, sources []string) error {
	ctx := c.base
	to, err := c.engines.Get(key.target)
	if err != nil {
		return fmt.Errorf("failed to reach engine %s to copy image %q to: %w", engineName(key.target), key.ref, err)
	}
	source, id, err := c.findSource(ctx, key.ref, sources)
	if err != nil {
		return err
	}
	c.mu.Lock()
	j.source = source
	c.mu.Unlock()
	from, err := c.engines.Get(source)
	if err != nil {
		return fmt.Errorf("failed to reach engine %s to copy image %q from: %w", engineName(source), key.ref, err)
	}
	// By ID: the tag may be moved on the source while the copy runs.
	archive, err := from.SaveImages(ctx, []string{id})
	if err != nil {
		return fmt.Errorf("failed to save image %q (%s) on engine %s: %w", key.ref, id, engineName(source), err)
	}
	defer func() { _ = archive.Close() }()
	counted := &boundedReader{r: archive, max: c.maxSize, n: &j.copied}
	if err := to.LoadImages(ctx, counted); err != nil {
		if counted.over.Load() {
			err = ErrTooLarge
		}
		return fmt.Errorf("failed to copy image %q from engine %s to engine %s: %w", key.ref, engineName(source), engineName(key.target), err)
	}
	// The target derives the ID of what it loaded from the bytes it
	// received: only an image of the source's ID there is the image, and
	// only it gets the tag. A load that ended early loads nothing.
	mismatch := &ImageMismatchError{Ref: key.ref, Source: source, Target: key.target, Want: id}
	if _, err := to.ImageID(ctx, id); container.IsNotFound(err) {
		return mismatch
	} else if err != nil {
		return fmt.Errorf("failed to look for image %s on engine %s after its copy: %w", id, engineName(key.target), err)
	}
	if err := to.TagImage(ctx, id, key.ref); err != nil {
		return fmt.Errorf("failed to tag image %s as %q on engine %s: %w", id, key.ref, engineName(key.target), err)
	}
	if mismatch.Got, err = to.ImageID(ctx, key.ref); err != nil || mismatch.Got != id {
		return errors.Join(mismatch, err)
	}
	return nil
}

// findSource returns the first of sources that holds ref, and the ID of
// the image it holds under it, which every other source that holds ref
// must hold too. Sources that cannot be asked are left out, as when none
// holds it.
func (c *Copier) findSource(ctx context.Context, ref string, sources []string) (string, string, error) {
	first, ids := "", map[string]string{}
	for _, s := range sources {
		rt, err := c.engines.Get(s)
		if err != nil {
			continue
		}
		id, err := rt.ImageID(ctx, ref)
		if err != nil {
			continue
		}
		if len(ids) == 0 {
			// Not "" for none: that names the manager's own engine.
			first = s
		}
		ids[s] = id
	}
	if len(ids) == 0 {
		return "", "", &NoSourceError{Ref: ref, Sources: sources}
	}
	for _, id := range ids {
		if id != ids[first] {
			return "", "", &AmbiguousImageError{Ref: ref, IDs: ids}
		}
	}
	return first, ids[first], nil
}

// boundedReader counts what is read through it into n and fails once more
// than max bytes have gone by, so that the target's load stops there.
type boundedReader struct {
	r   io.Reader
	max int64
	n   *atomic.Int64
	// over is read after the load returns, while the engine client's
	// transport may still hold the reader.
	over atomic.Bool
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.n.Add(int64(n)) > b.max {
		b.over.Store(true)
		return 0, ErrTooLarge
	}
	return n, err
}

// Sources returns the engines an image for cc may be copied from, in the
// order they are asked: the cluster's own engines (Ensure skips the
// target), then the manager's own, where images are built and loaded.
func Sources(cc *infrav1.ContainerCluster) []string {
	return append(engines.Listed(cc), engines.Local)
}

// progressStep is the granularity of the progress Describe reports: each
// new report is a status write that wakes the object, so a gigabyte makes
// a handful, not thousands.
const progressStep = 256 << 20

// Describe says, for a condition, how the copy or the pull of ref (the
// value of field) to target stands while it runs.
func (st Status) Describe(ref, field, target string) string {
	if st.Pulling {
		fetched := st.Copied / progressStep * progressStep
		return fmt.Sprintf("pulling image %q of %s onto %s from its registry: %d MiB so far", ref, field, engineDescription(target), fetched>>20)
	}
	from := "another engine"
	if st.Source != "" {
		from = "engine " + engineName(st.Source)
	}
	copied := st.Copied / progressStep * progressStep
	return fmt.Sprintf("copying image %q of %s to engine %s from %s: %d MiB so far", ref, field, engineName(target), from, copied>>20)
}

// engineName names an engine in messages: the manager's own has no name.
func engineName(name string) string {
	if name == engines.Local {
		return "(the manager's own)"
	}
	return name
}
