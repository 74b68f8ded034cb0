package main

import (
	"context"
	"sync"
	"time"
)

// engineConfig shapes the simulated model.
type engineConfig struct {
	tokenRate       float64       // generated tokens per second per request
	ttftBase        time.Duration // TTFT with an empty queue and no context
	ttftPerQueued   time.Duration // added per request waiting ahead
	ttftPer1kTokens time.Duration // added per 1000 context tokens
	maxRunning      int           // requests generating at once; the rest queue
}

// engine is a mock inference engine: a bounded number of running slots, a FIFO queue, and a TTFT
// model that grows with queue length and context length.
type engine struct {
	cfg engineConfig
	m   *agentMetrics
	sem chan struct{}

	mu           sync.Mutex
	waiting      int
	queuedTokens int
	sessions     map[string]time.Time
	// buckets count generated tokens per unix second, in a ring of rateWindow seconds.
	buckets [rateWindow]struct {
		sec    int64
		tokens int
	}
}

// rateWindow is the number of seconds neuronetes_tokens_per_second averages over.
const rateWindow = 5

func newEngine(cfg engineConfig, m *agentMetrics) *engine {
	if cfg.maxRunning < 1 {
		cfg.maxRunning = 1
	}
	if cfg.tokenRate <= 0 {
		cfg.tokenRate = 50
	}
	e := &engine{cfg: cfg, m: m, sem: make(chan struct{}, cfg.maxRunning), sessions: map[string]time.Time{}}
	m.registerRate(m.model, m.class, e.tokensPerSecond)
	return e
}

// ttftFor returns the modelled TTFT for a request with queued requests ahead and context tokens.
func (e *engine) ttftFor(queuedAhead, contextTokens int) time.Duration {
	return e.cfg.ttftBase + time.Duration(queuedAhead)*e.cfg.ttftPerQueued +
		time.Duration(float64(e.cfg.ttftPer1kTokens)*float64(contextTokens)/1000)
}

// acquire waits for a running slot and returns how many requests were waiting ahead.
func (e *engine) acquire(ctx context.Context, promptTokens int) (int, error) {
	e.mu.Lock()
	ahead := e.waiting
	e.waiting++
	e.queuedTokens += promptTokens
	e.m.waiting.Set(float64(e.waiting))
	e.m.tokensInQueue.Set(float64(e.queuedTokens))
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.waiting--
		e.queuedTokens -= promptTokens
		e.m.waiting.Set(float64(e.waiting))
		e.m.tokensInQueue.Set(float64(e.queuedTokens))
		e.mu.Unlock()
	}()
	select {
	case e.sem <- struct{}{}:
		e.m.running.Inc()
		return ahead, nil
	case <-ctx.Done():
		return ahead, ctx.Err()
	}
}

func (e *engine) release() {
	<-e.sem
	e.m.running.Dec()
}

// touchSession records activity of a conversation and refreshes the concurrent-sessions gauge
// (conversations active in the last 5 minutes).
func (e *engine) touchSession(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if id != "" {
		e.sessions[id] = now
	}
	for k, t := range e.sessions {
		if now.Sub(t) > 5*time.Minute {
			delete(e.sessions, k)
		}
	}
	e.m.concurrentSessions.Set(float64(len(e.sessions)))
}

// countTokens adds generated tokens to the current second's bucket.
func (e *engine) countTokens(n int) { e.countTokensAt(time.Now().Unix(), n) }

func (e *engine) countTokensAt(now int64, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := &e.buckets[now%rateWindow]
	if b.sec != now {
		b.sec, b.tokens = now, 0
	}
	b.tokens += n
}

// tokensPerSecond is the generation rate over the last rateWindow whole seconds.
func (e *engine) tokensPerSecond() float64 { return e.tokensPerSecondAt(time.Now().Unix()) }

func (e *engine) tokensPerSecondAt(now int64) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	total := 0
	for _, b := range e.buckets {
		if b.sec < now && b.sec >= now-rateWindow {
			total += b.tokens
		}
	}
	return float64(total) / rateWindow
}
