package helm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func sorted(l []string) []string { return slices.Sorted(slices.Values(l)) }

// secretRights lists "<kind> <namespace> <verb>" for every rule of the objects bound to account
// (by name suffix) that grants a verb on Secrets with no resourceNames.
func secretRights(objs []object, account string) []string {
	var out []string
	for _, o := range objs {
		if (o.kind() != "ClusterRole" && o.kind() != "Role") || !strings.Contains(o.name(), "-"+account) {
			continue
		}
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
			if rulesGrant(o, "secrets", verb) {
				out = append(out, fmt.Sprintf("%s %v %s", o.kind(), get(o, "metadata", "namespace"), verb))
			}
		}
	}
	return out
}

// TestChartModelSourceCopies: the node agent has no Secret right at all (no Role, nothing in its
// ClusterRole); it asks the controller's endpoint (--model-source-url on the webhook Service's
// model-sources port) with a projected token of audience neuronetes.io/model-sources, trusting
// the webhook configuration's caBundle (get of that one object). The controller serves the
// endpoint (--model-source-addr, --model-source-node-agent naming the node agents'
// ServiceAccount), may create TokenReviews, holds no right on Roles, gets the source Secrets of
// the Models' namespaces (cluster-wide, or a Role in controller.watchNamespace) and writes copies
// in the release namespace only; controller.modelSourceNamespaces turns the cluster-wide get into
// one Role per listed namespace. The controller's NetworkPolicy admits the endpoint's port from
// the node agent pods only. Without the admission policies, the controller or the webhook nothing
// of this is rendered.
func TestChartModelSourceCopies(t *testing.T) {
	const (
		flag     = "--model-source-namespace=neuronetes-system"
		agentURL = "--model-source-url=https://nn-neuronetes-controller.neuronetes-system.svc:9405"
	)
	copyRole := []string{"Role neuronetes-system get", "Role neuronetes-system list", "Role neuronetes-system watch",
		"Role neuronetes-system create", "Role neuronetes-system update", "Role neuronetes-system delete", "Role neuronetes-system create"}
	for _, tc := range []struct {
		name       string
		set        []string
		copies     bool
		controller []string // Secret rights of the controller without resourceNames
	}{
		{"default", nil, true, append([]string{"ClusterRole <nil> get", "ClusterRole <nil> create",
			"ClusterRole <nil> get"}, copyRole...)}, // the second get: controller/apikeys, the gateway serves every namespace
		{"one watched namespace", []string{`controller={"watchNamespace":"team-a"}`, `gateway={"watchNamespaces":["team-a"]}`}, true,
			append([]string{"Role team-a create", "Role team-a get", "Role team-a get"}, copyRole...)},
		{"listed namespaces", []string{`controller={"modelSourceNamespaces":["team-a","team-b"]}`}, true,
			append([]string{"ClusterRole <nil> create", "Role team-a get", "Role team-b get", "ClusterRole <nil> get"}, copyRole...)},
		{"listed namespaces, gateway too", []string{`controller={"modelSourceNamespaces":["team-a","team-b"]}`, `gateway={"watchNamespaces":["team-a"]}`}, true,
			append([]string{"ClusterRole <nil> create", "Role team-a get", "Role team-b get", "Role team-a get"}, copyRole...)},
		{"other port", []string{`controller={"modelSourcePort":9555}`}, true, append([]string{"ClusterRole <nil> get", "ClusterRole <nil> create",
			"ClusterRole <nil> get"}, copyRole...)},
		{"no admission policies", []string{`rbac={"admissionPolicies":false}`}, false, []string{"Role neuronetes-system create", "ClusterRole <nil> get"}},
		{"no webhook", []string{`webhook={"enabled":false}`}, false, []string{"ClusterRole <nil> get"}},
		{"no controller", []string{`controller={"enabled":false}`, `webhook={"enabled":false}`, `gateway={"enabled":false}`}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			port := "9405"
			if tc.name == "other port" {
				port = "9555"
			}
			cr := find(objs, "ClusterRole", "nn-neuronetes-nodeagent")
			if cr == nil || strings.Contains(toJSON(cr["rules"]), `"secrets"`) {
				t.Errorf("node agent ClusterRole grants Secrets (or is missing): %s", toJSON(cr))
			}
			if agent := secretRights(objs, "nodeagent"); len(agent) != 0 {
				t.Errorf("node agent Secret rights %q rendered, want none", agent)
			}
			for _, o := range objs {
				if (o.kind() == "Role" || o.kind() == "RoleBinding") && strings.Contains(o.name(), "nodeagent") {
					t.Errorf("%s %s rendered: the node agent needs no Role", o.kind(), o.name())
				}
				if (o.kind() == "Role" || o.kind() == "ClusterRole") && strings.Contains(o.name(), "-controller") && strings.Contains(toJSON(o["rules"]), `"roles"`) {
					t.Errorf("controller %s %s has rights on Roles: %s", o.kind(), o.name(), toJSON(o["rules"]))
				}
			}
			wantCA := `{"apiGroups":["admissionregistration.k8s.io"],"resourceNames":["neuronetes-sidecar-injector"],"resources":["mutatingwebhookconfigurations"],"verbs":["get"]}`
			if got := strings.Contains(toJSON(cr["rules"]), wantCA); got != tc.copies {
				t.Errorf("node agent may get the webhook configuration: %v, want %v (%s)", got, tc.copies, toJSON(cr["rules"]))
			}
			ds := find(objs, "DaemonSet", "nn-neuronetes-nodeagent")
			na := args(container(ds, "nodeagent"))
			url := strings.Replace(agentURL, "9405", port, 1)
			if contains(na, url) != tc.copies || contains(na, "--model-source-ca-webhook=neuronetes-sidecar-injector") != tc.copies || slices.ContainsFunc(na, func(a string) bool { return strings.HasPrefix(a, "--model-source-namespace") }) {
				t.Errorf("node agent args %v: want %s and the CA webhook exactly when copies are made (%v)", na, url, tc.copies)
			}
			vols := toJSON(get(ds, "spec", "template", "spec", "volumes"))
			if got := strings.Contains(vols, `"serviceAccountToken":{"audience":"neuronetes.io/model-sources","expirationSeconds":3600,"path":"token"}`); got != tc.copies {
				t.Errorf("node agent projected token: %v, want %v (%s)", got, tc.copies, vols)
			}
			if dep := find(objs, "Deployment", "nn-neuronetes-controller"); dep != nil {
				a := args(container(dep, "controller"))
				for _, f := range []string{flag, "--model-source-addr=0.0.0.0:" + port, "--model-source-node-agent=neuronetes-system/nn-neuronetes-nodeagent"} {
					if contains(a, f) != tc.copies {
						t.Errorf("controller args %v: %s present %v, want %v", a, f, !tc.copies, tc.copies)
					}
				}
				if strings.Contains(toJSON(a), "reader-role") {
					t.Errorf("controller args %v keep a node agent Role", a)
				}
				svc := toJSON(get(find(objs, "Service", "nn-neuronetes-controller"), "spec", "ports"))
				if got := strings.Contains(svc, `"name":"model-sources","port":`+port); got != tc.copies {
					t.Errorf("controller Service ports %s: model-sources %v, want %v", svc, got, tc.copies)
				}
				cr := find(objs, "ClusterRole", "nn-neuronetes-controller")
				if got := rulesGrant(cr, "tokenreviews", "create"); got != tc.copies {
					t.Errorf("controller may create TokenReviews: %v, want %v", got, tc.copies)
				}
				if np := find(objs, "NetworkPolicy", "nn-neuronetes-controller"); np != nil {
					rule := ruleFor(np, "model-sources")
					if got := peerComponents(rule, "from"); (rule != nil) != tc.copies || (tc.copies && (!slices.Equal(got, []string{"neuronetes-system/node"}) ||
						!strings.Contains(toJSON(get(rule, "from")), `"neuronetes.io/node-pod":"nodeagent"`))) {
						t.Errorf("controller NetworkPolicy admits model-sources from %v (%s), want the node agent pods only when copies are made (%v)", got, toJSON(rule), tc.copies)
					}
				}
			}
			got := secretRights(objs, "controller")
			if !slices.Equal(sorted(got), sorted(tc.controller)) {
				t.Errorf("controller Secret rights\n%q\nwant\n%q", sorted(got), sorted(tc.controller))
			}
			if tc.copies {
				pol := find(objs, "ValidatingAdmissionPolicy", "nn-neuronetes-controller-writes")
				if !strings.Contains(toJSON(get(pol, "spec", "matchConstraints")), `"secrets"`) || !strings.Contains(toJSON(get(pol, "spec", "validations")), "model-src-") {
					t.Errorf("controller-writes policy does not confine the copies: %s", pol)
				}
			}
		})
	}
}

// TestChartModelSourceNamespacesRefusals: modelSourceNamespaces naming a namespace the controller
// does not watch is refused at render with a message naming both values; listing just the watched
// one is accepted.
func TestChartModelSourceNamespacesRefusals(t *testing.T) {
	if _, err := render(t, nil, []string{`controller={"watchNamespace":"team-a","modelSourceNamespaces":["team-a"]}`}); err != nil {
		t.Fatalf("the watched namespace listed alone: %v", err)
	}
	for _, set := range []string{
		`controller={"watchNamespace":"team-a","modelSourceNamespaces":["team-b"]}`,
		`controller={"watchNamespace":"team-a","modelSourceNamespaces":["team-a","team-b"]}`,
	} {
		_, err := render(t, nil, []string{set})
		if err == nil || !strings.Contains(err.Error(), "controller.modelSourceNamespaces") || !strings.Contains(err.Error(), "controller.watchNamespace=team-a") {
			t.Errorf("%s: %v, want a refusal naming controller.modelSourceNamespaces and controller.watchNamespace", set, err)
		}
	}
	if _, err := render(t, nil, []string{`controller={"modelSourceNamespaces":["Not_A_Namespace"]}`}); err == nil {
		t.Error("a modelSourceNamespaces entry that is no namespace name was accepted")
	}
}
