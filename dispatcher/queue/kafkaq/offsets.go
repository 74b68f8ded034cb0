package kafkaq

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tracker follows the records of the assigned partitions from fetch to ack, so that the
// committed offset of a partition never passes a record still being worked on: records are
// acknowledged out of order, the commit advances to the end of the acknowledged prefix.
type tracker struct {
	mu    sync.Mutex
	parts map[tp]*partition
	cond  *sync.Cond
}

type tp struct {
	topic string
	part  int32
}

type partition struct {
	order []*kgo.Record  // fetched, in offset order, not yet behind the commit point
	done  map[int64]bool // acknowledged offsets among order
	ready *kgo.Record    // last record of the acknowledged prefix, not committed yet
}

func newTracker() *tracker {
	t := &tracker{parts: map[tp]*partition{}}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// add records a fetched record.
func (t *tracker) add(r *kgo.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tp{r.Topic, r.Partition}
	p := t.parts[k]
	if p == nil {
		p = &partition{done: map[int64]bool{}}
		t.parts[k] = p
	}
	p.order = append(p.order, r)
}

// ack marks r acknowledged; it reports false when r's partition was revoked meanwhile.
func (t *tracker) ack(r *kgo.Record) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[tp{r.Topic, r.Partition}]
	if p == nil {
		return false
	}
	p.done[r.Offset] = true
	for len(p.order) > 0 && p.done[p.order[0].Offset] {
		delete(p.done, p.order[0].Offset)
		p.ready = p.order[0]
		p.order = p.order[1:]
	}
	t.cond.Broadcast()
	return true
}

// commitable returns the records to commit (one per partition) and clears them.
func (t *tracker) commitable() []*kgo.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*kgo.Record
	for _, p := range t.parts {
		if p.ready != nil {
			out = append(out, p.ready)
			p.ready = nil
		}
	}
	return out
}

// inFlight is the number of fetched, unacknowledged records of the given partitions.
func (t *tracker) inFlight(parts map[string][]int32) int {
	n := 0
	for topic, ps := range parts {
		for _, p := range ps {
			if x := t.parts[tp{topic, p}]; x != nil {
				n += len(x.order)
			}
		}
	}
	return n
}

// drop forgets the partitions (revoked or lost); later acks of their records are ignored.
func (t *tracker) drop(parts map[string][]int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			delete(t.parts, tp{topic, p})
		}
	}
	t.cond.Broadcast()
}
