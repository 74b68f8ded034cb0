package helm_test

import (
	"testing"
)

// TestChartGatewaySessions: with controller.agentSessions.enabled the gateway gets
// --agent-sessions and its hold settings, and its ClusterRole get, list, watch and patch of
// agentsessions (nothing else of them); off (the default): none of it and no policy.
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
		for _, verb := range []string{"get", "list", "watch", "patch"} {
			if got := rulesGrant(role, "agentsessions", verb); got != tc.want {
				t.Errorf("%s: %s agentsessions granted %v, want %v", tc.name, verb, got, tc.want)
			}
		}
		for _, g := range []struct{ resource, verb string }{
			{"agentsessions", "update"}, {"agentsessions", "delete"}, {"agentsessions", "create"}, {"agentsessions/status", "patch"},
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
// owners or finalizers, not its status, and it may not create or delete one.
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
