package vector

import "container/heap"

// cand is a scored candidate; lower score is closer.
type cand struct {
	score float32
	list  int32
	pos   int32
}

// topK keeps the k lowest-scoring candidates in a max-heap.
type topK struct {
	k int
	h candHeap
}

type candHeap []cand

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[i].score > h[j].score }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(cand)) }
func (h *candHeap) Pop() any          { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

func newTopK(k int) *topK { return &topK{k: k, h: make(candHeap, 0, k+1)} }

// worst returns the admission threshold (the k-th best score so far).
func (t *topK) full() bool { return len(t.h) >= t.k }

func (t *topK) offer(c cand) {
	if len(t.h) < t.k {
		heap.Push(&t.h, c)
		return
	}
	if c.score < t.h[0].score {
		t.h[0] = c
		heap.Fix(&t.h, 0)
	}
}

// sorted returns the candidates best first.
func (t *topK) sorted() []cand {
	out := make([]cand, len(t.h))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&t.h).(cand)
	}
	return out
}
