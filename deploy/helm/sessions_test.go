package helm_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/neuronetes/neuronetes/controller/agentnetpol"
)

// renderedPolicy returns the ValidatingAdmissionPolicy name of objs.
func renderedPolicy(t *testing.T, objs []object, name string) *admissionregv1.ValidatingAdmissionPolicy {
	t.Helper()
	raw, _ := json.Marshal(find(objs, "ValidatingAdmissionPolicy", name))
	var p admissionregv1.ValidatingAdmissionPolicy
	if err := json.Unmarshal(raw, &p); err != nil || len(p.Spec.Validations) == 0 {
		t.Fatalf("policy %s: %v %s", name, err, raw)
	}
	return &p
}

// TestChartAgentSessions: controller.agentSessions.enabled passes --agent-sessions and the
// restore host image, and grants exactly the session controller's rights (sessions read, their
// status written, ServiceAccounts created, patched and deleted and PodDisruptionBudgets created
// (the admission policy narrows both), RuntimeClasses read one at a time); off (the default)
// renders none of them.
func TestChartAgentSessions(t *testing.T) {
	off, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	on, err := render(t, nil, []string{`controller={"agentSessions":{"enabled":true,"restoreHostImage":"pause:9"}}`})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		objs []object
		want bool
	}{{"default", off, false}, {"enabled", on, true}} {
		a := args(container(find(tc.objs, "Deployment", "nn-neuronetes-controller"), "controller"))
		if contains(a, "--agent-sessions") != tc.want || contains(a, "--session-restore-host-image=pause:9") != tc.want {
			t.Errorf("%s: controller args %v", tc.name, a)
		}
		// Interrupted pool pods restore into the same host image with sessions off too.
		if !tc.want && !contains(a, "--session-restore-host-image=registry.k8s.io/pause:3.10") {
			t.Errorf("%s: no default restore host image in controller args %v", tc.name, a)
		}
		role := find(tc.objs, "ClusterRole", "nn-neuronetes-controller")
		for _, g := range []struct{ resource, verb string }{
			{"agentsessions", "get"}, {"agentsessions", "list"}, {"agentsessions", "watch"},
			{"agentsessions/status", "patch"}, {"serviceaccounts", "create"}, {"runtimeclasses", "get"}, {"agentcheckpoints", "delete"},
			// The warm session pool's ServiceAccounts: deleted with their pod, patched to the session on a claim.
			{"serviceaccounts", "patch"}, {"serviceaccounts", "delete"},
			// The session's PodDisruptionBudget: created only (the garbage collector deletes it).
			{"poddisruptionbudgets", "create"},
			// A pool's sessions past spec.sessions.retention (confined by controller-session-deletes).
			{"agentsessions", "delete"},
		} {
			if got := rulesGrant(role, g.resource, g.verb); got != tc.want {
				t.Errorf("%s: %s %s granted %v, want %v", tc.name, g.verb, g.resource, got, tc.want)
			}
		}
		for _, g := range []struct{ resource, verb string }{
			{"agentsessions", "update"}, {"agentsessions", "create"}, {"serviceaccounts", "get"}, {"serviceaccounts", "update"},
			{"serviceaccounts", "list"}, {"runtimeclasses", "list"},
			{"poddisruptionbudgets", "get"}, {"poddisruptionbudgets", "list"}, {"poddisruptionbudgets", "update"}, {"poddisruptionbudgets", "patch"}, {"poddisruptionbudgets", "delete"},
		} {
			if rulesGrant(role, g.resource, g.verb) {
				t.Errorf("%s: the controller may %s %s", tc.name, g.verb, g.resource)
			}
		}
		rules := toJSON(renderedPolicy(t, tc.objs, "nn-neuronetes-controller-writes").Spec.MatchConstraints)
		if strings.Contains(rules, `"serviceaccounts"`) != tc.want {
			t.Errorf("%s: controller-writes matches ServiceAccounts: %v, want %v", tc.name, !tc.want, tc.want)
		}
		if strings.Contains(rules, `"poddisruptionbudgets"`) != tc.want {
			t.Errorf("%s: controller-writes matches PodDisruptionBudgets: %v, want %v", tc.name, !tc.want, tc.want)
		}
	}
}

// TestSessionControllerWritesPolicy: with sessions on, the controller-writes policy admits the
// session pods, ServiceAccounts and PodDisruptionBudgets controller/agentsession makes, and
// nothing a session could be used to smuggle: a pod or ServiceAccount of another name, owner or
// ServiceAccount, one with a token, an update taking over a foreign pod, a PodDisruptionBudget
// that could hold back any other pod's eviction (or is updated or deleted), and any write in a
// system namespace.
func TestSessionControllerWritesPolicy(t *testing.T) {
	objs, err := render(t, nil, []string{`controller={"agentSessions":{"enabled":true}}`})
	if err != nil {
		t.Fatal(err)
	}
	p := renderedPolicy(t, objs, "nn-neuronetes-controller-writes")
	owner := func(kind, name string) map[string]any {
		return map[string]any{"apiVersion": "neuronetes.io/v1alpha1", "kind": kind, "name": name, "uid": "u", "controller": true}
	}
	meta := func(name string, labels map[string]any, owners ...map[string]any) map[string]any {
		m := map[string]any{"name": name, "namespace": "team-a"}
		if labels != nil {
			m["labels"] = labels
		}
		if owners != nil {
			l := make([]any, len(owners))
			for i, o := range owners {
				l[i] = o
			}
			m["ownerReferences"] = l
		}
		return m
	}
	s1 := map[string]any{"neuronetes.io/session": "s1"}
	pod := func(name, sa string, labels map[string]any, owners ...map[string]any) map[string]any {
		return map[string]any{"metadata": meta(name, labels, owners...), "spec": map[string]any{"serviceAccountName": sa}}
	}
	sa := func(name string, labels map[string]any, automount any, owners ...map[string]any) map[string]any {
		o := map[string]any{"metadata": meta(name, labels, owners...)}
		if automount != nil {
			o["automountServiceAccountToken"] = automount
		}
		return o
	}
	np := func(name string, selector map[string]any, owners ...map[string]any) map[string]any {
		return map[string]any{"metadata": meta(name, s1, owners...), "spec": map[string]any{"podSelector": selector}}
	}
	only := func(session string) map[string]any {
		return map[string]any{"matchLabels": map[string]any{"neuronetes.io/session": session}}
	}
	every := map[string]any{"matchExpressions": []any{map[string]any{"key": "neuronetes.io/session", "operator": "Exists"}}}
	good := pod("s1-2", "session-s1", s1, owner("AgentSession", "s1"))
	const warmName = "warmpool-demo-abcde"
	warm := map[string]any{"neuronetes.io/session-warm-pool": "demo", "neuronetes.io/agentclass": "demo"}
	s1demo := map[string]any{"neuronetes.io/session": "s1", "neuronetes.io/agentclass": "demo"}
	warmGood := pod(warmName, warmName, warm, owner("AgentClass", "demo"))
	claimed := pod(warmName, warmName, s1demo, owner("AgentSession", "s1"))
	// A warm restore host (spec.sessions.warmRestoreHosts): a warm pod with one more label.
	const hostName = "warmpool-demo-hosts"
	hostGood := pod(hostName, hostName, map[string]any{"neuronetes.io/session-warm-pool": "demo", "neuronetes.io/agentclass": "demo", "neuronetes.io/session-warm-restore-host": "true"}, owner("AgentClass", "demo"))
	warmSA := sa(warmName, map[string]any{"neuronetes.io/session-warm-pool": "demo"}, false, owner("AgentClass", "demo"))
	adopted := sa(warmName, s1, false, owner("AgentSession", "s1"))
	warmNP := func(name string, selector map[string]any) map[string]any {
		return map[string]any{"metadata": meta(name, map[string]any{"neuronetes.io/session-warm-pool": "demo"}, owner("AgentClass", "demo")), "spec": map[string]any{"podSelector": selector}}
	}
	warmOnly := func(class string) map[string]any {
		return map[string]any{"matchLabels": map[string]any{"neuronetes.io/session-warm-pool": class}}
	}
	pdb := func(name string, labels, selector map[string]any, spec map[string]any, owners ...map[string]any) map[string]any {
		sp := map[string]any{"minAvailable": int64(1)}
		if selector != nil {
			sp["selector"] = selector
		}
		for k, v := range spec {
			sp[k] = v
		}
		return map[string]any{"metadata": meta(name, labels, owners...), "spec": sp}
	}
	goodPDB := pdb("session-s1", s1, only("s1"), nil, owner("AgentSession", "s1"))
	plain := pod("web", "default", nil)
	notController := owner("AgentSession", "s1")
	notController["controller"] = false
	for _, tc := range []struct {
		name, op, resource, ns string
		obj, old               map[string]any
		want                   bool
	}{
		{"the session's pod", "CREATE", "pods", "team-a", good, nil, true},
		{"the session's pod deleted", "DELETE", "pods", "team-a", nil, good, true},
		{"a session pod in kube-system", "CREATE", "pods", "kube-system", good, nil, false},
		{"a session pod running as another ServiceAccount", "CREATE", "pods", "team-a", pod("s1-2", "default", s1, owner("AgentSession", "s1")), nil, false},
		{"a session pod without a ServiceAccount", "CREATE", "pods", "team-a", map[string]any{"metadata": meta("s1-2", s1, owner("AgentSession", "s1")), "spec": map[string]any{}}, nil, false},
		{"a pod named for another session", "CREATE", "pods", "team-a", pod("s2-1", "session-s1", s1, owner("AgentSession", "s1")), nil, false},
		{"a session pod controlled by another session", "CREATE", "pods", "team-a", pod("s1-2", "session-s1", s1, owner("AgentSession", "s2")), nil, false},
		{"a session pod with a non-controller owner", "CREATE", "pods", "team-a", pod("s1-2", "session-s1", s1, notController), nil, false},
		{"a session-labelled pod without owner", "CREATE", "pods", "team-a", pod("s1-2", "session-s1", s1), nil, false},
		{"an unlabelled pod", "CREATE", "pods", "team-a", plain, nil, false},
		{"an update making a foreign pod a session's", "UPDATE", "pods", "team-a", good, plain, false},
		{"an update of the session's pod", "UPDATE", "pods", "team-a", good, good, true},
		{"the session's ServiceAccount", "CREATE", "serviceaccounts", "team-a", sa("session-s1", s1, false, owner("AgentSession", "s1")), nil, true},
		{"a ServiceAccount with a token", "CREATE", "serviceaccounts", "team-a", sa("session-s1", s1, true, owner("AgentSession", "s1")), nil, false},
		{"a ServiceAccount leaving the token to the default", "CREATE", "serviceaccounts", "team-a", sa("session-s1", s1, nil, owner("AgentSession", "s1")), nil, false},
		{"another ServiceAccount name", "CREATE", "serviceaccounts", "team-a", sa("default", s1, false, owner("AgentSession", "s1")), nil, false},
		{"a ServiceAccount of another session", "CREATE", "serviceaccounts", "team-a", sa("session-s1", s1, false, owner("AgentSession", "s2")), nil, false},
		{"a ServiceAccount without owner", "CREATE", "serviceaccounts", "team-a", sa("session-s1", s1, false), nil, false},
		{"a ServiceAccount updated", "UPDATE", "serviceaccounts", "team-a", sa("session-s1", s1, false, owner("AgentSession", "s1")), sa("session-s1", s1, false, owner("AgentSession", "s1")), false},
		{"the session's retired ServiceAccount deleted", "DELETE", "serviceaccounts", "team-a", nil, sa("session-s1", s1, false, owner("AgentSession", "s1")), true},
		{"a session-named ServiceAccount of another session deleted", "DELETE", "serviceaccounts", "team-a", nil, sa("session-s1", s1, false, owner("AgentSession", "s2")), false},
		{"a session-named ServiceAccount without owner deleted", "DELETE", "serviceaccounts", "team-a", nil, sa("session-s1", nil, false), false},
		{"a ServiceAccount of another name deleted", "DELETE", "serviceaccounts", "team-a", nil, sa("default", s1, false, owner("AgentSession", "s1")), false},
		{"a session ServiceAccount deleted in kube-system", "DELETE", "serviceaccounts", "kube-system", nil, sa("session-s1", s1, false, owner("AgentSession", "s1")), false},
		{"the session's NetworkPolicy", "CREATE", "networkpolicies", "team-a", np("session-s1", only("s1"), owner("AgentSession", "s1")), nil, true},
		{"a session NetworkPolicy selecting every session", "CREATE", "networkpolicies", "team-a", np("session-s1", every, owner("AgentSession", "s1")), nil, false},
		{"a session NetworkPolicy selecting every pod", "CREATE", "networkpolicies", "team-a", np("session-s1", map[string]any{}, owner("AgentSession", "s1")), nil, false},
		{"a session NetworkPolicy selecting another session", "CREATE", "networkpolicies", "team-a", np("session-s1", only("s2"), owner("AgentSession", "s1")), nil, false},
		{"a NetworkPolicy of another name", "CREATE", "networkpolicies", "team-a", np("allow-all", only("s1"), owner("AgentSession", "s1")), nil, false},
		{"a session NetworkPolicy without owner", "CREATE", "networkpolicies", "team-a", np("session-s1", only("s1")), nil, false},
		{"a session ServiceAccount in kube-system", "CREATE", "serviceaccounts", "kube-system", sa("session-s1", s1, false, owner("AgentSession", "s1")), nil, false},

		// The session's PodDisruptionBudget (a drain waits for the suspension).
		{"the session's PodDisruptionBudget", "CREATE", "poddisruptionbudgets", "team-a", goodPDB, nil, true},
		{"the session's PodDisruptionBudget with AlwaysAllow", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, only("s1"), map[string]any{"unhealthyPodEvictionPolicy": "AlwaysAllow"}, owner("AgentSession", "s1")), nil, true},
		{"a session PodDisruptionBudget in kube-system", "CREATE", "poddisruptionbudgets", "kube-system", goodPDB, nil, false},
		{"a session PodDisruptionBudget updated", "UPDATE", "poddisruptionbudgets", "team-a", goodPDB, goodPDB, false},
		{"a session PodDisruptionBudget deleted", "DELETE", "poddisruptionbudgets", "team-a", nil, goodPDB, false},
		{"a PodDisruptionBudget selecting every session", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, every, nil, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget selecting every pod", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, map[string]any{}, nil, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget without a selector", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, nil, nil, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget selecting another session", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, only("s2"), nil, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget selecting the session and more", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, map[string]any{"matchLabels": map[string]any{"neuronetes.io/session": "s1"}, "matchExpressions": []any{map[string]any{"key": "app", "operator": "Exists"}}}, nil, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget of another name", "CREATE", "poddisruptionbudgets", "team-a", pdb("web", s1, only("s1"), nil, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget of another session", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, only("s1"), nil, owner("AgentSession", "s2")), nil, false},
		{"a PodDisruptionBudget without owner", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, only("s1"), nil), nil, false},
		{"a PodDisruptionBudget labelled as a pool's", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", map[string]any{"neuronetes.io/pool": "p"}, only("s1"), nil, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget with minAvailable 2", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, only("s1"), map[string]any{"minAvailable": int64(2)}, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget with minAvailable 100%", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, only("s1"), map[string]any{"minAvailable": "100%"}, owner("AgentSession", "s1")), nil, false},
		{"a PodDisruptionBudget with maxUnavailable", "CREATE", "poddisruptionbudgets", "team-a", pdb("session-s1", s1, only("s1"), map[string]any{"maxUnavailable": int64(0)}, owner("AgentSession", "s1")), nil, false},

		// The warm session pool (AgentClass demo, spec.sessions.warmPoolSize).
		{"a warm pod", "CREATE", "pods", "team-a", warmGood, nil, true},
		{"a warm pod retired", "DELETE", "pods", "team-a", nil, warmGood, true},
		{"a warm pod in kube-system", "CREATE", "pods", "kube-system", warmGood, nil, false},
		{"a warm pod running as another ServiceAccount", "CREATE", "pods", "team-a", pod(warmName, "default", warm, owner("AgentClass", "demo")), nil, false},
		{"a warm pod running as a sibling's ServiceAccount", "CREATE", "pods", "team-a", pod(warmName, "warmpool-demo-other", warm, owner("AgentClass", "demo")), nil, false},
		{"a warm pod named for another class", "CREATE", "pods", "team-a", pod("warmpool-web-abcde", "warmpool-web-abcde", warm, owner("AgentClass", "demo")), nil, false},
		{"a warm pod of another class's owner", "CREATE", "pods", "team-a", pod(warmName, warmName, warm, owner("AgentClass", "web")), nil, false},
		{"a warm pod without owner", "CREATE", "pods", "team-a", pod(warmName, warmName, warm), nil, false},
		{"the claim of a warm pod", "UPDATE", "pods", "team-a", claimed, warmGood, true},
		{"an update of a claimed pod", "UPDATE", "pods", "team-a", claimed, claimed, true},
		{"a claimed pod moved to another session", "UPDATE", "pods", "team-a", pod(warmName, warmName, map[string]any{"neuronetes.io/session": "s2", "neuronetes.io/agentclass": "demo"}, owner("AgentSession", "s2")), claimed, false},
		{"a claim of a foreign pod", "UPDATE", "pods", "team-a", claimed, plain, false},
		{"a later pod of a session that claimed", "CREATE", "pods", "team-a", pod("s1-2", warmName, s1demo, owner("AgentSession", "s1")), nil, true},
		{"a session pod as another class's warm ServiceAccount", "CREATE", "pods", "team-a", pod("s1-2", "warmpool-web-abcde", s1demo, owner("AgentSession", "s1")), nil, false},
		{"a session pod as a warm ServiceAccount without its class label", "CREATE", "pods", "team-a", pod("s1-2", warmName, s1, owner("AgentSession", "s1")), nil, false},
		{"a session pod named neither for the session nor its ServiceAccount", "CREATE", "pods", "team-a", pod("web", warmName, s1demo, owner("AgentSession", "s1")), nil, false},
		{"a warm restore host", "CREATE", "pods", "team-a", hostGood, nil, true},
		{"the claim of a warm restore host by a resume", "UPDATE", "pods", "team-a", pod(hostName, hostName, s1demo, owner("AgentSession", "s1")), hostGood, true},
		{"a warm restore host claimed for another class's session", "UPDATE", "pods", "team-a", pod(hostName, hostName, map[string]any{"neuronetes.io/session": "s1", "neuronetes.io/agentclass": "web"}, owner("AgentSession", "s1")), hostGood, false},
		{"a warm ServiceAccount", "CREATE", "serviceaccounts", "team-a", warmSA, nil, true},
		{"a warm ServiceAccount with a token", "CREATE", "serviceaccounts", "team-a", sa(warmName, warm, true, owner("AgentClass", "demo")), nil, false},
		{"a warm ServiceAccount of another class's name", "CREATE", "serviceaccounts", "team-a", sa("warmpool-web-abcde", warm, false, owner("AgentClass", "demo")), nil, false},
		{"a warm ServiceAccount retired", "DELETE", "serviceaccounts", "team-a", nil, warmSA, true},
		{"a warm ServiceAccount handed to its session", "UPDATE", "serviceaccounts", "team-a", adopted, warmSA, true},
		{"an adopted ServiceAccount patched again", "UPDATE", "serviceaccounts", "team-a", adopted, adopted, true},
		{"an adopted ServiceAccount moved to another session", "UPDATE", "serviceaccounts", "team-a", sa(warmName, map[string]any{"neuronetes.io/session": "s2"}, false, owner("AgentSession", "s2")), adopted, false},
		{"an adopted ServiceAccount given a token", "UPDATE", "serviceaccounts", "team-a", sa(warmName, s1, true, owner("AgentSession", "s1")), warmSA, false},
		{"an adopted ServiceAccount retired by its session", "DELETE", "serviceaccounts", "team-a", nil, adopted, true},
		{"an adopted-looking ServiceAccount of another owner deleted", "DELETE", "serviceaccounts", "team-a", nil, sa(warmName, s1, false, owner("AgentSession", "s2")), false},
		{"a session's own ServiceAccount handed over", "UPDATE", "serviceaccounts", "team-a", sa("session-s1", s1, false, owner("AgentSession", "s2")), sa("session-s1", s1, false, owner("AgentSession", "s1")), false},
		{"the warm pool's NetworkPolicy", "CREATE", "networkpolicies", "team-a", warmNP("warmpool-demo", warmOnly("demo")), nil, true},
		{"a warm pool NetworkPolicy selecting another class's pods", "CREATE", "networkpolicies", "team-a", warmNP("warmpool-demo", warmOnly("web")), nil, false},
		{"a warm pool NetworkPolicy selecting every pod", "CREATE", "networkpolicies", "team-a", warmNP("warmpool-demo", map[string]any{}), nil, false},
		{"a warm pool NetworkPolicy of another name", "CREATE", "networkpolicies", "team-a", warmNP("allow-all", warmOnly("demo")), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := map[string]any{"operation": tc.op, "namespace": tc.ns, "resource": map[string]any{"resource": tc.resource}}
			ok, msg := admitsRequest(t, p, req, tc.obj, tc.old)
			if ok != tc.want {
				t.Fatalf("admitted %v (%s), want %v", ok, msg, tc.want)
			}
		})
	}
}

// TestChartSessionNetworkPolicy: with sessions on, the controller gets the session policy file,
// which the controller loads, which is default-deny both ways, admits ingress only from the
// gateway and the controller, and sends only to DNS, the tool proxy, the bundled Redis and
// networkPolicy.sessionEgressAllow (not the gateway, not agentEgressAllow). Sessions off, or
// network policies off: no file.
func TestChartSessionNetworkPolicy(t *testing.T) {
	const arg = "--session-network-policy-file=/etc/neuronetes/agent-networkpolicy/session-spec.yaml"
	for _, tc := range []struct {
		name string
		set  []string
		want bool
	}{
		{"sessions off", nil, false},
		{"network policies off", []string{`controller={"agentSessions":{"enabled":true}}`, `networkPolicy={"enabled":false}`}, false},
		{"sessions on", []string{`controller={"agentSessions":{"enabled":true}}`,
			`networkPolicy={"sessionEgressAllow":[{"cidr":"10.1.2.3/32","ports":[6379]}],"agentEgressAllow":[{"cidr":"10.9.9.9/32"}]}`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			a := args(container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller"))
			cm := find(objs, "ConfigMap", "nn-neuronetes-agent-networkpolicy")
			body, has := "", false
			if cm != nil {
				var s any
				s, has = get(cm, "data").(map[string]any)["session-spec.yaml"]
				body = fmt.Sprint(s)
			}
			if contains(a, arg) != tc.want || has != tc.want {
				t.Fatalf("arg %v, session-spec.yaml %v; want %v", contains(a, arg), has, tc.want)
			}
			if !tc.want {
				return
			}
			p := filepath.Join(t.TempDir(), "session-spec.yaml")
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := agentnetpol.LoadSpec(p); err != nil {
				t.Fatalf("the controller refuses the session policy: %v\n%s", err, body)
			}
			var spec map[string]any
			if err := yaml.Unmarshal([]byte(body), &spec); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(spec["policyTypes"]); got != "[Ingress Egress]" {
				t.Errorf("policyTypes %s", got)
			}
			var in, out []string
			for _, r := range spec["ingress"].([]any) {
				in = append(in, peerComponents(r, "from")...)
			}
			for _, r := range spec["egress"].([]any) {
				if isDNSRule(r) {
					out = append(out, "dns")
					continue
				}
				out = append(out, peerComponents(r, "to")...)
			}
			if want := "[neuronetes-system/gateway neuronetes-system/controller]"; fmt.Sprint(in) != want {
				t.Errorf("ingress from %v, want %s", in, want)
			}
			if want := "[dns neuronetes-system/dispatcher neuronetes-system/redis 10.1.2.3/32]"; fmt.Sprint(out) != want {
				t.Errorf("egress to %v, want %s", out, want)
			}
		})
	}
}

// TestSessionCheckpointDeletesPolicy: with sessions on, the controller may delete only a
// session's own AgentCheckpoint (labelled neuronetes.io/session=<s>, spec.agent session.<s>), not
// a pool's or another tenant object, nor one in a system namespace; sessions off: no policy.
func TestSessionCheckpointDeletesPolicy(t *testing.T) {
	off, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if find(off, "ValidatingAdmissionPolicy", "nn-neuronetes-controller-checkpoint-deletes") != nil {
		t.Fatal("the checkpoint-deletes policy is rendered with sessions off")
	}
	objs, err := render(t, nil, []string{`controller={"agentSessions":{"enabled":true}}`})
	if err != nil {
		t.Fatal(err)
	}
	if find(objs, "ValidatingAdmissionPolicyBinding", "nn-neuronetes-controller-checkpoint-deletes") == nil {
		t.Fatal("the checkpoint-deletes policy has no binding")
	}
	p := renderedPolicy(t, objs, "nn-neuronetes-controller-checkpoint-deletes")
	ck := func(labels map[string]any, agent string) map[string]any {
		meta := map[string]any{"name": "c", "namespace": "team-a"}
		if labels != nil {
			meta["labels"] = labels
		}
		spec := map[string]any{}
		if agent != "" {
			spec["agent"] = agent
		}
		return map[string]any{"metadata": meta, "spec": spec}
	}
	s1 := map[string]any{"neuronetes.io/session": "s1"}
	for _, tc := range []struct {
		name, ns string
		old      map[string]any
		want     bool
	}{
		{"the session's checkpoint", "team-a", ck(s1, "session.s1"), true},
		{"a pool's checkpoint", "team-a", ck(map[string]any{"neuronetes.io/pool": "p"}, "p"), false},
		{"an unlabelled checkpoint", "team-a", ck(nil, "session.s1"), false},
		{"a session label over another agent's checkpoint", "team-a", ck(s1, "agent-x"), false},
		{"another session's key", "team-a", ck(s1, "session.s2"), false},
		{"a checkpoint without spec.agent", "team-a", ck(s1, ""), false},
		{"a session checkpoint in kube-system", "kube-system", ck(s1, "session.s1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := map[string]any{"operation": "DELETE", "namespace": tc.ns, "name": "c", "resource": map[string]any{"resource": "agentcheckpoints"}}
			ok, msg := admitsRequest(t, p, req, nil, tc.old)
			if ok != tc.want {
				t.Fatalf("admitted %v (%s), want %v", ok, msg, tc.want)
			}
		})
	}
}

// TestSessionDeletesPolicy: with sessions on, the controller may delete only an AgentSession of
// an AgentPool through sessions (labelled session.neuronetes.io/pool=<p>, controlled by AgentPool
// <p>: spec.sessions.retention), not a tenant's own session, one labelled for another pool, one
// whose AgentPool owner is not its controller, nor one in a system namespace.
func TestSessionDeletesPolicy(t *testing.T) {
	off, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if find(off, "ValidatingAdmissionPolicy", "nn-neuronetes-controller-session-deletes") != nil {
		t.Fatal("the session-deletes policy is rendered with sessions off")
	}
	objs, err := render(t, nil, []string{`controller={"agentSessions":{"enabled":true}}`})
	if err != nil {
		t.Fatal(err)
	}
	if find(objs, "ValidatingAdmissionPolicyBinding", "nn-neuronetes-controller-session-deletes") == nil {
		t.Fatal("the session-deletes policy has no binding")
	}
	p := renderedPolicy(t, objs, "nn-neuronetes-controller-session-deletes")
	sess := func(pool string, owner map[string]any) map[string]any {
		meta := map[string]any{"name": "chat-0123456789abcdef", "namespace": "team-a"}
		if pool != "" {
			meta["labels"] = map[string]any{"session.neuronetes.io/pool": pool}
		}
		if owner != nil {
			meta["ownerReferences"] = []any{owner}
		}
		return map[string]any{"metadata": meta, "spec": map[string]any{"classRef": map[string]any{"name": "demo"}}}
	}
	owner := func(kind, apiVersion, name string, controller bool) map[string]any {
		return map[string]any{"kind": kind, "apiVersion": apiVersion, "name": name, "uid": "u", "controller": controller}
	}
	chat := owner("AgentPool", "neuronetes.io/v1alpha1", "chat", true)
	for _, tc := range []struct {
		name, ns string
		old      map[string]any
		want     bool
	}{
		{"a pool's session", "team-a", sess("chat", chat), true},
		{"a tenant's own session", "team-a", sess("", nil), false},
		{"labelled, no owner", "team-a", sess("chat", nil), false},
		{"labelled for another pool", "team-a", sess("other", chat), false},
		{"the pool an owner, not the controller", "team-a", sess("chat", owner("AgentPool", "neuronetes.io/v1alpha1", "chat", false)), false},
		{"an AgentPool of another group", "team-a", sess("chat", owner("AgentPool", "evil.io/v1", "chat", true)), false},
		{"a pool's session in kube-system", "kube-system", sess("chat", chat), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := map[string]any{"operation": "DELETE", "namespace": tc.ns, "name": "chat-0123456789abcdef", "resource": map[string]any{"resource": "agentsessions"}}
			ok, msg := admitsRequest(t, p, req, nil, tc.old)
			if ok != tc.want {
				t.Fatalf("admitted %v (%s), want %v", ok, msg, tc.want)
			}
		})
	}
}
