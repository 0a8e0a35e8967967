package ssa

import (
	"fmt"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestCacheTTL(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	c := NewCache("test", WithClock(clk), WithTTL(time.Minute))
	if c.has("a") {
		t.Fatal("empty cache has a key")
	}
	c.add("a")
	clk.SetTime(clk.Now().Add(59 * time.Second))
	if !c.has("a") {
		t.Fatal("key expired before its TTL")
	}
	// The hit refreshed the key: it lives another minute from now.
	clk.SetTime(clk.Now().Add(59 * time.Second))
	if !c.has("a") {
		t.Fatal("a hit did not refresh the key")
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if c.has("a") {
		t.Fatal("key outlived its TTL")
	}
	if c.Len() != 0 {
		t.Errorf("expired key still held: Len = %d", c.Len())
	}
	if c.Hits() != 2 || c.Misses() != 2 {
		t.Errorf("hits, misses = %d, %d; want 2, 2", c.Hits(), c.Misses())
	}
}

func TestCacheDropsExpiredKeysOnAdd(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	c := NewCache("test", WithClock(clk), WithTTL(time.Minute))
	for i := range 5 {
		c.add(fmt.Sprint(i))
	}
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	c.add("new")
	if c.Len() != 1 {
		t.Errorf("Len = %d after all old keys expired, want 1", c.Len())
	}
}

func TestCacheMaxEntries(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	c := NewCache("test", WithClock(clk), WithMaxEntries(3))
	c.add("a")
	c.add("b")
	c.add("c")
	c.has("a") // a is now the most recently used
	c.add("d") // drops b, the least recently used
	if c.Len() != 3 {
		t.Fatalf("Len = %d, want 3", c.Len())
	}
	for key, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if got := c.has(key); got != want {
			t.Errorf("has(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestCacheOptionsIgnoreInvalidValues(t *testing.T) {
	c := NewCache("test", WithClock(nil), WithTTL(-1), WithMaxEntries(0))
	if c.clock == nil || c.ttl != DefaultTTL || c.maxEntries != DefaultMaxEntries || c.Name() != "test" {
		t.Errorf("invalid options were applied: %+v", c)
	}
}

func TestCacheConcurrentUse(t *testing.T) {
	c := NewCache("test", WithMaxEntries(50))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				key := fmt.Sprint((g*1000 + i) % 100)
				if !c.has(key) {
					c.add(key)
				}
			}
		})
	}
	wg.Wait()
	if c.Len() > 50 {
		t.Errorf("Len = %d, above the bound 50", c.Len())
	}
	if c.Hits()+c.Misses() != 8000 {
		t.Errorf("hits+misses = %d, want 8000", c.Hits()+c.Misses())
	}
}
