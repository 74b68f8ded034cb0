package front

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/auth"
)

// wsGuard keeps a WebSocket's credential and activity under watch. A socket outlives the
// request that opened it, so its credential is authenticated again before each request message,
// every WebSocketRecheck and at a JWT's expiry; a credential no longer accepted (an API key
// removed from the tenant directory, an expired token) or mapped to another tenant closes the
// socket with 1008 (policy violation). A socket with no request in flight that receives no
// message for WebSocketIdleTimeout is closed with 1001 (going away).
type wsGuard struct {
	s      *Server
	c      *websocket.Conn
	header http.Header
	// tenant is the socket's current tenant: the latest authentication's, so a directory reload
	// (models, quotas) applies to the next request.
	tenant atomic.Pointer[access.Tenant]
	expiry time.Time
	hasExp bool
	// last is the time (UnixNano) of the last message received or answer finished; busy is set
	// while an answer is in flight.
	last atomic.Int64
	busy atomic.Bool
	// idled wakes watch when an answer ends, to time the idle period from then.
	idled chan struct{}
}

func newWSGuard(s *Server, c *websocket.Conn, h http.Header, t *access.Tenant) *wsGuard {
	g := &wsGuard{s: s, c: c, header: h, idled: make(chan struct{}, 1)}
	g.tenant.Store(t)
	g.expiry, g.hasExp = auth.Expiry(h)
	g.touch()
	return g
}

// touch records activity.
func (g *wsGuard) touch() { g.last.Store(time.Now().UnixNano()) }

// answering marks an answer in flight (true) or finished (false).
func (g *wsGuard) answering(busy bool) {
	g.touch()
	g.busy.Store(busy)
	if !busy {
		select {
		case g.idled <- struct{}{}:
		default:
		}
	}
}

// check authenticates the credential again; on failure it closes the socket and returns false.
func (g *wsGuard) check(ctx context.Context) bool {
	reason := ""
	switch t, aerr := g.s.Engine.Authenticate(ctx, g.header); {
	case g.hasExp && !time.Now().Before(g.expiry):
		reason = "credential rejected: token_expired"
	case aerr != nil:
		reason = "credential rejected: " + aerr.Reason
	case t.Key() != g.tenant.Load().Key():
		reason = "credential rejected: it now maps to another tenant"
	default:
		g.tenant.Store(t)
		return true
	}
	klog.FromContext(ctx).V(2).Info("Closing WebSocket", "reason", reason)
	_ = g.c.Close(websocket.StatusPolicyViolation, reason)
	return false
}

// watch closes the socket when it idles or its credential lapses; it returns when ctx ends or
// it closed the socket.
func (g *wsGuard) watch(ctx context.Context) {
	idle, every := g.s.WebSocketIdleTimeout, g.s.WebSocketRecheck
	next := time.Now().Add(every)
	for {
		wake := next
		if g.hasExp && g.expiry.Before(wake) {
			wake = g.expiry
		}
		idleAt := time.Unix(0, g.last.Load()).Add(idle)
		if !g.busy.Load() && idleAt.Before(wake) {
			wake = idleAt
		}
		timer := time.NewTimer(time.Until(wake))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-g.idled:
			timer.Stop()
			continue
		case <-timer.C:
		}
		now := time.Now()
		if !g.busy.Load() && now.Sub(time.Unix(0, g.last.Load())) >= idle {
			klog.FromContext(ctx).V(2).Info("Closing idle WebSocket", "idle", idle)
			_ = g.c.Close(websocket.StatusGoingAway, "idle timeout")
			return
		}
		if !now.Before(next) || (g.hasExp && !now.Before(g.expiry)) {
			if !g.check(ctx) {
				return
			}
			next = now.Add(every)
		}
	}
}
