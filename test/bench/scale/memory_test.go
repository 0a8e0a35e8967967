package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With a path, the sampler writes a heap profile at the first peak, and
// again only once the heap has grown a tenth beyond it; without one it
// writes nothing.
func TestMemorySamplerWritesThePeakProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peak.heap.pprof")
	s := memorySampler{peakProfile: path}
	s.sample()
	if err := s.err(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("no peak profile written: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.profiled *= 2 // as if the heap had been twice as large
	s.sample()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a profile was written below the last peak: %v", err)
	}

	off := memorySampler{}
	off.sample()
	if off.err() != nil || off.profiled != 0 {
		t.Fatalf("a sampler without a path profiled: %v", off.err())
	}
}

// statusField reads a size of /proc/<pid>/status in bytes, and 0 for a
// field that is missing or not a size.
func TestStatusField(t *testing.T) {
	const status = "Name:\tbench-scale\nVmPeak:\t 2048000 kB\nVmHWM:\t  192512 kB\nVmRSS:\t  150000 kB\nThreads:\t12\n"
	for field, want := range map[string]uint64{
		"VmHWM":  192512 * 1024,
		"VmRSS":  150000 * 1024,
		"Name":   0,
		"VmSwap": 0,
	} {
		if got := statusField(strings.NewReader(status), field); got != want {
			t.Errorf("statusField(%s) = %d, want %d", field, got, want)
		}
	}
	if got := procStatus("VmHWM"); got == 0 {
		t.Errorf("procStatus(VmHWM) of this process = 0")
	}
}
