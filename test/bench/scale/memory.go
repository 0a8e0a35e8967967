package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// memorySampler keeps the process's peak heap and resident set. The Go
// heap is sampled (runtime.ReadMemStats); the kernel keeps the resident
// peak itself (VmHWM), so that one is exact.
type memorySampler struct {
	mu           sync.Mutex
	peakHeap     uint64 // HeapAlloc: live and not yet collected objects
	peakHeapInUs uint64 // HeapInuse: spans holding them
	peakSys      uint64 // memory obtained from the OS by the Go runtime

	// peakProfile, when set, is where a heap profile is written each time
	// the heap reaches a peak a tenth above the last one profiled. A heap
	// profile shows the heap as the last collection left it: at the peak,
	// the live objects that set the collector's goal for the heap, and so
	// the peak (the profile at the end shows what is still held then).
	peakProfile string
	profiled    uint64
	profileErr  error
}

func (s *memorySampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *memorySampler) sample() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peakHeap = max(s.peakHeap, m.HeapAlloc)
	s.peakHeapInUs = max(s.peakHeapInUs, m.HeapInuse)
	s.peakSys = max(s.peakSys, m.Sys)
	if s.peakProfile != "" && s.profileErr == nil && m.HeapAlloc > s.profiled+s.profiled/10 {
		s.profiled = m.HeapAlloc
		s.profileErr = writeProfile(s.peakProfile)
	}
}

// peak is the peak HeapAlloc sampled so far.
func (s *memorySampler) peak() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakHeap
}

func (s *memorySampler) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.profileErr
}

// writeProfile writes the heap profile as it stands (the heap of the last
// collection) to path.
func writeProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("failed to create the heap profile %s: %w", path, err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to write the heap profile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("failed to write the heap profile %s: %w", path, err)
	}
	return nil
}

// procStatus returns a field of /proc/self/status in bytes (VmHWM, VmRSS),
// 0 where it cannot be read (not Linux).
func procStatus(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	return statusField(f, field)
}

// statusField returns a field of a /proc/<pid>/status file ("VmHWM:
// 123 kB") in bytes, 0 when it is missing or not a size.
func statusField(r io.Reader, field string) uint64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb * 1024
	}
	return 0
}

const mib = 1 << 20

func toMiB(b uint64) float64 { return float64(b*10/mib) / 10 }
