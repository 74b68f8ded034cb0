// Package sessionroute routes a request that names an AgentSession to that session's current
// pod: the session is looked up in the caller's own namespace only, its activity is recorded
// (the annotation session.neuronetes.io/last-activity, which controller/agentsession reads), and
// a request for a session that is not serving (Pending, Suspending, Suspended, Resuming) is held,
// bounded in time and in number, until the session runs in a Ready pod.
package sessionroute

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// View is what the gateway knows of one AgentSession.
type View struct {
	// Found is false for a session that does not exist in the namespace asked.
	Found bool
	// Phase is status.phase.
	Phase v1alpha1.AgentSessionPhase
	// PhaseSince is status.transitionTime, when the session entered Phase.
	PhaseSince time.Time
	// Activity is the later of the activity annotation and status.lastActivity.
	Activity time.Time
	// Endpoint is the session's current pod when it is routable (Ready, with an IP, owned by
	// the session); Addr is empty otherwise.
	Endpoint route.Endpoint
	// Pool is the session's label v1alpha1.PoolSessionLabel and PoolUID the UID of its
	// controlling AgentPool owner ("" for none): a pool's conversation session (AwaitPool).
	Pool, PoolUID string
}

// Serving reports whether a request can go to the session's pod now.
func (v View) Serving() bool {
	return v.Found && v.Phase == v1alpha1.SessionRunning && v.Endpoint.Addr != ""
}

// Lookup reads sessions (an informer cache in the gateway, gateway/kube.SessionLookup).
type Lookup interface {
	// Session returns the session namespace/name; Found is false when there is none.
	Session(namespace, name string) View
	// PoolActive names the sessions of pool (label v1alpha1.PoolSessionLabel, controlled by an
	// AgentPool) in namespace that hold or will hold a pod: every phase but Suspended.
	PoolActive(namespace, pool string) ([]string, error)
}

// Recorder writes a session's activity (gateway/kube.SessionActivity).
type Recorder interface {
	// RecordActivity sets the session's activity annotation to at.
	RecordActivity(ctx context.Context, namespace, name string, at time.Time) error
}

// Config bounds the hold.
type Config struct {
	// Timeout is the longest a request waits for its session to serve (default 60 s).
	Timeout time.Duration
	// MaxHeld bounds the requests held at once by this replica (default 1000); beyond it a
	// request for a session that is not serving is refused with a 503.
	MaxHeld int
	// ActivityInterval is the least time between two activity writes of one session by this
	// replica while it runs (default 10 s).
	ActivityInterval time.Duration
	// Poll is how often a held request reads its session again without an event: default
	// 100 ms without Router.Changes; with it, events wake held requests and Poll (default
	// 5 s) is only a safety net.
	Poll time.Duration
}

// Router resolves session routes.
type Router struct {
	Lookup   Lookup
	Activity Recorder
	// Creator creates the sessions of pools through sessions (AwaitPool; nil: none is
	// created and such a request gets 404).
	Creator Creator
	Cfg     Config
	Metrics *Metrics
	// Changes, when set, wakes held requests on the informers' events of their session
	// (gateway/kube.NotifySessionChanges); without it they poll every Cfg.Poll.
	Changes *Changes
	// Now is the clock (default time.Now); After starts the hold's timeout (default time.After).
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// Probe, when set, is tried on a held request's session pod once the session serves: a
	// Ready pod whose template has no readiness probe may not listen yet, so the request waits
	// (bounded by the hold's timeout, retried every ProbeInterval) until Probe succeeds instead of
	// failing with 502 (ProbeDial). A request for a session already serving is not probed.
	Probe func(ctx context.Context, addr string) error
	// ProbeInterval is the wait between two failed probes (default 50 ms).
	ProbeInterval time.Duration

	held atomic.Int64
	mu   sync.Mutex
	// admitted: per "namespace/pool", the sessions this replica admitted to a pod (created or
	// woken) whose requests are still held, with their number of held requests (admitPod).
	admitted map[string]map[string]int
	// writes is this replica's last activity write per session ("namespace/name").
	writes map[string]write
}

// write is one session's last activity write: when it was tried and when it last succeeded.
type write struct{ tried, ok time.Time }

// StatusClientClosed is the status of a request whose client went away while held (the
// engine's 499).
const StatusClientClosed = 499

// maxTracked bounds the writes map; beyond it entries older than the interval are dropped.
const maxTracked = 100_000

// retryGap is the least time between two failed activity writes of one session.
const retryGap = time.Second

func (r *Router) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Router) cfg() Config {
	c := r.Cfg
	if c.Timeout <= 0 {
		c.Timeout = 60 * time.Second
	}
	if c.MaxHeld <= 0 {
		c.MaxHeld = 1000
	}
	if c.ActivityInterval <= 0 {
		c.ActivityInterval = 10 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 100 * time.Millisecond
		if r.Changes != nil {
			c.Poll = 5 * time.Second
		}
	}
	return c
}

// NotFound is the answer for a session that does not exist in the caller's namespace, whether
// or not another namespace has one of that name.
func NotFound(name string) *openai.Error {
	e := openai.NewError(http.StatusNotFound, "invalid_request_error", "session_not_found", "session",
		"The session `%s` does not exist or you do not have access to it.", name)
	e.Reason = "session_not_found"
	return e
}

// Await returns the endpoint of session namespace/name once it serves: at once when it runs,
// else after holding the request until it runs in a Ready pod. Every call records activity
// (rate-limited), which wakes a Suspended session. Errors: 404 for no such session in
// namespace, 503 when too many requests are held, 504 when the session did not serve within
// the timeout, 499 when ctx ended.
func (r *Router) Await(ctx context.Context, namespace, name string) (route.Endpoint, *openai.Error) {
	if namespace == "" || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return route.Endpoint{}, NotFound(name)
	}
	v := r.Lookup.Session(namespace, name)
	if !v.Found {
		return route.Endpoint{}, NotFound(name)
	}
	return r.await(ctx, namespace, name, v, false)
}

// await is Await after the first lookup v. created: the router has just created the session,
// so until the hold's timeout "not found" means that the cache has not shown it yet.
func (r *Router) await(ctx context.Context, namespace, name string, v View, created bool) (route.Endpoint, *openai.Error) {
	c := r.cfg()
	if v.Found {
		r.touch(ctx, c, namespace, name, v)
	}
	if v.Serving() {
		return v.Endpoint, nil
	}
	if r.held.Add(1) > int64(c.MaxHeld) {
		r.held.Add(-1)
		r.Metrics.wait("refused", 0)
		e := openai.NewError(http.StatusServiceUnavailable, "service_unavailable", "session_hold_full", "session",
			"session %s is %s and %d requests already wait for sessions to resume; retry", name, phaseOf(v), c.MaxHeld)
		e.RetryAfter = time.Second
		return route.Endpoint{}, e
	}
	defer r.held.Add(-1)
	r.Metrics.holding(1)
	defer r.Metrics.holding(-1)
	return r.hold(ctx, c, namespace, name, v, created)
}

// hold waits until the session serves, it disappears, the timeout passes or ctx ends. It reads
// the session again on each of its changes (Changes) and every Poll.
func (r *Router) hold(ctx context.Context, c Config, namespace, name string, v View, created bool) (route.Endpoint, *openai.Error) {
	start := r.now()
	klog.FromContext(ctx).V(2).Info("Holding request for session", "session", namespace+"/"+name, "phase", v.Phase)
	after := r.After
	if after == nil {
		after = time.After
	}
	timeout := after(c.Timeout)
	tick := time.NewTicker(c.Poll)
	defer tick.Stop()
	var wake <-chan struct{}
	var probing *time.Ticker // set once a serving session's pod refused a probe
	defer func() {
		if probing != nil {
			probing.Stop()
		}
	}()
	check := func() (route.Endpoint, *openai.Error, bool) {
		v = r.Lookup.Session(namespace, name)
		if !v.Found && created {
			return route.Endpoint{}, nil, false
		}
		if !v.Found {
			r.Metrics.wait("gone", r.now().Sub(start))
			return route.Endpoint{}, NotFound(name), true
		}
		r.touch(ctx, c, namespace, name, v)
		if v.Serving() {
			if r.Probe != nil {
				if err := r.Probe(ctx, v.Endpoint.Addr); err != nil {
					klog.FromContext(ctx).V(4).Info("Session pod not listening yet", "session", namespace+"/"+name, "addr", v.Endpoint.Addr, "err", err)
					probing = r.probeTick(probing)
					return route.Endpoint{}, nil, false
				}
			}
			r.Metrics.wait("served", r.now().Sub(start))
			return v.Endpoint, nil, true
		}
		return route.Endpoint{}, nil, false
	}
	if r.Changes != nil {
		ch, cancel := r.Changes.Subscribe(namespace, name)
		defer cancel()
		wake = ch
		// A change between Await's read and the subscription has no event left to wake us.
		if ep, err, done := check(); done {
			return ep, err
		}
	}
	for {
		select {
		case <-ctx.Done():
			r.Metrics.wait("cancelled", r.now().Sub(start))
			return route.Endpoint{}, openai.NewError(StatusClientClosed, "cancelled", "client_closed", "", "client closed the request")
		case <-timeout:
			waited := r.now().Sub(start)
			r.Metrics.wait("timeout", waited)
			e := openai.NewError(http.StatusGatewayTimeout, "timeout", "session_resume_timeout", "session",
				"session %s is still %s after waiting %s for it to serve", name, phaseOf(v), c.Timeout)
			e.RetryAfter = time.Second
			return route.Endpoint{}, e
		case <-wake:
		case <-tick.C:
		case <-probeC(probing):
		}
		if ep, err, done := check(); done {
			return ep, err
		}
	}
}

// probeTick returns t, or a new ticker of ProbeInterval when t is nil.
func (r *Router) probeTick(t *time.Ticker) *time.Ticker {
	if t != nil {
		return t
	}
	d := r.ProbeInterval
	if d <= 0 {
		d = 50 * time.Millisecond
	}
	return time.NewTicker(d)
}

// probeC is t's channel, or nil (never ready) without a ticker.
func probeC(t *time.Ticker) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// ProbeDial is a Probe that opens a TCP connection to addr within one second and closes it at
// once (the gateway closes first, so no connection of the agent's is left open for a later
// CRIU checkpoint).
func ProbeDial(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func phaseOf(v View) string {
	if v.Phase == "" {
		return string(v1alpha1.SessionPending)
	}
	return string(v.Phase)
}

// touch writes the session's activity when ActivityDue says so.
func (r *Router) touch(ctx context.Context, c Config, namespace, name string, v View) {
	key := namespace + "/" + name
	now := r.now()
	r.mu.Lock()
	if r.writes == nil {
		r.writes = map[string]write{}
	}
	w := r.writes[key]
	if !ActivityDue(v, w.ok, w.tried, now, c.ActivityInterval) {
		r.mu.Unlock()
		return
	}
	w.tried = now
	r.writes[key] = w
	r.prune(now, c.ActivityInterval)
	r.mu.Unlock()
	at := WakeTime(v, now)
	if err := r.Activity.RecordActivity(ctx, namespace, name, at); err != nil {
		r.Metrics.activity("error")
		klog.FromContext(ctx).Error(err, "Recording session activity failed", "session", key)
		return
	}
	r.Metrics.activity("ok")
	r.mu.Lock()
	w = r.writes[key]
	if at.After(w.ok) {
		w.ok = at
	}
	r.writes[key] = w
	r.mu.Unlock()
}

// prune drops old entries once the map is large (called with mu held).
func (r *Router) prune(now time.Time, interval time.Duration) {
	if len(r.writes) <= maxTracked {
		return
	}
	for k, w := range r.writes {
		if now.Sub(w.tried) > interval {
			delete(r.writes, k)
		}
	}
}

// ActivityDue decides whether a request for session v writes its activity now, given this
// replica's last successful write ok and last try tried: never within retryGap of a try; for a
// session that is not Running (or Pending), whenever no activity is later than its phase began
// (so a Suspended session always sees activity after its suspension and wakes, a request
// during Suspending writes again once it is Suspended); else when the latest activity known is
// at least interval old.
func ActivityDue(v View, ok, tried, now time.Time, interval time.Duration) bool {
	if !tried.IsZero() && now.Sub(tried) < retryGap {
		return false
	}
	latest := v.Activity
	if ok.After(latest) {
		latest = ok
	}
	switch v.Phase {
	case v1alpha1.SessionSuspended, v1alpha1.SessionSuspending:
		if !latest.After(v.PhaseSince) {
			return true
		}
	}
	return now.Sub(latest) >= interval
}

// WakeTime is the activity time written at now: now, or for a Suspending or Suspended session
// whose phase began at or after now by the session's clock (this replica's clock behind the
// controller's), just after the phase began, so that the write always wakes a Suspended session.
func WakeTime(v View, now time.Time) time.Time {
	switch v.Phase {
	case v1alpha1.SessionSuspended, v1alpha1.SessionSuspending:
		if !now.After(v.PhaseSince) {
			return v.PhaseSince.Add(time.Millisecond)
		}
	}
	return now
}
