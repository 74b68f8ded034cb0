package kvcache

import (
	"fmt"
	"reflect"
	"testing"
)

// recorder notes events as strings.
type recorder struct{ got []string }

func (r *recorder) Stored(h []uint64, parent uint64, hasParent bool) {
	r.got = append(r.got, fmt.Sprintf("stored %v parent %v %v", h, parent, hasParent))
}
func (r *recorder) Removed(h []uint64) { r.got = append(r.got, fmt.Sprintf("removed %v", h)) }
func (r *recorder) Cleared()           { r.got = append(r.got, "cleared") }

// TestObserverEvents checks that the pool reports exactly the blocks that gain and lose their
// cache identity, with the parent of each stored run.
func TestObserverEvents(t *testing.T) {
	type step struct {
		name string
		do   func(p *Pool) bool
		want []string
	}
	var held *Alloc
	steps := []step{
		{"a fresh chain is stored from the root", func(p *Pool) bool {
			a, ok := p.Allocate([]uint64{1, 2, 3}, 48, 48)
			p.Commit(a, []uint64{1, 2, 3})
			p.Free(a)
			return ok
		}, []string{"stored [1 2 3] parent 0 false"}},
		{"a shared prefix is not stored again; the new tail names its parent", func(p *Pool) bool {
			a, ok := p.Allocate([]uint64{1, 2, 9}, 48, 48)
			p.Commit(a, []uint64{1, 2, 9})
			held = a
			return ok
		}, []string{"stored [9] parent 2 true"}},
		{"reset refuses while a sequence holds blocks", func(p *Pool) bool { return !p.Reset() }, nil},
		{"eviction is reported block by block, tail first", func(p *Pool) bool {
			p.Free(held)
			a, ok := p.Allocate([]uint64{20, 21}, 32, 32)
			p.Free(a)
			return ok
		}, []string{"removed [3]", "removed [9]"}},
		{"reset clears", func(p *Pool) bool { return p.Reset() }, []string{"cleared"}},
	}
	p := mustPool(t, 4, 16, true)
	r := &recorder{}
	p.SetObserver(r)
	for _, s := range steps {
		r.got = nil
		if !s.do(p) {
			t.Fatalf("%s: the step failed", s.name)
		}
		if !reflect.DeepEqual(r.got, s.want) {
			t.Errorf("%s: events %q, want %q", s.name, r.got, s.want)
		}
	}
	if st := p.Stats(); st.CachedBlocks != 0 {
		t.Errorf("after reset %d blocks cached, want 0", st.CachedBlocks)
	}
}
