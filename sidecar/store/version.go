package store

import (
	"sync/atomic"
	"time"
)

// versionClock issues session versions: a hybrid logical clock whose value
// is the wall clock in microseconds since the Unix epoch, raised to one above
// every version this process has issued or read. Versions therefore grow
// across anything that rewinds Redis (a restore from an older snapshot, a
// replica promoted with lost writes): a sidecar that lived through it
// remembers the versions it saw, and one started afterwards starts from its
// clock, past every version issued before. Microseconds keep versions below
// 2^53 (exact in JSON numbers of every client) until the year 2255.
type versionClock struct {
	last atomic.Int64
	// now is the wall clock (time.Now; replaced in tests).
	now func() time.Time
}

// next returns a version above every one issued or observed so far.
func (c *versionClock) next() int64 {
	for {
		last := c.last.Load()
		nv := max(c.now().UnixMicro(), last+1)
		if c.last.CompareAndSwap(last, nv) {
			return nv
		}
	}
}

// observe records that version v exists, so later versions exceed it.
func (c *versionClock) observe(v int64) {
	for {
		last := c.last.Load()
		if v <= last || c.last.CompareAndSwap(last, v) {
			return
		}
	}
}
