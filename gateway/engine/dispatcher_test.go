package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/auth"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// TestDispatcherTargetPool: the dispatcher's credential with a named pool is served by that pool
// alone, in any namespace the gateway serves, even where another pool serves the same model (a
// rollout's canary); nobody else may name a pool.
func TestDispatcherTargetPool(t *testing.T) {
	stable, canary, other := newBackend(t), newBackend(t), newBackend(t)
	h := newHarness(t, stable)
	pools := []*route.Pool{h.pool}
	for _, p := range []struct {
		ns, name, model string
		b               *backend
	}{{"ns", "canary", "m", canary}, {"other", "workers", "m", other}} {
		pools = append(pools, &route.Pool{Ref: route.PoolRef{Namespace: p.ns, Name: p.name}, AgentClass: "cls", Model: p.model,
			Policy: route.DefaultPolicy(), Endpoints: []route.Endpoint{{Pod: p.b.name, Addr: p.b.name}}})
	}
	h.e.Table.Store(route.NewSnapshot(pools))
	token := strings.Repeat("d", 40)
	h.e.Dispatcher = auth.NewDispatcher(token)
	for _, tc := range []struct {
		name, cred, target, model string
		status                    int
		want                      *backend
	}{
		{"bound pool, not the other pool of its model", token, "ns/canary", "m", 0, canary},
		{"the stable pool by name", token, "ns/pool", "m", 0, stable},
		{"a pool of another namespace", token, "other/workers", "m", 0, other},
		{"unknown pool", token, "ns/nope", "m", 404, nil},
		{"model the pool does not serve", token, "ns/canary", "x", 404, nil},
		{"malformed target", token, "canary", "m", 400, nil},
		{"a tenant naming a pool", "sk-some-tenant", "ns/canary", "m", 403, nil},
		{"wrong dispatcher token", token + "x", "ns/canary", "m", 403, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := stable.count() + canary.count() + other.count()
			hdr := map[string]string{"Authorization": "Bearer " + tc.cred, auth.HeaderTargetPool: tc.target}
			s := h.do(context.Background(), nil, hdr, strings.Replace(chat(false, ""), `"model":"m"`, `"model":"`+tc.model+`"`, 1))
			status := 0
			if s.err != nil {
				status = s.err.Status
			}
			if status != tc.status {
				t.Fatalf("status %d (%v), want %d", status, s.err, tc.status)
			}
			after := stable.count() + canary.count() + other.count()
			if tc.want == nil {
				if after != before {
					t.Fatal("a refused request reached a pod")
				}
				return
			}
			if after != before+1 || tc.want.count() == 0 || s.meta.Pod != tc.want.name {
				t.Fatalf("served by %q, want %q", s.meta.Pod, tc.want.name)
			}
		})
	}
}
