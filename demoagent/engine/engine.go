// Package engine is the demo agent's model of an LLM inference engine with continuous batching,
// close enough to vLLM's scheduler that routing decisions have the consequences they have on a real
// GPU:
//
//   - A sequence is admitted, first come first served, when a batch slot is free and the KV cache
//     can hold its prompt plus the most it may generate (blocks are reserved at admission, so a
//     running sequence is never preempted). Until then it waits.
//   - Admission starts its prefill. Prefill is one lane per engine, as on a GPU where prefills
//     share the compute: it takes PrefillRate-proportional time for the prompt tokens not found in
//     the prefix cache, one sequence after another.
//   - Its first token comes FirstTokenOverhead after its prefill; then every sequence decodes at
//     DecodeRate tokens per second, independently of the batch (decode is memory-bound).
//   - A finished sequence's prompt and output stay cached (kvcache.Pool); an aborted one frees its
//     slot and blocks at once.
//
// Every time comes from an injected clock, so the timing is testable without sleeping.
package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/neuronetes/neuronetes/demoagent/kvcache"
)

// Config shapes the modelled engine.
type Config struct {
	// Slots is the number of sequences in the batch at once (vLLM's max_num_seqs).
	Slots int
	// BlockSize is the number of tokens per KV block; Blocks the KV cache capacity in blocks.
	BlockSize, Blocks int
	// PrefixCaching keeps computed blocks for reuse by later prompts sharing a prefix.
	PrefixCaching bool
	// PrefillRate is the prompt tokens per second the prefill lane computes.
	PrefillRate float64
	// DecodeRate is the generated tokens per second of each sequence.
	DecodeRate float64
	// FirstTokenOverhead is added between the end of prefill and the first token.
	FirstTokenOverhead time.Duration
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Slots < 1:
		return fmt.Errorf("slots must be at least 1, got %d", c.Slots)
	case c.BlockSize < 1:
		return fmt.Errorf("block size must be at least 1 token, got %d", c.BlockSize)
	case c.Blocks < 1:
		return fmt.Errorf("KV cache must hold at least 1 block, got %d", c.Blocks)
	case !(c.PrefillRate > 0):
		return fmt.Errorf("prefill rate must be positive, got %v tokens/s", c.PrefillRate)
	case !(c.DecodeRate > 0):
		return fmt.Errorf("decode rate must be positive, got %v tokens/s", c.DecodeRate)
	case c.FirstTokenOverhead < 0:
		return fmt.Errorf("first-token overhead must not be negative, got %s", c.FirstTokenOverhead)
	}
	return nil
}

// ErrTooLong is returned by Add for a request whose prompt plus max tokens exceeds the whole KV
// cache: it could never be admitted.
var ErrTooLong = errors.New("prompt plus max tokens exceed the KV cache capacity")

// Engine schedules sequences. Run must be running for sequences to make progress.
type Engine struct {
	cfg      Config
	clk      clock.Clock
	interval time.Duration // between tokens of one sequence

	kick chan struct{}

	mu            sync.Mutex
	pool          *kvcache.Pool
	waiting       []*Seq
	waitingTokens int
	prefilling    *Seq // the sequence in the prefill lane
	running       int  // admitted and not ended: prefilling plus decoding
}

// New returns an engine; clk is clock.RealClock{} outside tests.
func New(cfg Config, clk clock.Clock) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, err := kvcache.New(cfg.Blocks, cfg.BlockSize, cfg.PrefixCaching)
	if err != nil {
		return nil, err
	}
	return &Engine{
		cfg: cfg, clk: clk, pool: pool, kick: make(chan struct{}, 1),
		interval: time.Duration(float64(time.Second) / cfg.DecodeRate),
	}, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// MaxTokens is the most tokens (prompt plus output) one sequence can ever hold.
func (e *Engine) MaxTokens() int { return e.cfg.Blocks * e.cfg.BlockSize }

func (e *Engine) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Add queues a sequence for prompt (token ids) that may generate up to maxTokens tokens. It fails
// with ErrTooLong when the sequence could never fit in the KV cache.
func (e *Engine) Add(prompt []uint64, maxTokens int) (*Seq, error) {
	if maxTokens < 1 {
		return nil, fmt.Errorf("max tokens must be at least 1, got %d", maxTokens)
	}
	if !e.pool.CanEverFit(len(prompt) + maxTokens) {
		return nil, fmt.Errorf("%w: %d prompt + %d max tokens > %d", ErrTooLong, len(prompt), maxTokens, e.MaxTokens())
	}
	s := &Seq{
		e: e, prompt: prompt, chain: kvcache.BlockHashes(prompt, e.cfg.BlockSize), maxTokens: maxTokens,
		prefilled: make(chan struct{}), arrived: e.clk.Now(),
	}
	e.mu.Lock()
	e.waiting = append(e.waiting, s)
	e.waitingTokens += len(prompt)
	e.mu.Unlock()
	e.wake()
	return s, nil
}

// Run drives the prefill lane until ctx ends.
func (e *Engine) Run(ctx context.Context) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		wait, busy := e.step(e.clk.Now())
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		var fired <-chan time.Time
		if busy {
			timer = e.clk.NewTimer(wait)
			fired = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		case <-fired:
		}
	}
}

// step advances the prefill lane to now: it completes the prefill that has ended and admits the
// next sequences. It returns how long until the current prefill ends, and whether one runs.
// A prefill that ended before now hands the lane over at its planned end, so a late wake-up of
// this goroutine does not slow the modelled GPU.
func (e *Engine) step(now time.Time) (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	laneFree := now
	for {
		if s := e.prefilling; s != nil {
			end := s.prefillStart.Add(s.prefillTime)
			if end.After(now) {
				return end.Sub(now), true
			}
			e.endPrefill(s, end)
			laneFree = end
		}
		s := e.admit()
		if s == nil {
			return 0, false
		}
		s.prefillStart = laterOf(laneFree, s.arrived)
	}
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// admit moves the head of the waiting queue into the prefill lane when a slot and KV blocks are
// free. The caller holds mu and has checked that the lane is free.
func (e *Engine) admit() *Seq {
	if len(e.waiting) == 0 || e.running >= e.cfg.Slots {
		return nil
	}
	s := e.waiting[0]
	alloc, ok := e.pool.Allocate(s.chain, len(s.prompt), len(s.prompt)+s.maxTokens)
	if !ok {
		return nil
	}
	e.waiting[0] = nil
	e.waiting = e.waiting[1:]
	e.waitingTokens -= len(s.prompt)
	e.running++
	s.alloc = alloc
	s.state = statePrefill
	uncached := len(s.prompt) - alloc.CachedTokens()
	s.prefillTime = time.Duration(float64(uncached) / e.cfg.PrefillRate * float64(time.Second))
	e.prefilling = s
	return s
}

// endPrefill caches the prompt's blocks and schedules the sequence's first token. Caller holds mu.
func (e *Engine) endPrefill(s *Seq, end time.Time) {
	e.prefilling = nil
	e.pool.Commit(s.alloc, s.chain)
	s.state = stateDecode
	s.firstToken = end.Add(e.cfg.FirstTokenOverhead)
	close(s.prefilled)
}

// Stats is a snapshot of the engine's queues and cache.
type Stats struct {
	// Running counts admitted sequences (prefilling or decoding); Waiting those not admitted yet.
	Running, Waiting int
	// WaitingTokens is the prompt tokens of the waiting sequences.
	WaitingTokens int
	// Cache is the KV cache snapshot.
	Cache kvcache.Stats
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Running: e.running, Waiting: len(e.waiting), WaitingTokens: e.waitingTokens, Cache: e.pool.Stats()}
}

// SetCacheObserver makes o receive the KV cache's events (kvcache.Observer) from now on.
func (e *Engine) SetCacheObserver(o kvcache.Observer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pool.SetObserver(o)
}

// ResetPrefixCache drops every cached block (vLLM's reset_prefix_cache); false while a sequence
// holds cached blocks.
func (e *Engine) ResetPrefixCache() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pool.Reset()
}
