package helm_test

import (
	"testing"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// TestChartGatewaySessions: with controller.agentSessions.enabled the gateway gets
// --agent-sessions and its hold settings, and its ClusterRole get, list, watch and patch of
// agentsessions, and create (for pools through sessions; the admission policy narrows it),
// nothing else of them; off (the default): none of it and no policy.
func TestChartGatewaySessions(t *testing.T) {
	off, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	on, err := render(t, nil, []string{`controller={"agentSessions":{"enabled":true}}`,
		`gateway.agentSessions={"resumeTimeout":"90s","maxHeld":7,"activityInterval":"5s"}`})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		objs []object
		want bool
	}{{"default", off, false}, {"enabled", on, true}} {
		a := args(container(find(tc.objs, "Deployment", "nn-neuronetes-gateway"), "gateway"))
		for _, flag := range []string{"--agent-sessions", "--session-resume-timeout=90s", "--session-max-held=7", "--session-activity-interval=5s"} {
			if contains(a, flag) != tc.want {
				t.Errorf("%s: gateway args %v, want %s %v", tc.name, a, flag, tc.want)
			}
		}
		role := find(tc.objs, "ClusterRole", "nn-neuronetes-gateway")
		for _, verb := range []string{"get", "list", "watch", "patch", "create"} {
			if got := rulesGrant(role, "agentsessions", verb); got != tc.want {
				t.Errorf("%s: %s agentsessions granted %v, want %v", tc.name, verb, got, tc.want)
			}
		}
		for _, g := range []struct{ resource, verb string }{
			{"agentsessions", "update"}, {"agentsessions", "delete"}, {"agentsessions/status", "patch"},
		} {
			if rulesGrant(role, g.resource, g.verb) {
				t.Errorf("%s: the gateway may %s %s", tc.name, g.verb, g.resource)
			}
		}
		if got := find(tc.objs, "ValidatingAdmissionPolicyBinding", "nn-neuronetes-gateway-session-activity") != nil; got != tc.want {
			t.Errorf("%s: activity policy binding rendered %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, err := render(t, nil, []string{`gateway.agentSessions.maxHeld=0`}); err == nil {
		t.Error("gateway.agentSessions.maxHeld=0 accepted")
	}
}

// TestGatewaySessionActivityPolicy: the gateway's ServiceAccount may change only the activity
// annotation of an AgentSession, to an RFC 3339 time; not its spec, labels, other annotations,
// owners or finalizers, not its status, and it may not delete one; it may create only a pool
// conversation's session as sessionroute.PoolSession builds it (TestGatewayCreatesPoolSessionPolicy).
func TestGatewaySessionActivityPolicy(t *testing.T) {
	objs, err := render(t, nil, []string{`controller={"agentSessions":{"enabled":true}}`})
	if err != nil {
		t.Fatal(err)
	}
	p := renderedPolicy(t, objs, "nn-neuronetes-gateway-session-activity")
	if m := p.Spec.MatchConditions; len(m) != 1 || m[0].Expression != `request.userInfo.username == "system:serviceaccount:neuronetes-system:nn-neuronetes-gateway"` {
		t.Fatalf("match conditions %+v: the policy must bind the gateway's ServiceAccount", m)
	}
	const act = "session.neuronetes.io/last-activity"
	sess := func(mut func(meta, spec map[string]any)) map[string]any {
		meta := map[string]any{"name": "s", "namespace": "team-a", "labels": map[string]any{"a": "b"},
			"annotations":     map[string]any{"other": "x", act: "2026-01-01T00:00:00Z"},
			"ownerReferences": []any{}, "finalizers": []any{}}
		spec := map[string]any{"classRef": map[string]any{"name": "demo"}, "idleTimeout": "10m"}
		if mut != nil {
			mut(meta, spec)
		}
		return map[string]any{"metadata": meta, "spec": spec}
	}
	setAnn := func(k, v string) func(meta, spec map[string]any) {
		return func(meta, _ map[string]any) { meta["annotations"].(map[string]any)[k] = v }
	}
	update := map[string]any{"operation": "UPDATE", "namespace": "team-a", "name": "s", "resource": map[string]any{"resource": "agentsessions"}}
	for _, tc := range []struct {
		name     string
		req      map[string]any
		obj, old map[string]any
		want     bool
	}{
		{"activity set", update, sess(setAnn(act, "2026-01-01T00:01:02.123456789Z")), sess(nil), true},
		{"activity added", update, sess(setAnn(act, "2026-01-01T00:01:02Z")),
			sess(func(meta, _ map[string]any) { delete(meta["annotations"].(map[string]any), act) }), true},
		{"activity not a time", update, sess(setAnn(act, "tomorrow")), sess(nil), false},
		{"another annotation changed", update, sess(setAnn("other", "y")), sess(nil), false},
		{"an annotation added", update, sess(setAnn("checkpoint.neuronetes.io/restore-from", "team-b/x")), sess(nil), false},
		{"an annotation removed", update, sess(func(meta, _ map[string]any) { delete(meta["annotations"].(map[string]any), "other") }), sess(nil), false},
		{"spec.suspend set", update, sess(func(_, spec map[string]any) { spec["suspend"] = true }), sess(nil), false},
		{"idle timeout changed", update, sess(func(_, spec map[string]any) { spec["idleTimeout"] = "1000h" }), sess(nil), false},
		{"label changed", update, sess(func(meta, _ map[string]any) { meta["labels"] = map[string]any{"a": "c"} }), sess(nil), false},
		{"finalizer added", update, sess(func(meta, _ map[string]any) { meta["finalizers"] = []any{"x"} }), sess(nil), false},
		{"owner added", update, sess(func(meta, _ map[string]any) {
			meta["ownerReferences"] = []any{map[string]any{"kind": "X", "name": "y"}}
		}), sess(nil), false},
		{"status written", map[string]any{"operation": "UPDATE", "namespace": "team-a", "name": "s", "subResource": "status",
			"resource": map[string]any{"resource": "agentsessions"}}, sess(nil), sess(nil), false},
		{"session deleted", map[string]any{"operation": "DELETE", "namespace": "team-a", "name": "s", "resource": map[string]any{"resource": "agentsessions"}},
			nil, sess(nil), false},
		{"session created", map[string]any{"operation": "CREATE", "namespace": "team-a", "name": "s", "resource": map[string]any{"resource": "agentsessions"}},
			sess(nil), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, msg := admitsRequest(t, p, tc.req, tc.obj, tc.old)
			if ok != tc.want {
				t.Fatalf("admitted %v (%s), want %v", ok, msg, tc.want)
			}
		})
	}
}

// TestGatewayCreatesPoolSessionPolicy: the gateway may create an AgentSession only as the session
// of a pool's conversation: labelled with the pool alone, controlled by that AgentPool alone
// (no blockOwnerDeletion), named <pool, cut>-<16 hex>, with an idle timeout and no suspend,
// RuntimeClass, annotations or finalizers.
func TestGatewayCreatesPoolSessionPolicy(t *testing.T) {
	objs, err := render(t, nil, []string{`controller={"agentSessions":{"enabled":true}}`})
	if err != nil {
		t.Fatal(err)
	}
	p := renderedPolicy(t, objs, "nn-neuronetes-gateway-session-activity")
	long := "a-very-long-pool-name-that-is-cut-at-33-characters"
	sess := func(name, pool string, mut func(meta, spec map[string]any)) map[string]any {
		meta := map[string]any{"name": name, "namespace": "team-a", "labels": map[string]any{"session.neuronetes.io/pool": pool},
			"ownerReferences": []any{map[string]any{"apiVersion": "neuronetes.io/v1alpha1", "kind": "AgentPool", "name": pool, "uid": "u1", "controller": true}}}
		spec := map[string]any{"classRef": map[string]any{"name": "demo"}, "idleTimeout": "1m0s", "workspaceSizeLimit": "64Mi"}
		if mut != nil {
			mut(meta, spec)
		}
		return map[string]any{"metadata": meta, "spec": spec}
	}
	owner := func(k string, v any) func(meta, _ map[string]any) {
		return func(meta, _ map[string]any) { meta["ownerReferences"].([]any)[0].(map[string]any)[k] = v }
	}
	create := func(name string) map[string]any {
		return map[string]any{"operation": "CREATE", "namespace": "team-a", "name": name, "resource": map[string]any{"resource": "agentsessions"}}
	}
	const n = "chat-0123456789abcdef"
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want bool
	}{
		{"as the gateway builds it", sess(n, "chat", nil), true},
		{"long pool name cut", sess(long[:33]+"-0123456789abcdef", long, nil), true},
		{"v1alpha1.PoolSessionName of a long pool", sess(v1alpha1.PoolSessionName(long, "k"), long, nil), true},
		{"v1alpha1.PoolSessionName of a dotted pool", sess(v1alpha1.PoolSessionName("team.chat", "k"), "team.chat", nil), true},
		{"no workspace limit", sess(n, "chat", func(_, spec map[string]any) { delete(spec, "workspaceSizeLimit") }), true},
		{"no pool label", sess(n, "chat", func(meta, _ map[string]any) { meta["labels"] = map[string]any{} }), false},
		{"another label too", sess(n, "chat", func(meta, _ map[string]any) { meta["labels"].(map[string]any)["x"] = "y" }), false},
		{"owner is another pool", sess(n, "chat", owner("name", "other")), false},
		{"owner is another kind", sess(n, "chat", owner("kind", "AgentClass")), false},
		{"owner of another group", sess(n, "chat", owner("apiVersion", "evil.io/v1")), false},
		{"owner not the controller", sess(n, "chat", owner("controller", false)), false},
		{"blockOwnerDeletion", sess(n, "chat", owner("blockOwnerDeletion", true)), false},
		{"two owners", sess(n, "chat", func(meta, _ map[string]any) {
			meta["ownerReferences"] = append(meta["ownerReferences"].([]any), map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "u2"})
		}), false},
		{"no owner", sess(n, "chat", func(meta, _ map[string]any) { delete(meta, "ownerReferences") }), false},
		{"name of another pool", sess("other-0123456789abcdef", "chat", nil), false},
		{"name without the hash", sess("chat-victim", "chat", nil), false},
		{"name with a short hash", sess("chat-0123", "chat", nil), false},
		{"no idle timeout", sess(n, "chat", func(_, spec map[string]any) { delete(spec, "idleTimeout") }), false},
		{"suspend set", sess(n, "chat", func(_, spec map[string]any) { spec["suspend"] = true }), false},
		{"own RuntimeClass", sess(n, "chat", func(_, spec map[string]any) { spec["runtimeClassName"] = "kata" }), false},
		{"an annotation", sess(n, "chat", func(meta, _ map[string]any) {
			meta["annotations"] = map[string]any{"checkpoint.neuronetes.io/restore-from": "team-b/x"}
		}), false},
		{"a finalizer", sess(n, "chat", func(meta, _ map[string]any) { meta["finalizers"] = []any{"x"} }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.obj["metadata"].(map[string]any)["name"].(string)
			ok, msg := admitsRequest(t, p, create(name), tc.obj, nil)
			if ok != tc.want {
				t.Fatalf("admitted %v (%s), want %v", ok, msg, tc.want)
			}
		})
	}
}
