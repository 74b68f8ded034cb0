package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTest(t *testing.T, mod func(*Config)) (*Engine, *clocktesting.FakeClock) {
	t.Helper()
	cfg := Config{Slots: 4, BlockSize: 16, Blocks: 1000, PrefixCaching: true, PrefillRate: 10000, DecodeRate: 100,
		FirstTokenOverhead: 5 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	fc := clocktesting.NewFakeClock(t0)
	e, err := New(cfg, fc)
	if err != nil {
		t.Fatal(err)
	}
	return e, fc
}

// advance runs the scheduler's decision core up to d from now, stopping at every prefill end.
func advance(e *Engine, fc *clocktesting.FakeClock, d time.Duration) {
	target := fc.Now().Add(d)
	for {
		wait, busy := e.step(fc.Now())
		if !busy || fc.Now().Add(wait).After(target) {
			break
		}
		fc.Step(wait)
	}
	fc.SetTime(target)
	e.step(target)
}

func tokens(start, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(start + i)
	}
	return out
}

func mustAdd(t *testing.T, e *Engine, prompt []uint64, max int) *Seq {
	t.Helper()
	s, err := e.Add(prompt, max)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ttft(s *Seq) time.Duration {
	tm := s.Timing()
	if tm.FirstToken.IsZero() {
		return -1
	}
	return tm.FirstToken.Sub(tm.Arrived)
}

func TestTTFTIsPrefillOfUncachedTokens(t *testing.T) {
	e, fc := newTest(t, nil)
	a := mustAdd(t, e, tokens(0, 1000), 10)
	advance(e, fc, time.Second)
	if got, want := ttft(a), 105*time.Millisecond; got != want { // 1000 tokens at 10k/s + 5 ms
		t.Fatalf("cold TTFT = %v, want %v", got, want)
	}
	if got, want := a.TokenTime(3).Sub(a.Timing().FirstToken), 30*time.Millisecond; got != want {
		t.Errorf("token 3 after the first = %v, want 3 decode intervals %v", got, want)
	}
	a.Finish(tokens(50_000, 10))

	tests := []struct {
		name   string
		prompt []uint64
		want   time.Duration
	}{
		// 1000 prompt + 10 output tokens cached as 63 full blocks (1008 tokens); the next turn
		// repeats them and adds 200: 202 tokens to compute.
		{"next turn of the conversation", append(append(tokens(0, 1000), tokens(50_000, 10)...), tokens(9000, 200)...), 25200 * time.Microsecond},
		{"unrelated prompt", tokens(100_000, 1210), 126 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustAdd(t, e, tt.prompt, 10)
			advance(e, fc, time.Second)
			if got := ttft(s); got != tt.want {
				t.Errorf("TTFT = %v, want %v (cached %d)", got, tt.want, s.Timing().CachedTokens)
			}
			s.Abort()
		})
	}
}

func TestPrefillLaneIsSerial(t *testing.T) {
	e, fc := newTest(t, nil)
	a := mustAdd(t, e, tokens(0, 1000), 10)
	b := mustAdd(t, e, tokens(5000, 500), 10)
	advance(e, fc, 50*time.Millisecond)
	// b is admitted only when a's prefill ends and the lane is free, at 100 ms.
	if st := e.Stats(); st.Running != 1 || st.Waiting != 1 || st.WaitingTokens != 500 {
		t.Fatalf("at 50 ms: %+v, want a prefilling and b waiting", st)
	}
	advance(e, fc, time.Second)
	if got, want := ttft(b), 155*time.Millisecond; got != want {
		t.Errorf("second TTFT = %v, want a's 100 ms prefill + its own 50 ms + 5 ms", got)
	}
	if q := b.Timing().Admitted.Sub(t0); q != 100*time.Millisecond {
		t.Errorf("second admitted after %v, want 100ms", q)
	}
	a.Abort()
	b.Abort()
}

func TestSlotsBoundTheBatch(t *testing.T) {
	e, fc := newTest(t, func(c *Config) { c.Slots = 2 })
	a := mustAdd(t, e, tokens(0, 10), 5)
	b := mustAdd(t, e, tokens(100, 10), 5)
	c := mustAdd(t, e, tokens(200, 10), 5)
	advance(e, fc, time.Second)
	if st := e.Stats(); st.Running != 2 || st.Waiting != 1 {
		t.Fatalf("stats = %+v, want 2 running, 1 waiting", st)
	}
	if !c.Timing().FirstToken.IsZero() {
		t.Fatal("third sequence started without a slot")
	}
	a.Finish(tokens(1000, 5))
	advance(e, fc, 10*time.Millisecond)
	if got := c.Timing().Admitted.Sub(t0); got != time.Second {
		t.Errorf("third admitted at %v, want when the slot freed (1s)", got)
	}
	b.Abort()
	c.Abort()
	if st := e.Stats(); st.Running != 0 || st.Cache.Usage != 0 {
		t.Errorf("after all ended: %+v", st)
	}
}

func TestKVCapacityBoundsAdmission(t *testing.T) {
	// 10 blocks of 16 tokens; each sequence reserves 100+60 tokens = 10 blocks.
	e, fc := newTest(t, func(c *Config) { c.Blocks = 10 })
	a := mustAdd(t, e, tokens(0, 100), 60)
	b := mustAdd(t, e, tokens(1000, 100), 60)
	advance(e, fc, time.Second)
	if st := e.Stats(); st.Running != 1 || st.Waiting != 1 || st.Cache.Usage != 1 {
		t.Fatalf("stats = %+v, want 1 running with the cache full, 1 waiting", st)
	}
	a.Abort()
	advance(e, fc, time.Second)
	if b.Timing().FirstToken.IsZero() {
		t.Fatal("waiting sequence not admitted after the cache freed")
	}
	if _, err := e.Add(tokens(0, 100), 61); !errors.Is(err, ErrTooLong) {
		t.Errorf("161 tokens in a 160-token cache: err = %v, want ErrTooLong", err)
	}
}

func TestAbortFreesAtOnce(t *testing.T) {
	for _, phase := range []string{"waiting", "prefilling", "decoding"} {
		t.Run(phase, func(t *testing.T) {
			e, fc := newTest(t, func(c *Config) { c.Slots = 1 })
			first := mustAdd(t, e, tokens(0, 1000), 100)
			victim := first
			switch phase {
			case "waiting":
				victim = mustAdd(t, e, tokens(5000, 10), 10)
				advance(e, fc, 10*time.Millisecond)
			case "prefilling":
				advance(e, fc, 10*time.Millisecond)
			case "decoding":
				advance(e, fc, 200*time.Millisecond)
			}
			victim.Abort()
			victim.Abort() // idempotent
			if victim != first {
				first.Abort()
			}
			if st := e.Stats(); st.Running != 0 || st.Waiting != 0 || st.WaitingTokens != 0 || st.Cache.Usage != 0 {
				t.Fatalf("after abort: %+v", st)
			}
			if st := e.Stats(); st.Cache.CachedBlocks != 0 && phase != "decoding" {
				t.Errorf("aborted prefill left %d cached blocks", st.Cache.CachedBlocks)
			}
		})
	}
}

// TestWaitTokenCancel runs the real scheduler goroutine: a cancelled context aborts the sequence
// while it waits for its slot and while it decodes.
func TestWaitTokenCancel(t *testing.T) {
	e, fc := newTest(t, func(c *Config) { c.Slots = 1 })
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go e.Run(ctx)

	a := mustAdd(t, e, tokens(0, 100), 100)
	b := mustAdd(t, e, tokens(500, 100), 100)
	bctx, cancelB := context.WithCancel(ctx)
	errB := make(chan error, 1)
	go func() { errB <- b.WaitToken(bctx, 0) }()

	first := make(chan error, 1)
	go func() { first <- a.WaitToken(ctx, 0) }()
	waitFor(t, "the prefill timer", fc.HasWaiters)
	fc.Step(15 * time.Millisecond) // 100 tokens at 10k/s + 5 ms overhead
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	cancelB()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting sequence: err = %v", err)
	}
	actx, cancelA := context.WithCancel(ctx)
	errA := make(chan error, 1)
	go func() { errA <- a.WaitToken(actx, 50) }()
	waitFor(t, "the decode timer", func() bool { return fc.Waiters() >= 1 })
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("decoding sequence: err = %v", err)
	}
	if st := e.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("after cancels: %+v", st)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Slots: 1, BlockSize: 16, Blocks: 10, PrefillRate: 1, DecodeRate: 1}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"slots", func(c *Config) { c.Slots = 0 }},
		{"block size", func(c *Config) { c.BlockSize = 0 }},
		{"KV cache", func(c *Config) { c.Blocks = 0 }},
		{"prefill rate", func(c *Config) { c.PrefillRate = 0 }},
		{"decode rate", func(c *Config) { c.DecodeRate = -1 }},
		{"first-token overhead", func(c *Config) { c.FirstTokenOverhead = -time.Millisecond }},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tt := range tests {
		c := good
		tt.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.name) {
			t.Errorf("%s: err = %v, want it named", tt.name, err)
		}
	}
}
