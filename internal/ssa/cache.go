package ssa

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

const (
	// DefaultTTL is how long a key stays in a Cache without being used. It
	// is a few times a typical resync period, so a steady object hits several
	// times before its key could expire.
	DefaultTTL = 10 * time.Minute
	// DefaultMaxEntries bounds a Cache's size; the least recently used keys
	// are dropped first.
	DefaultMaxEntries = 10000
)

// Cache remembers applies that would change nothing: keys made of an object's
// identity, its resourceVersion and a hash of the request. It is safe for
// concurrent use and needs no goroutine: expired and excess keys are dropped
// as keys are added.
type Cache struct {
	name       string
	clock      clock.PassiveClock
	ttl        time.Duration
	maxEntries int

	mu      sync.Mutex
	entries map[string]*list.Element
	// order holds *entry from least to most recently used; with one TTL for
	// all keys that is also the order in which they expire.
	order *list.List

	hits   atomic.Int64
	misses atomic.Int64
}

type entry struct {
	key     string
	expires time.Time
}

// CacheOption configures a Cache.
type CacheOption func(*Cache)

// WithClock sets the clock a Cache expires keys by; tests pass a fake one.
func WithClock(c clock.PassiveClock) CacheOption {
	return func(cache *Cache) {
		if c != nil {
			cache.clock = c
		}
	}
}

// WithTTL sets how long an unused key is kept. Values <= 0 are ignored.
func WithTTL(ttl time.Duration) CacheOption {
	return func(cache *Cache) {
		if ttl > 0 {
			cache.ttl = ttl
		}
	}
}

// WithMaxEntries bounds the number of keys. Values <= 0 are ignored.
func WithMaxEntries(n int) CacheOption {
	return func(cache *Cache) {
		if n > 0 {
			cache.maxEntries = n
		}
	}
}

// NewCache returns an empty cache. name says whose cache it is (one per
// controller, like the field owner) for logs and docs.
func NewCache(name string, opts ...CacheOption) *Cache {
	c := &Cache{
		name:       name,
		clock:      clock.RealClock{},
		ttl:        DefaultTTL,
		maxEntries: DefaultMaxEntries,
		entries:    map[string]*list.Element{},
		order:      list.New(),
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// Name is the name the cache was created with.
func (c *Cache) Name() string { return c.name }

// Hits counts lookups that found their key: applies that were not sent.
func (c *Cache) Hits() int64 { return c.hits.Load() }

// Misses counts lookups that did not find their key: applies that were sent.
func (c *Cache) Misses() int64 { return c.misses.Load() }

// Len is the number of keys held, including expired ones not dropped yet.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// has reports whether key is present and unexpired, and refreshes it if so:
// a key stays valid for as long as the object keeps its resourceVersion, the
// TTL only bounds memory.
func (c *Cache) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	el, ok := c.entries[key]
	if ok {
		e := el.Value.(*entry)
		if now.Before(e.expires) {
			e.expires = now.Add(c.ttl)
			c.order.MoveToBack(el)
			c.hits.Add(1)
			return true
		}
		c.remove(el)
	}
	c.misses.Add(1)
	return false
}

// add records key, refreshing it if present, and drops expired and excess
// keys.
func (c *Cache) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if el, ok := c.entries[key]; ok {
		el.Value.(*entry).expires = now.Add(c.ttl)
		c.order.MoveToBack(el)
	} else {
		c.entries[key] = c.order.PushBack(&entry{key: key, expires: now.Add(c.ttl)})
	}
	for el := c.order.Front(); el != nil; el = c.order.Front() {
		if c.order.Len() <= c.maxEntries && now.Before(el.Value.(*entry).expires) {
			break
		}
		c.remove(el)
	}
}

func (c *Cache) remove(el *list.Element) {
	delete(c.entries, el.Value.(*entry).key)
	c.order.Remove(el)
}
