package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// heldSource blocks every Open until release is closed, and signals opened first.
type heldSource struct {
	data    []byte
	opened  chan struct{}
	release chan struct{}
}

func (h *heldSource) Open(ctx context.Context, _ int64) (io.ReadCloser, int64, int64, error) {
	h.opened <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, 0, 0, ctx.Err()
	}
	return io.NopCloser(bytes.NewReader(h.data)), 0, int64(len(h.data)), nil
}
func (h *heldSource) String() string { return "held" }

func newHeld(seed uint64) (*heldSource, string) {
	data, digest := content(4096, seed)
	return &heldSource{data: data, opened: make(chan struct{}, 4), release: make(chan struct{})}, digest
}

func waitOpened(t *testing.T, h *heldSource, want bool, what string) {
	t.Helper()
	select {
	case <-h.opened:
		if !want {
			t.Fatalf("%s: the fetch started; it should wait for a slot", what)
		}
	case <-time.After(300 * time.Millisecond):
		if want {
			t.Fatalf("%s: the fetch did not start", what)
		}
	}
}

// TestPinnedFetchSkipsPrewarmQueue: with every shared slot held by prewarm, a fetch of a pinned digest
// (a pod bound to the node) starts at once, a queued prewarm moves to the urgent slots when a pod pins
// its digest, and one fetch runs per digest.
func TestPinnedFetchSkipsPrewarmQueue(t *testing.T) {
	s, err := Open(t.TempDir(), Options{MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ensure := func(digest string, src Source, urgent bool) chan error {
		ch := make(chan error, 1)
		go func() { _, err := s.Ensure(ctx, Request{Digest: digest, Source: src, Urgent: urgent}); ch <- err }()
		return ch
	}
	busy, busyDigest := newHeld(1)
	busyDone := ensure(busyDigest, busy, false)
	waitOpened(t, busy, true, "first prewarm")

	queued, queuedDigest := newHeld(2)
	queuedDone := ensure(queuedDigest, queued, false)
	waitOpened(t, queued, false, "second prewarm with the only shared slot taken")
	if !s.Queued(queuedDigest[len(DigestPrefix):]) {
		t.Fatal("second prewarm not queued for a shared slot")
	}

	bound, boundDigest := newHeld(3)
	s.Pin(boundDigest[len(DigestPrefix):], "ns/pod-a")
	boundDone := ensure(boundDigest, bound, false)
	waitOpened(t, bound, true, "fetch of a pinned digest")
	close(bound.release)
	if err := <-boundDone; err != nil {
		t.Fatalf("pinned fetch: %v", err)
	}

	// A second Ensure of the queued digest shares its fetch; pinning the digest promotes it.
	again := ensure(queuedDigest, queued, true)
	s.SetPins(map[string][]string{queuedDigest[len(DigestPrefix):]: {"ns/pod-b"}})
	waitOpened(t, queued, true, "queued prewarm after a pod pinned its digest")
	waitOpened(t, queued, false, "a second fetch of the same digest")
	close(queued.release)
	for _, ch := range []chan error{queuedDone, again} {
		if err := <-ch; err != nil {
			t.Fatalf("promoted fetch: %v", err)
		}
	}
	if !busyStillRunning(busyDone) {
		t.Fatal("the first prewarm ended early")
	}
	close(busy.release)
	if err := <-busyDone; err != nil {
		t.Fatal(err)
	}
	if n := len(s.Entries()); n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
}

func busyStillRunning(ch chan error) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// TestPinnedPrewarmMayEvict: a prewarm (NoEvict) whose digest a pod pinned evicts an unpinned entry
// to fit, where an unpinned one fails with ErrNoSpace.
func TestPinnedPrewarmMayEvict(t *testing.T) {
	s, err := Open(t.TempDir(), Options{DiskBudget: 6000})
	if err != nil {
		t.Fatal(err)
	}
	old, oldDigest := content(4000, 10)
	if _, err := s.Ensure(context.Background(), Request{Digest: oldDigest, Source: &bytesSource{data: old, failAfter: -1}}); err != nil {
		t.Fatal(err)
	}
	data, digest := content(4000, 11)
	_, err = s.Ensure(context.Background(), Request{Digest: digest, Source: &bytesSource{data: data, failAfter: -1}, NoEvict: true})
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("unpinned prewarm: %v, want ErrNoSpace", err)
	}
	s.Pin(digest[len(DigestPrefix):], "ns/pod")
	if _, err := s.Ensure(context.Background(), Request{Digest: digest, Source: &bytesSource{data: data, failAfter: -1}, NoEvict: true}); err != nil {
		t.Fatalf("pinned prewarm: %v", err)
	}
	if _, ok := s.Lookup(oldDigest[len(DigestPrefix):]); ok {
		t.Fatal("the unpinned entry was not evicted")
	}
}
