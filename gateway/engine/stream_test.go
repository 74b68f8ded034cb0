package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// The first chunk reaches the client while the backend has not generated the last token.
func TestStreamFirstChunkBeforeLastToken(t *testing.T) {
	b := newBackend(t)
	release := make(chan struct{})
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunkJSON("first ", ""))
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", chunkJSON("last", "stop"))
	})
	h := newHarness(t, b)
	done := make(chan *sink)
	s := newSink()
	go func() {
		h.e.Handle(context.Background(), Inbound{Route: "chat", Header: http.Header{}, Body: []byte(chat(true, "")), Protocol: "http", Tenant: anyone}, s)
		done <- s
	}()
	select {
	case <-s.first:
	case <-time.After(2 * time.Second):
		t.Fatal("first chunk not delivered while the backend holds the last token")
	}
	close(release)
	<-done
	if s.text() != "first last" || !s.finished || s.meta.Pod != b.name {
		t.Fatalf("text %q finished %v meta %+v", s.text(), s.finished, s.meta)
	}
	if n := testutil.CollectAndCount(h.e.Metrics.TTFT); n != 1 {
		t.Fatalf("TTFT series %d", n)
	}
	// The request's prompt tokens were counted at arrival: the autoscaler's offered demand.
	if got := h.e.Pools.Offered(h.pool.Ref); got <= 0 {
		t.Fatalf("offered prompt tokens %v, want > 0", got)
	}
	h.assertReleased(t)
}

// A client that disconnects mid-stream cancels the backend request at once and releases every
// counter: load, in-flight gauge, queued tokens, admission slot and the quota lease.
func TestCancelReleasesEveryCounter(t *testing.T) {
	b := newBackend(t)
	backendDone := make(chan time.Time, 1)
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: %s\n\n", chunkJSON("x ", ""))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				backendDone <- time.Now()
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	h := newHarness(t, b)
	tn := tenant("t", access.Quota{MaxConcurrent: 1})
	ctx, cancel := context.WithCancel(context.Background())
	s := newSink()
	finished := make(chan struct{})
	go func() {
		h.e.Handle(ctx, Inbound{Route: "chat", Header: http.Header{"X-Session-Id": {"s1"}}, Body: []byte(chat(true, "")), Protocol: "http", Tenant: tn}, s)
		close(finished)
	}()
	<-s.first
	if h.e.Picker.Load.Total() != 1 || testutil.ToFloat64(h.e.Metrics.InFlight.WithLabelValues("ns/pool")) != 1 {
		t.Fatal("request not counted while streaming")
	}
	cancelled := time.Now()
	cancel()
	select {
	case at := <-backendDone:
		if d := at.Sub(cancelled); d > time.Second {
			t.Fatalf("backend saw the cancel after %v", d)
		}
	case <-time.After(time.Second):
		t.Fatal("backend request not cancelled within 1 s")
	}
	<-finished
	h.assertReleased(t)
	b.set(streamTokens(2, 0))
	// The quota lease is back: a second request of the same tenant (cap 1) is admitted.
	s2 := h.do(context.Background(), tn, nil, chat(false, ""))
	if s2.err != nil {
		t.Fatalf("after the cancel, the tenant's next request failed (a leaked quota lease is quota_concurrency): %v", s2.err)
	}
}

// TestClientGone: a client that goes away mid-response is a cancel, not a pool failure (a
// rollout must not count it against the canary), and what the pod generated is billed.
func TestClientGone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		gone   int
		// output is the completion tokens billed: the backend's usage (5) when it was read, else
		// the chunks that arrived before the client left.
		output int
	}{
		{"non-streamed, the whole response undeliverable", false, 0, 5},
		{"streamed, gone after two events", true, 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			b.set(streamTokens(5, 0))
			h := newHarness(t, b)
			obs := &observer{}
			h.e.Ext.Observers = []stage.Observer{obs}
			s := newSink()
			s.gone = &tc.gone
			h.e.Handle(context.Background(), Inbound{Route: openai.RouteChat, Header: http.Header{}, Body: []byte(chat(tc.stream, "")),
				Protocol: "http", Tenant: tenant("t", access.Quota{TokensPerMinute: 100000})}, s)
			if len(obs.out) != 1 {
				t.Fatalf("%d outcomes", len(obs.out))
			}
			o := obs.out[0]
			if !o.Cancelled || o.Status != StatusClientClosed {
				t.Fatalf("outcome cancelled=%v status %d err %q, want a 499 cancel", o.Cancelled, o.Status, o.Err)
			}
			if o.CompletionTokens < tc.output-1 || o.CompletionTokens > tc.output {
				t.Fatalf("billed %d completion tokens, want about %d", o.CompletionTokens, tc.output)
			}
			if v := testutil.ToFloat64(h.e.Metrics.Tokens.WithLabelValues("cls", "m", "output")); int(v) != o.CompletionTokens {
				t.Fatalf("tokens_total output %v, outcome %d", v, o.CompletionTokens)
			}
			if v := testutil.ToFloat64(h.e.Metrics.Requests.WithLabelValues("ns/pool", "499", map[bool]string{true: "sse", false: "http"}[tc.stream])); v != 1 {
				t.Fatalf("requests_total{code=499} = %v", v)
			}
			h.assertReleased(t)
		})
	}
}

// Before the first byte, a 503 (or 429, or a refused connection) is retried once on the next
// candidate; after it, a failure ends the stream with an error event and is never retried.
func TestRetryBeforeFirstByteOnly(t *testing.T) {
	t.Run("503 then ok", func(t *testing.T) {
		bad, good := newBackend(t), newBackend(t)
		bad.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
		})
		h := newHarness(t, bad, good)
		// Pin the session to the failing pod so the first attempt goes there.
		h.e.Pins.Pin(context.Background(), h.pool.Ref, scopedKey(h.e, anyone, "s1"), bad.name, time.Minute)
		s := h.do(context.Background(), anyone, map[string]string{"X-Session-Id": "s1"}, chat(true, ""))
		if s.err != nil || s.meta.Pod != good.name || s.meta.Pin != PinRepinned || s.text() != "t0 t1 t2 " {
			t.Fatalf("err %v meta %+v text %q", s.err, s.meta, s.text())
		}
		if bad.count() != 1 || good.count() != 1 {
			t.Fatalf("attempts bad %d good %d", bad.count(), good.count())
		}
		if v := testutil.ToFloat64(h.e.Metrics.Retries.WithLabelValues("ns/pool", "503")); v != 1 {
			t.Fatalf("retries %v", v)
		}
		h.assertReleased(t)
	})
	t.Run("connection refused then ok", func(t *testing.T) {
		dead, good := newBackend(t), newBackend(t)
		dead.srv.Close()
		h := newHarness(t, dead, good)
		h.e.Pins.Pin(context.Background(), h.pool.Ref, scopedKey(h.e, anyone, "s1"), dead.name, time.Minute)
		s := h.do(context.Background(), anyone, map[string]string{"X-Session-Id": "s1"}, chat(false, ""))
		if s.err != nil || s.meta.Pod != good.name || !strings.Contains(s.body, "t0 t1 t2") {
			t.Fatalf("err %v meta %+v body %q", s.err, s.meta, s.body)
		}
	})
	t.Run("two failures", func(t *testing.T) {
		a, b := newBackend(t), newBackend(t)
		busy := func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			w.Header().Set("Retry-After", "3")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
		}
		a.set(busy)
		b.set(busy)
		h := newHarness(t, a, b)
		s := h.do(context.Background(), anyone, nil, chat(true, ""))
		if s.err == nil || s.err.Status != 429 || s.err.RetryAfter != 3*time.Second || a.count()+b.count() != 2 {
			t.Fatalf("err %v attempts %d", s.err, a.count()+b.count())
		}
	})
	t.Run("mid-stream failure", func(t *testing.T) {
		a, b := newBackend(t), newBackend(t)
		broken := func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: %s\n\n", chunkJSON("partial ", ""))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // drop the connection
		}
		a.set(broken)
		b.set(broken)
		h := newHarness(t, a, b)
		s := h.do(context.Background(), anyone, nil, chat(true, ""))
		if !s.started || s.err == nil || !s.errAfter || s.finished || a.count()+b.count() != 1 {
			t.Fatalf("started %v err %v after %v finished %v attempts %d", s.started, s.err, s.errAfter, s.finished, a.count()+b.count())
		}
		if !strings.Contains(s.err.Body.Message, "backend stream failed") {
			t.Fatalf("error event %q", s.err.Body.Message)
		}
		h.assertReleased(t)
	})
}

// TestNoSecondRun: an agent that received the request may have run it, so a failure after the
// request reached it is not retried on another pod, unless the client sent an idempotency key.
// Each backend records every run it received.
func TestNoSecondRun(t *testing.T) {
	dropAfterRead := func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		panic(http.ErrAbortHandler) // the body was read (and recorded): the agent ran, then died
	}
	brokenBeforeFirstEvent := func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	for _, tc := range []struct {
		name   string
		handle func(http.ResponseWriter, *http.Request, map[string]any)
		stream bool
		key    string
		runs   int
	}{
		{"dropped after reading, non-streamed", dropAfterRead, false, "", 1},
		{"dropped after reading, streamed", dropAfterRead, true, "", 1},
		{"stream broke before its first event", brokenBeforeFirstEvent, true, "", 1},
		{"dropped after reading, idempotency key", dropAfterRead, false, "order-17", 2},
		{"stream broke before its first event, idempotency key", brokenBeforeFirstEvent, true, "order-18", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newBackend(t), newBackend(t)
			a.set(tc.handle)
			b.set(tc.handle)
			h := newHarness(t, a, b)
			hdr := map[string]string{}
			if tc.key != "" {
				hdr[HeaderIdempotency] = tc.key
			}
			s := h.do(context.Background(), anyone, hdr, chat(tc.stream, ""))
			if s.err == nil {
				t.Fatal("a failed backend answered")
			}
			if runs := a.count() + b.count(); runs != tc.runs {
				t.Fatalf("the agent ran %d times, want %d (err %v)", runs, tc.runs, s.err)
			}
			if a.count() > 1 || b.count() > 1 {
				t.Fatalf("one pod ran the request twice: %d, %d", a.count(), b.count())
			}
			for _, be := range []*backend{a, b} {
				if be.count() == 1 && be.last().header.Get(HeaderIdempotency) != "" {
					t.Fatal("the idempotency key was forwarded to the backend")
				}
			}
			h.assertReleased(t)
		})
	}
	t.Run("malformed idempotency key", func(t *testing.T) {
		a := newBackend(t)
		h := newHarness(t, a)
		s := h.do(context.Background(), anyone, map[string]string{HeaderIdempotency: strings.Repeat("k", 256)}, chat(false, ""))
		if s.err == nil || s.err.Status != 400 || s.err.Body.Param == nil || *s.err.Body.Param != HeaderIdempotency || a.count() != 0 {
			t.Fatalf("err %v, backend runs %d", s.err, a.count())
		}
	})
}

// A stream that stops producing ends with an error event after the idle timeout, never a hang.
func TestIdleTimeout(t *testing.T) {
	b := newBackend(t)
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunkJSON("a ", ""))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	h := newHarness(t, b)
	start := time.Now()
	s := h.do(context.Background(), anyone, nil, chat(true, ""))
	if s.err == nil || !s.errAfter || !strings.Contains(s.err.Body.Message, "idle") {
		t.Fatalf("err %v", s.err)
	}
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Fatalf("ended after %v, want about the 1 s idle timeout", d)
	}
	h.assertReleased(t)
}

func TestFirstTokenTimeout(t *testing.T) {
	b := newBackend(t)
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) { <-r.Context().Done() })
	h := newHarness(t, b)
	s := h.do(context.Background(), anyone, nil, chat(true, ""))
	if s.err == nil || s.errAfter || s.err.Status != http.StatusGatewayTimeout || b.count() != 1 {
		t.Fatalf("err %v after %v attempts %d", s.err, s.errAfter, b.count())
	}
}

// Usage: passed through when the client asked and the backend gave it, synthesized when the
// client asked and the backend gave none, and the gateway's own request for it is hidden.
func TestUsage(t *testing.T) {
	b := newBackend(t)
	h := newHarness(t, b)
	s := h.do(context.Background(), anyone, nil, chat(true, `,"stream_options":{"include_usage":true}`))
	last := s.events[len(s.events)-1]
	if !strings.Contains(last, `"completion_tokens":3`) {
		t.Fatalf("last chunk %s", last)
	}
	if so := b.last().body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Fatal("backend not asked for usage")
	}
	s = h.do(context.Background(), anyone, nil, chat(true, ""))
	for _, e := range s.events {
		if strings.Contains(e, `"usage"`) {
			t.Fatalf("usage sent to a client that did not ask: %s", e)
		}
	}
	b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\ndata: %s\n\ndata: [DONE]\n\n", chunkJSON("a ", ""), chunkJSON("b", "stop"))
	})
	s = h.do(context.Background(), anyone, nil, chat(true, `,"stream_options":{"include_usage":true}`))
	var u struct {
		Usage openai.Usage `json:"usage"`
	}
	_ = json.Unmarshal([]byte(s.events[len(s.events)-1]), &u)
	if u.Usage.CompletionTokens != 2 || u.Usage.PromptTokens == 0 {
		t.Fatalf("synthesized usage %+v from %s", u, s.events[len(s.events)-1])
	}
	if v := testutil.ToFloat64(h.e.Metrics.Tokens.WithLabelValues("cls", "m", "output")); v != 3+3+2 {
		t.Fatalf("output tokens %v, want 8", v)
	}
}

// Two turns of a session land on the same pod; when that pod leaves the pool the session is
// re-pinned to another.
func TestAffinityHoldAndRepin(t *testing.T) {
	bs := []*backend{newBackend(t), newBackend(t), newBackend(t)}
	h := newHarness(t, bs...)
	hdr := map[string]string{"X-Session-Id": "conv-9"}
	s1 := h.do(context.Background(), anyone, hdr, chat(true, ""))
	s2 := h.do(context.Background(), anyone, hdr, chat(true, ""))
	if s1.meta.Pin != PinNew || s2.meta.Pin != PinHeld || s1.meta.Pod != s2.meta.Pod {
		t.Fatalf("turns: %+v then %+v", s1.meta, s2.meta)
	}
	for _, b := range bs {
		if b.name != s1.meta.Pod {
			continue
		}
		want := scopedKey(h.e, anyone, "conv-9")
		if got := b.last().header; got.Get("X-Conversation-Id") != want || got.Get("X-Session-Id") != want {
			t.Fatalf("backend got conversation %q, session %q; want the scoped key %q", got.Get("X-Conversation-Id"), got.Get("X-Session-Id"), want)
		}
	}
	// The pod leaves the pool.
	p := *h.pool
	p.Endpoints = nil
	for _, e := range h.pool.Endpoints {
		if e.Pod != s1.meta.Pod {
			p.Endpoints = append(p.Endpoints, e)
		}
	}
	h.e.Table.Store(route.NewSnapshot([]*route.Pool{&p}))
	s3 := h.do(context.Background(), anyone, hdr, chat(true, ""))
	s4 := h.do(context.Background(), anyone, hdr, chat(true, ""))
	if s3.meta.Pin != PinRepinned || s3.meta.Pod == s1.meta.Pod || s4.meta.Pin != PinHeld || s4.meta.Pod != s3.meta.Pod {
		t.Fatalf("after the pod left: %+v then %+v", s3.meta, s4.meta)
	}
	for _, r := range []string{"hit", "miss", "repin"} {
		if testutil.ToFloat64(h.e.Metrics.Affinity.WithLabelValues("ns/pool", r)) == 0 {
			t.Fatalf("affinity %s not counted", r)
		}
	}
}

// TestWholeResponseTTFT: a non-streamed response's TTFT is the backend's own report
// (proxy.HeaderTTFT), never its whole latency; without a report it has none, so the TTFT
// histogram the autoscaler and rollouts read holds streamed first tokens and reported ones only.
func TestWholeResponseTTFT(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		want         bool // a TTFT is observed
	}{
		{"no report", "", false},
		{"reported", "0.05", true},
		{"report beyond the exchange", "3600", false},
		{"malformed report", "soon", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			b.set(func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				time.Sleep(300 * time.Millisecond) // the whole generation
				if tc.header != "" {
					w.Header().Set(proxy.HeaderTTFT, tc.header)
				}
				streamTokens(3, 0)(w, r, body)
			})
			h := newHarness(t, b)
			obs := &observer{}
			h.e.Ext.Observers = []stage.Observer{obs}
			if s := h.do(context.Background(), anyone, nil, chat(false, "")); s.err != nil {
				t.Fatal(s.err)
			}
			o := obs.out[0]
			n := testutil.CollectAndCount(h.e.Metrics.TTFT)
			if !tc.want {
				if o.TTFT != 0 || n != 0 {
					t.Fatalf("TTFT %v, %d series; want none", o.TTFT, n)
				}
				return
			}
			if o.TTFT < 50*time.Millisecond || o.TTFT > 200*time.Millisecond || n != 1 {
				t.Fatalf("TTFT %v (%d series), want the reported 50 ms plus the gateway's own time", o.TTFT, n)
			}
		})
	}
}

// The first token leaves for the client before the gateway records it: leaving the queue views,
// the lease's prefill and the TTFT histogram take locks every request shares, and a lock held by
// a goroutine the scheduler put aside must not hold back a first token. The TTFT recorded is
// still the token's arrival, not the end of its write.
func TestFirstTokenSentBeforeItsBookkeeping(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first string // the first event: decoded (no id before it) or scanned
	}{
		{"decoded first chunk", chunkJSON("first ", "")},
		{"scanned after a role chunk", `{"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\ndata: " + chunkJSON("first ", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			b.set(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: %s\n\n", tc.first)
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
				fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", chunkJSON("last", "stop"))
			})
			h := newHarness(t, b)
			s := newSink()
			var atFirst struct {
				queued int
				ttfts  int
				at     time.Time
			}
			s.onEvent = func() {
				if !strings.Contains(s.events[len(s.events)-1], "first") {
					return
				}
				for _, v := range h.e.Pools.Queued(h.pool.Ref) {
					atFirst.queued += v
				}
				atFirst.ttfts = testutil.CollectAndCount(h.e.Metrics.TTFT)
				time.Sleep(50 * time.Millisecond) // a slow write
				atFirst.at = time.Now()
			}
			start := time.Now()
			h.e.Handle(context.Background(), Inbound{Route: "chat", Header: http.Header{}, Body: []byte(chat(true, "")), Protocol: "http", Tenant: anyone}, s)
			if s.text() != "first last" || atFirst.at.IsZero() {
				t.Fatalf("text %q, first token seen %v", s.text(), atFirst.at)
			}
			if atFirst.queued <= 0 || atFirst.ttfts != 0 {
				t.Errorf("when the first token was written: %d prompt tokens still queued, %d TTFT series; want the request still queued and no TTFT yet",
					atFirst.queued, atFirst.ttfts)
			}
			if n := testutil.CollectAndCount(h.e.Metrics.TTFT); n != 1 {
				t.Fatalf("TTFT series %d after the stream, want 1", n)
			}
			// The write took 50 ms (onEvent); the TTFT is the token's arrival, before it.
			if ttft := ttftSum(t, h); ttft <= 0 || ttft >= atFirst.at.Sub(start).Seconds() {
				t.Errorf("TTFT %v s, want the first token's arrival, before the end of its write %v after the start", ttft, atFirst.at.Sub(start))
			}
			h.assertReleased(t)
		})
	}
}

// ttftSum is the TTFT histogram's sum of seconds.
func ttftSum(t *testing.T, h *harness) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "neuronetes_ttft_seconds" {
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return sum
}
