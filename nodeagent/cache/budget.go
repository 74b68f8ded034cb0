package cache

import (
	"fmt"
	"io"

	"k8s.io/klog/v2"
)

// reserveStep is the least a download of unknown length grows its reservation by, so that it takes
// the store's lock once per step rather than once per read.
const reserveStep = 8 << 20

// budgetWriter writes a download's partial file and holds it to its reservation against the disk
// budget. Invariant: written <= reserved after every Write. When the source reported the content
// length (known), the reservation is that length and a byte past it is an error; otherwise the
// reservation grows ahead of the bytes, evicting entries when allowed, and a growth the budget cannot
// give fails the download with ErrNoSpace.
type budgetWriter struct {
	s        *Store
	log      klog.Logger
	h        string
	w        io.Writer
	written  int64
	reserved int64
	known    bool
	mayEvict bool
}

// reserve sets the reservation to need bytes (evicting as allowed) and logs what was evicted.
func (b *budgetWriter) reserve(need int64) error { return b.reserveEvict(need, b.mayEvict) }

func (b *budgetWriter) reserveEvict(need int64, mayEvict bool) error {
	b.s.mu.Lock()
	evicted, err := b.s.reserveLocked(b.h, need, mayEvict)
	b.s.mu.Unlock()
	if err != nil {
		return err
	}
	for _, v := range evicted {
		b.log.Info("Evicted entry for space", "evicted", v.Hex, "size", v.Size)
	}
	b.reserved = need
	return nil
}

func (b *budgetWriter) Write(p []byte) (int, error) {
	if end := b.written + int64(len(p)); end > b.reserved {
		if b.known {
			return 0, fmt.Errorf("entry %s: the source sends more than the %d bytes it announced", b.h, b.reserved)
		}
		// Grow by a step (a quarter of what is reserved, at least reserveStep) from free space; when
		// that needs an eviction, by exactly what this write needs, so that nothing is evicted for
		// bytes that may never come.
		if err := b.reserveEvict(max(end, b.reserved+max(b.reserved/4, reserveStep)), false); err != nil {
			if err := b.reserve(end); err != nil {
				return 0, fmt.Errorf("entry %s of unknown length at %d bytes: %w", b.h, end, err)
			}
		}
	}
	n, err := b.w.Write(p)
	b.written += int64(n)
	return n, err
}
