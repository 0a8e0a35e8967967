package container

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestTailBuffer writes chunks of many sizes and compares with the last
// Limit bytes of everything written.
func TestTailBuffer(t *testing.T) {
	testCases := []struct {
		name   string
		limit  int
		chunks []int
	}{
		{name: "nothing", limit: 10},
		{name: "under the limit", limit: 10, chunks: []int{3, 4}},
		{name: "exactly the limit", limit: 10, chunks: []int{10}},
		{name: "exactly the limit in pieces", limit: 10, chunks: []int{5, 5}},
		{name: "one byte over", limit: 10, chunks: []int{11}},
		{name: "a chunk larger than the limit after others", limit: 10, chunks: []int{3, 25}},
		{name: "many small chunks", limit: 10, chunks: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 1, 1}},
		{name: "chunks just under the limit", limit: 10, chunks: []int{9, 9, 9, 9, 9}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		var chunks []int
		for range rng.IntN(40) {
			chunks = append(chunks, rng.IntN(300))
		}
		testCases = append(testCases, struct {
			name   string
			limit  int
			chunks []int
		}{name: "random", limit: 1 + rng.IntN(100), chunks: chunks})
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			b := &TailBuffer{Limit: tc.limit}
			var all []byte
			for i, n := range tc.chunks {
				p := bytes.Repeat([]byte{byte('a' + i%26)}, n)
				for j := range p {
					p[j] += byte(j % 2)
				}
				if w, err := b.Write(p); w != n || err != nil {
					t.Fatalf("Write = %d, %v", w, err)
				}
				all = append(all, p...)
				// Bounded by the limit, not by what was written: append
				// may round a capacity up, never past a few times the limit.
				if cap(b.buf) > 8*tc.limit+64 {
					t.Fatalf("holds %d bytes for a limit of %d", cap(b.buf), tc.limit)
				}
			}
			want := all[max(0, len(all)-tc.limit):]
			if !bytes.Equal(b.Bytes(), want) {
				t.Fatalf("Bytes = %q, want %q", b.Bytes(), want)
			}
			if b.Truncated() != (len(all) > tc.limit) {
				t.Fatalf("Truncated = %v after %d bytes with a limit of %d", b.Truncated(), len(all), tc.limit)
			}
		})
	}
}

func TestBoundOutput(t *testing.T) {
	res := BoundOutput(ExecResult{Stdout: []byte("0123456789"), Stderr: []byte("ab")}, 4)
	if string(res.Stdout) != "6789" || string(res.Stderr) != "ab" || !res.Truncated {
		t.Fatalf("got %+v", res)
	}
	if res := BoundOutput(ExecResult{Stdout: []byte("0123")}, 4); res.Truncated {
		t.Fatalf("an output at the bound was marked truncated")
	}
}
