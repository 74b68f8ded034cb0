package main

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/exp/trace"

	"github.com/neuronetes/neuronetes/internal/exectrace"
)

func TestWaitKind(t *testing.T) {
	for _, tc := range []struct{ reason, site, want string }{
		{"network", "net.(*netFD).Read", waitNet},
		{"select", "net/http.(*Transport).getConn", waitConn},
		{"select", "net/http.(*persistConn).roundTrip", waitHeader},
		{"chan receive", "net/http.(*persistConn).roundTrip", waitOther},
		{"select", "net/http.(*persistConn).readLoop", waitOther},
		{"sync", "github.com/neuronetes/neuronetes/gateway/pick.(*Lease).FirstToken", waitLock},
		{"sync.(*Cond).Wait", "net/http.(*connReader).abortPendingRead", waitOther},
	} {
		if got := waitKind(tc.reason, tc.site); got != tc.want {
			t.Errorf("waitKind(%q, %q) = %q, want %q", tc.reason, tc.site, got, tc.want)
		}
	}
	for start, want := range map[string]string{"net/http.(*conn).serve": roleHandler, "net/http.(*persistConn).readLoop": roleReader,
		"net/http.(*persistConn).writeLoop": roleOther, "": roleOther, "net/http.(*Transport).startDialConnForLocked.func1": roleDialer} {
		if got := roleOf(start); got != want {
			t.Errorf("roleOf(%q) = %q, want %q", start, got, want)
		}
	}
}

// One request's goroutines, step by step: the waits land under their kind, the runnable time
// after a wake under the wait it ended, and a preemption's runnable time under no wake.
func TestWaitProfileStep(t *testing.T) {
	const h, rd = 1, 2
	type tr struct {
		g        uint64
		start    string
		from, to trace.GoState
		reason   string
		site     string
		atMs     float64
	}
	p := newWaitProfile()
	for _, s := range []tr{
		{h, "net/http.(*conn).serve", trace.GoNotExist, trace.GoRunnable, "", "", 0},
		{h, "", trace.GoRunnable, trace.GoRunning, "", "", 1},
		{h, "", trace.GoRunning, trace.GoWaiting, "select", "net/http.(*Transport).getConn", 2},
		{rd, "net/http.(*persistConn).readLoop", trace.GoNotExist, trace.GoRunnable, "", "", 2},
		{rd, "", trace.GoRunnable, trace.GoRunning, "", "", 2},
		{rd, "", trace.GoRunning, trace.GoWaiting, "network", "net.(*netFD).Read", 3},
		{h, "", trace.GoWaiting, trace.GoRunnable, "", "", 5},
		{h, "", trace.GoRunnable, trace.GoRunning, "", "", 5.5},
		{h, "", trace.GoRunning, trace.GoWaiting, "select", "net/http.(*persistConn).roundTrip", 6},
		{h, "", trace.GoWaiting, trace.GoRunnable, "", "", 6.5}, // the request written
		{h, "", trace.GoRunnable, trace.GoRunning, "", "", 6.5},
		{h, "", trace.GoRunning, trace.GoWaiting, "select", "net/http.(*persistConn).roundTrip", 6.5},
		{rd, "", trace.GoWaiting, trace.GoRunnable, "", "", 8},
		{rd, "", trace.GoRunnable, trace.GoRunning, "", "", 9},
		{h, "", trace.GoWaiting, trace.GoRunnable, "", "", 10},
		{h, "", trace.GoRunnable, trace.GoRunning, "", "", 10.2},
		{h, "", trace.GoRunning, trace.GoWaiting, "sync", "github.com/neuronetes/neuronetes/gateway/pick.(*Lease).FirstToken", 10.4},
		{h, "", trace.GoWaiting, trace.GoRunnable, "", "", 10.6},
		{h, "", trace.GoRunnable, trace.GoRunning, "", "", 10.6},
		{h, "", trace.GoRunning, trace.GoWaiting, "network", "net.(*netFD).Read", 11},
		{h, "", trace.GoWaiting, trace.GoRunnable, "", "", 31},
		{h, "", trace.GoRunnable, trace.GoRunning, "", "", 31.3},
		{h, "", trace.GoRunning, trace.GoRunnable, "preempted", "", 32},
		{h, "", trace.GoRunnable, trace.GoRunning, "", "", 34},
	} {
		p.step(s.g, s.start, s.from, s.to, s.reason, s.site, time.Duration(s.atMs*float64(time.Millisecond)))
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("requests", float64(p.requests()), 1)
	near("connection wait", p.perRequest(roleHandler, waitConn), 3)
	near("header wait", p.perRequest(roleHandler, waitHeader), 0.5+3.5)
	near("handler network wait", p.perRequest(roleHandler, waitNet), 20)
	near("lock wait", p.perRequest(roleHandler, waitLock), 0.2)
	if got := p.topLockSites(3); len(got) != 1 || got[0] != "github.com/neuronetes/neuronetes/gateway/pick.(*Lease).FirstToken 1/0.200" {
		t.Errorf("topLockSites = %q", got)
	}
	near("reader runnable after network", p.schedQ(roleReader, waitNet, 0.5), 1)
	near("handler runnable after network", p.schedQ(roleHandler, waitNet, 0.9), 0.3)
	near("handler runnable after the header", p.schedQ(roleHandler, waitHeader, 1), 0.2)
	near("all runnable", ms(p.runnable), 1+0.5+0.2+0.3+2+1)
	// Running: the handler 1-2, 5.5-6, 6.5-6.5, 10.2-10.4, 10.6-11, 31.3-32; the reader 2-3.
	near("handler running", ms(p.running[roleHandler]), 1+0.5+0+0.2+0.4+0.7)
	near("all running", ms(p.allRunning()), 1+0.5+0+0.2+0.4+0.7+1)
	if p.created[roleHandler] != 1 || p.created[roleReader] != 1 {
		t.Errorf("created %v, want one handler and one reader", p.created)
	}
	if n := len(p.sched[[2]string{roleHandler, waitNet}]); n != 1 {
		t.Errorf("%d runnable spells after a network wake, want 1 (a preemption is none)", n)
	}
}

// A real trace of httputil.ReverseProxy serving a request: its handler's wait for the response
// header is found, as long as the backend took to answer.
func TestReadTraceWaits(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	front := httptest.NewServer(httputil.NewSingleHostReverseProxy(u))
	defer front.Close()
	path := filepath.Join(t.TempDir(), "rp.trace")
	stop, err := exectrace.Start(path)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		resp, err := http.Get(front.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	p, err := readTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.requests() != 3 {
		t.Fatalf("%d backend requests traced, want 3 (waits %v)", p.requests(), p.waits)
	}
	if w := p.perRequest(roleHandler, waitHeader); w < 20 {
		t.Errorf("header wait %.3f ms per request, want >= the backend's 20 ms", w)
	}
}

// The lock sites come longest first (ties by name), at most n, per backend request.
func TestTopLockSites(t *testing.T) {
	p := newWaitProfile()
	p.backendRequests = 2
	p.lockSites = map[string]*siteWaits{
		"a": {n: 1, total: 2 * time.Millisecond},
		"b": {n: 3, total: 6 * time.Millisecond},
		"c": {n: 1, total: 2 * time.Millisecond},
		"d": {n: 1, total: time.Millisecond},
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{0, []string{}},
		{1, []string{"b 3/3.000"}},
		{3, []string{"b 3/3.000", "a 1/1.000", "c 1/1.000"}},
		{9, []string{"b 3/3.000", "a 1/1.000", "c 1/1.000", "d 1/0.500"}},
	} {
		if got := p.topLockSites(tc.n); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("topLockSites(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
