package main

import (
	"encoding/json"
	"sync"

	"github.com/neuronetes/neuronetes/demoagent/kvcache"
	"github.com/neuronetes/neuronetes/demoagent/tokenize"
)

// refConfig is what the reference router knows of the backends.
type refConfig struct{ kvTokens, blockSize int }

// reference is the bench's own cache- and load-aware router, run to show what such routing
// achieves on this harness. It sends each request to the backend with the least estimated time to
// first token: the prefill tokens it has sent there that have not produced a first byte yet, plus
// this request's prompt tokens not in that backend's prefix cache. It knows each cache by feeding
// a copy of the demo agent's cache (same tokenizer, blocks and LRU) the requests it sends to that
// backend, so its view is as good as a router's can be without asking the pods.
type reference struct {
	mu        sync.Mutex
	mirrors   []*kvcache.Pool
	queued    []int // prefill tokens booked per backend
	blockSize int
	next      int // rotates ties
}

func newReference(n int, c refConfig) (*reference, error) {
	r := &reference{queued: make([]int, n), blockSize: c.blockSize}
	for i := 0; i < n; i++ {
		p, err := kvcache.New(c.kvTokens/c.blockSize, c.blockSize, true)
		if err != nil {
			return nil, err
		}
		r.mirrors = append(r.mirrors, p)
	}
	return r, nil
}

// refRequest is the part of a chat request the reference reads.
type refRequest struct {
	MaxTokens int `json:"max_tokens"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func (r *reference) pick(body []byte) *ticket {
	var req refRequest
	_ = json.Unmarshal(body, &req) // a body it cannot read is routed as an empty prompt
	msgs := make([]tokenize.Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = tokenize.Message{Role: m.Role, Text: m.Content}
	}
	prompt := tokenize.Chat(msgs)
	chain := kvcache.BlockHashes(prompt, r.blockSize)
	full := kvcache.BlockHashes(append(prompt, tokenize.OutputIDs(max(req.MaxTokens, 0))...), r.blockSize)

	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.mirrors)
	best, bestCost, bestWork := -1, 0, 0
	for k := 0; k < n; k++ {
		i := (r.next + k) % n
		work := len(prompt) - r.mirrors[i].CachedTokens(chain, len(prompt))
		if cost := r.queued[i] + work; best < 0 || cost < bestCost {
			best, bestCost, bestWork = i, cost, work
		}
	}
	r.next = (best + 1) % n
	if a, ok := r.mirrors[best].Allocate(chain, len(prompt), len(prompt)+max(req.MaxTokens, 0)); ok {
		r.mirrors[best].Commit(a, chain)
		r.mirrors[best].Commit(a, full)
		r.mirrors[best].Free(a)
	}
	r.queued[best] += bestWork
	return &ticket{backend: best, prefill: bestWork}
}

// started releases the request's booked prefill: its first byte arrived.
func (r *reference) started(t *ticket) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !t.settled {
		r.queued[t.backend] -= t.prefill
		t.settled = true
	}
}

func (r *reference) done(t *ticket) { r.started(t) }
