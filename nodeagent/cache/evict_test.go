package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// fakeClock advances one second per call so that every use has a distinct time.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func TestEvictionOrderUnderDiskBudget(t *testing.T) {
	tests := []struct {
		name     string
		budget   int64
		sizes    []int // entries e0..eN-1 added in order, each sizes[i] bytes
		touch    []int // entries used again afterwards, in order
		pins     []int
		add      int // size of the new entry
		noEvict  bool
		wantGone []int
		wantErr  error
	}{
		{name: "fits without eviction", budget: 400, sizes: []int{100, 100, 100}, add: 100},
		{name: "oldest goes first", budget: 300, sizes: []int{100, 100, 100}, add: 100, wantGone: []int{0}},
		{name: "touched entry is younger", budget: 300, sizes: []int{100, 100, 100}, touch: []int{0}, add: 100, wantGone: []int{1}},
		{name: "several to make room", budget: 300, sizes: []int{100, 100, 100}, touch: []int{1}, add: 250, wantGone: []int{0, 2, 1}},
		{name: "pinned entry is skipped", budget: 300, sizes: []int{100, 100, 100}, pins: []int{0}, add: 100, wantGone: []int{1}},
		{name: "only pinned left", budget: 300, sizes: []int{100, 100, 100}, pins: []int{0, 1, 2}, add: 100, wantErr: ErrNoSpace},
		{name: "bigger than budget", budget: 300, sizes: []int{100}, add: 400, wantErr: ErrNoSpace},
		{name: "no-evict request fits", budget: 400, sizes: []int{100, 100, 100}, add: 100, noEvict: true},
		{name: "no-evict request refused", budget: 300, sizes: []int{100, 100, 100}, add: 100, noEvict: true, wantErr: ErrNoSpace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			s, err := Open(t.TempDir(), Options{DiskBudget: tt.budget, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			var hexes []string
			for i, n := range tt.sizes {
				data, digest := content(n, uint64(1000+i))
				e, err := s.Ensure(context.Background(), Request{Digest: digest, Source: &bytesSource{data: data, failAfter: -1}})
				if err != nil {
					t.Fatalf("add e%d: %v", i, err)
				}
				hexes = append(hexes, e.Hex)
			}
			for _, i := range tt.touch {
				s.Lookup(hexes[i])
			}
			for _, i := range tt.pins {
				s.Pin(hexes[i], fmt.Sprintf("pod-%d", i))
			}
			var evicted []string
			s.opts.Observer = recorder{evicted: &evicted}
			data, digest := content(tt.add, 9)
			_, err = s.Ensure(context.Background(), Request{Digest: digest, Source: &bytesSource{data: data, failAfter: -1}, NoEvict: tt.noEvict})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Ensure new entry: err=%v, want %v", err, tt.wantErr)
			}
			var want []string
			for _, i := range tt.wantGone {
				want = append(want, hexes[i])
			}
			if tt.wantErr != nil {
				want = nil // a failed admission evicts nothing
			}
			if !slices.Equal(evicted, want) {
				t.Fatalf("evicted %v, want %v", short(evicted), short(want))
			}
			for _, i := range tt.pins {
				if _, ok := s.Lookup(hexes[i]); !ok {
					t.Fatalf("pinned entry e%d was evicted", i)
				}
			}
			if tt.wantErr == nil && s.UsedBytes() > tt.budget {
				t.Fatalf("used %d bytes over budget %d", s.UsedBytes(), tt.budget)
			}
		})
	}
}

func TestEvictNeverRemovesPinned(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s, _ := Open(t.TempDir(), Options{Now: clk.Now})
	var hexes []string
	for i := range 4 {
		data, digest := content(1000, uint64(i))
		e, err := s.Ensure(context.Background(), Request{Digest: digest, Source: &bytesSource{data: data, failAfter: -1}})
		if err != nil {
			t.Fatal(err)
		}
		hexes = append(hexes, e.Hex)
	}
	s.SetPins(map[string][]string{hexes[0]: {"pod-a"}, hexes[2]: {"pod-b", "pod-c"}})
	gone, err := s.Evict(0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range gone {
		got = append(got, e.Hex)
	}
	if want := []string{hexes[1], hexes[3]}; !slices.Equal(got, want) {
		t.Fatalf("Evict(0) removed %v, want %v", short(got), short(want))
	}
	if err := s.Remove(hexes[2]); !errors.Is(err, ErrPinned) {
		t.Fatalf("Remove pinned: %v, want ErrPinned", err)
	}
	s.Unpin(hexes[2], "pod-b")
	if err := s.Remove(hexes[2]); !errors.Is(err, ErrPinned) {
		t.Fatalf("Remove entry still pinned by pod-c: %v, want ErrPinned", err)
	}
	s.Unpin(hexes[2], "pod-c")
	if err := s.Remove(hexes[2]); err != nil {
		t.Fatalf("Remove unpinned: %v", err)
	}
	if n := len(s.Entries()); n != 1 {
		t.Fatalf("%d entries left, want 1 (the pinned one)", n)
	}
}

type recorder struct{ evicted *[]string }

func (recorder) Hit(string)                             {}
func (recorder) Fetched(string, int64)                  {}
func (recorder) Completed(string, int64, time.Duration) {}
func (r recorder) Evicted(h string, _ int64)            { *r.evicted = append(*r.evicted, h) }

func short(hs []string) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h[:8]
	}
	return out
}
