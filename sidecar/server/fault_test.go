package server

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

// TestFaultRedisRestart crashes Redis (SIGKILL) in the middle of 10,000
// writes from 32 goroutines through the HTTP API and restarts it. Redis runs
// with the chart's own configuration (redistest.ChartConfig, the file the
// bundled Redis mounts), so the durability tested is the one shipped. It
// counts the acknowledged writes that are not readable afterwards: there must
// be none, and the sidecar must have answered 503 with Retry-After while
// Redis was down.
func TestFaultRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test skipped in -short mode")
	}
	rs := redistest.Start(t, redistest.Options{ConfigFile: redistest.ChartConfig()})
	f := newFixtureOn(t, "fasthttp", rs.Addr, "fault", store.Options{}) // the sidecar's default HTTP server
	const writers, total = 32, 10000
	var (
		acked      sync.Map // id -> body
		nAcked     atomic.Int64
		n503       atomic.Int64
		retryAfter atomic.Bool
		other      sync.Map // unexpected status -> count
		restarted  = make(chan struct{})
		wg         sync.WaitGroup
	)
	go func() { // crash and restart once a third of the writes are acknowledged
		defer close(restarted)
		for nAcked.Load() < total/3 {
			time.Sleep(time.Millisecond)
		}
		rs.Kill()
		time.Sleep(500 * time.Millisecond)
		if err := rs.Start(); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(3 * time.Minute)
	for w := range writers {
		wg.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			for i := w; i < total; i += writers {
				id := fmt.Sprintf("w%02d-%05d", w, i)
				body := fmt.Sprintf(`{"writer":%d,"seq":%d}`, w, i)
				for time.Now().Before(deadline) {
					req, _ := http.NewRequest("PUT", f.url+"/v1/sessions/"+id, stringsReader(body))
					resp, err := client.Do(req)
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						acked.Store(id, body)
						nAcked.Add(1)
						break
					}
					if resp.StatusCode == http.StatusServiceUnavailable {
						n503.Add(1)
						if resp.Header.Get("Retry-After") != "" {
							retryAfter.Store(true)
						}
					} else {
						v, _ := other.LoadOrStore(resp.StatusCode, new(atomic.Int64))
						v.(*atomic.Int64).Add(1)
					}
					time.Sleep(20 * time.Millisecond) // a client backing off
				}
			}
		})
	}
	wg.Wait()
	<-restarted
	other.Range(func(k, v any) bool {
		t.Errorf("unexpected status %v answered %d times", k, v.(*atomic.Int64).Load())
		return true
	})
	if nAcked.Load() != total {
		t.Fatalf("acknowledged %d of %d writes before the deadline", nAcked.Load(), total)
	}
	if n503.Load() == 0 || !retryAfter.Load() {
		t.Fatalf("503s while Redis was down: %d (Retry-After seen: %v)", n503.Load(), retryAfter.Load())
	}
	lost := 0
	acked.Range(func(k, v any) bool {
		code, _, got := f.do(t, "GET", "/v1/sessions/"+k.(string), nil, "")
		if code != 200 || got != v.(string) {
			lost++
			if lost < 5 {
				t.Errorf("acknowledged %s: GET = %d %q, want %q", k, code, got, v)
			}
		}
		return true
	})
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged writes lost to kill -9 with the chart's Redis configuration", lost, nAcked.Load())
	}
	t.Logf("%d writes acknowledged, %d answers were 503 while Redis was down", nAcked.Load(), n503.Load())
}
