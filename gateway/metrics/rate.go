package metrics

import (
	"sync"
	"time"
)

// rateSlots is the window of neuronetes_tokens_per_second in seconds.
const rateSlots = 10

type labels3 struct{ a, b, c string }

// rateWindow counts events per label set in one-second slots over the last rateSlots seconds.
type rateWindow struct {
	mu    sync.Mutex
	slots map[labels3]*[rateSlots]int
	sec   map[labels3]int64 // the unix second of the newest slot written
	now   func() time.Time
}

func newRateWindow() *rateWindow {
	return &rateWindow{slots: map[labels3]*[rateSlots]int{}, sec: map[labels3]int64{}, now: time.Now}
}

func (r *rateWindow) add(l labels3, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.now().Unix()
	r.advance(l, s)
	r.slots[l][s%rateSlots] += n
}

// advance clears the slots between the label set's last second and s; r.mu is held.
func (r *rateWindow) advance(l labels3, s int64) {
	w := r.slots[l]
	if w == nil {
		w = &[rateSlots]int{}
		r.slots[l] = w
		r.sec[l] = s
		return
	}
	last := r.sec[l]
	if s <= last {
		return
	}
	for t := last + 1; t <= s && t <= last+rateSlots; t++ {
		w[t%rateSlots] = 0
	}
	r.sec[l] = s
}

// rates returns events per second over the full seconds of the window.
func (r *rateWindow) rates() map[labels3]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.now().Unix()
	out := make(map[labels3]float64, len(r.slots))
	for l, w := range r.slots {
		r.advance(l, s)
		sum := 0
		for i := int64(1); i < rateSlots; i++ { // the current, partial second is left out
			sum += w[(s-i+rateSlots*2)%rateSlots]
		}
		out[l] = float64(sum) / float64(rateSlots-1)
	}
	return out
}
