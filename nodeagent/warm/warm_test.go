package warm

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/neuronetes/neuronetes/internal/testreq"
)

// coldFile writes size random bytes, syncs them and drops them from the page cache. It skips the test
// if the file system keeps the pages anyway (tmpfs).
func coldFile(t *testing.T, dir string, name string, size int) string {
	t.Helper()
	p := filepath.Join(dir, name)
	b := make([]byte, size)
	rand.Read(b)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := Drop(p); err != nil {
		t.Fatal(err)
	}
	r, _, err := Resident(p)
	if err != nil {
		t.Fatal(err)
	}
	if r > int64(size)/4 {
		testreq.Tool(t, "a file system that drops clean pages", "dropped pages stay resident (%d of %d bytes): cannot test warming here", r, size)
	}
	return p
}

func TestWarmMakesFileResident(t *testing.T) {
	const size = 24<<20 + 12345 // not page aligned
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"populate-4", Options{Method: MethodPopulate, Parallel: 4, ChunkBytes: 1 << 20}},
		{"populate-1", Options{Method: MethodPopulate, Parallel: 1}},
		{"pread-4", Options{Method: MethodPread, Parallel: 4, ChunkBytes: 3 << 20}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := coldFile(t, dir, tt.name, size)
			res, err := Warm(context.Background(), p, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Bytes != size {
				t.Fatalf("Bytes %d, want %d", res.Bytes, size)
			}
			r, total, err := Resident(p)
			if err != nil {
				t.Fatal(err)
			}
			if total != size || r != size {
				t.Fatalf("resident %d of %d after Warm, want all %d", r, total, size)
			}
		})
	}
}

func TestLockerBudget(t *testing.T) {
	dir := t.TempDir()
	a := coldFile(t, dir, "a", 1<<20)
	b := coldFile(t, dir, "b", 1<<20)
	l := &Locker{Budget: 1<<20 + 4096}
	if err := l.Lock(a); err != nil {
		testreq.Tool(t, "mlock", "not permitted here: %v", err)
	}
	if r, _, _ := Resident(a); r != 1<<20 {
		t.Fatalf("locked file resident %d, want %d", r, 1<<20)
	}
	if err := l.Lock(b); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("second Lock: %v, want ErrOverBudget", err)
	}
	if err := l.Unlock(a); err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(b); err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	if got := l.Locked(); got != 1<<20 {
		t.Fatalf("Locked %d, want %d", got, 1<<20)
	}
	l.Unlock(b)
}

func TestEnforceMemoryBudget(t *testing.T) {
	const size = 4 << 20
	tests := []struct {
		name        string
		pinned      []int
		budget      int64
		wantDropped []int
	}{
		{"under budget", nil, 3 * size, nil},
		{"drop oldest", nil, 2 * size, []int{0}},
		{"drop two oldest", nil, size, []int{0, 1}},
		{"pinned kept", []int{0}, size, []int{1, 2}},
		{"all pinned", []int{0, 1, 2}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var lru []Candidate
			for i := range 3 {
				p := coldFile(t, dir, string(rune('a'+i)), size)
				if _, err := Warm(context.Background(), p, Options{}); err != nil {
					t.Fatal(err)
				}
				lru = append(lru, Candidate{Path: p, Pinned: slices.Contains(tt.pinned, i)})
			}
			dropped, resident, err := EnforceMemoryBudget(lru, tt.budget, nil)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, i := range tt.wantDropped {
				want = append(want, lru[i].Path)
			}
			if !slices.Equal(dropped, want) {
				t.Fatalf("dropped %v, want %v", dropped, want)
			}
			for i, c := range lru {
				r, _, _ := Resident(c.Path)
				if c.Pinned && r != size {
					t.Fatalf("pinned file %d lost residency: %d of %d", i, r, size)
				}
			}
			if len(tt.pinned) < 3 && resident > tt.budget {
				t.Fatalf("resident %d over budget %d", resident, tt.budget)
			}
		})
	}
}
