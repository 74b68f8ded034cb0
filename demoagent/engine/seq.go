package engine

import (
	"context"
	"slices"
	"time"

	"github.com/neuronetes/neuronetes/demoagent/kvcache"
)

type seqState int

const (
	stateWaiting seqState = iota
	statePrefill
	stateDecode
	stateEnded
)

// Seq is one request in the engine. Its methods are called from the request's own goroutine.
type Seq struct {
	e         *Engine
	prompt    []uint64
	chain     []uint64
	maxTokens int
	prefilled chan struct{} // closed when the prefill ends

	// Guarded by e.mu.
	state        seqState
	alloc        *kvcache.Alloc
	arrived      time.Time
	prefillStart time.Time
	prefillTime  time.Duration
	firstToken   time.Time
}

// Timing is when a sequence passed each phase.
type Timing struct {
	// Arrived is when Add queued it; Admitted when it entered the prefill lane (zero if never).
	Arrived, Admitted time.Time
	// PrefillEnd is when its prefill ended; FirstToken when its first token is due.
	PrefillEnd, FirstToken time.Time
	// PromptTokens is the prompt length; CachedTokens the part found in the prefix cache.
	PromptTokens, CachedTokens int
}

// Timing returns the sequence's phase times so far.
func (s *Seq) Timing() Timing {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	t := Timing{Arrived: s.arrived, PromptTokens: len(s.prompt)}
	if s.alloc != nil || s.state >= stateDecode {
		t.Admitted = s.prefillStart
	}
	if s.alloc != nil {
		t.CachedTokens = s.alloc.CachedTokens()
	}
	if !s.firstToken.IsZero() {
		t.PrefillEnd = s.prefillStart.Add(s.prefillTime)
		t.FirstToken = s.firstToken
	}
	return t
}

// TokenTime is when token i (0 is the first) is due.
func (s *Seq) TokenTime(i int) time.Time {
	s.e.mu.Lock()
	first := s.firstToken
	s.e.mu.Unlock()
	return first.Add(time.Duration(i) * s.e.interval)
}

// WaitToken blocks until token i (0 is the first) is due: the first after the sequence's wait for
// admission and its prefill, each next one a decode interval after the one before. When ctx ends
// first, the sequence is aborted and ctx's error returned.
func (s *Seq) WaitToken(ctx context.Context, i int) error {
	select {
	case <-s.prefilled:
	case <-ctx.Done():
		s.Abort()
		return ctx.Err()
	}
	d := s.TokenTime(i).Sub(s.e.clk.Now())
	if d <= 0 {
		return nil
	}
	t := s.e.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		s.Abort()
		return ctx.Err()
	}
}

// Finish ends a sequence that generated output (token ids): the full blocks of prompt plus output
// stay in the prefix cache, and the slot and remaining blocks are freed.
func (s *Seq) Finish(output []uint64) {
	s.end(output, true)
}

// Abort ends a sequence at once wherever it is (waiting, prefilling or decoding), freeing its slot
// and blocks; nothing it computed is kept. Ending an ended sequence does nothing.
func (s *Seq) Abort() { s.end(nil, false) }

func (s *Seq) end(output []uint64, keep bool) {
	e := s.e
	var chain []uint64
	if keep {
		chain = e.chainOf(append(slices.Clip(s.prompt), output...)) // hashed before taking the lock
	}
	e.mu.Lock()
	switch s.state {
	case stateEnded:
		e.mu.Unlock()
		return
	case stateWaiting:
		if i := slices.Index(e.waiting, s); i >= 0 {
			e.waiting = slices.Delete(e.waiting, i, i+1)
			e.waitingTokens -= len(s.prompt)
		}
	case statePrefill, stateDecode:
		if e.prefilling == s {
			e.prefilling = nil
		}
		if keep && s.state == stateDecode {
			e.pool.Commit(s.alloc, chain)
		}
		e.pool.Free(s.alloc)
		e.running--
	}
	s.state = stateEnded
	e.mu.Unlock()
	e.wake()
}

func (e *Engine) chainOf(tokens []uint64) []uint64 {
	return kvcache.BlockHashes(tokens, e.cfg.BlockSize)
}
