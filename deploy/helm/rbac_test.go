package helm_test

import (
	"fmt"
	"strings"
	"testing"
)

// rulesGrant reports whether any rule of o grants verb on resource (with no resourceNames).
func rulesGrant(o object, resource, verb string) bool {
	rules, _ := o["rules"].([]any)
	for _, r := range rules {
		if names, _ := get(r, "resourceNames").([]any); len(names) > 0 {
			continue
		}
		res, _ := get(r, "resources").([]any)
		verbs, _ := get(r, "verbs").([]any)
		if hasValue(res, resource) && hasValue(verbs, verb) {
			return true
		}
	}
	return false
}

func hasValue(l []any, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// TestChartGatewaySecretsOnlyInWatchedNamespaces: with gateway.watchNamespaces the gateway reads
// Secrets through Roles in those namespaces only; no ClusterRole grants it Secrets.
func TestChartGatewaySecretsOnlyInWatchedNamespaces(t *testing.T) {
	tests := []struct {
		name            string
		set             []string
		wantRoleNS      []string
		wantClusterwide bool
	}{
		{"all namespaces", nil, nil, true},
		{"two namespaces", []string{`gateway={"watchNamespaces":["team-a","team-b"]}`}, []string{"team-a", "team-b"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := render(t, nil, tt.set)
			if err != nil {
				t.Fatal(err)
			}
			var roleNS []string
			clusterwide := false
			for _, o := range objs {
				if !strings.HasSuffix(o.name(), "-gateway") || !rulesGrant(o, "secrets", "list") {
					continue
				}
				switch o.kind() {
				case "ClusterRole":
					clusterwide = true
				case "Role":
					roleNS = append(roleNS, fmt.Sprint(get(o, "metadata", "namespace")))
				}
			}
			if clusterwide != tt.wantClusterwide || strings.Join(roleNS, ",") != strings.Join(tt.wantRoleNS, ",") {
				t.Errorf("gateway Secret rights: cluster-wide %v, Roles in %v; want %v, %v", clusterwide, roleNS, tt.wantClusterwide, tt.wantRoleNS)
			}
			if !tt.wantClusterwide && countNamed(objs, "RoleBinding", "nn-neuronetes-gateway") != len(tt.wantRoleNS) {
				t.Errorf("want one RoleBinding per watched namespace")
			}
		})
	}
}

func countNamed(objs []object, kind, name string) int {
	n := 0
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			n++
		}
	}
	return n
}

// TestChartControllerCannotCreateWebhookConfigurations: the chart owns the
// MutatingWebhookConfiguration; the controller may only get and patch that one by name, and runs
// with --webhook-config-external so it never tries to create one.
func TestChartControllerCannotCreateWebhookConfigurations(t *testing.T) {
	objs, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	args := ""
	for _, o := range objs {
		if o.kind() == "ClusterRole" && rulesGrant(o, "mutatingwebhookconfigurations", "create") {
			t.Errorf("ClusterRole %s may create MutatingWebhookConfigurations", o.name())
		}
		if o.kind() == "Deployment" && strings.HasSuffix(o.name(), "-controller") {
			args = fmt.Sprint(get(o, "spec", "template", "spec", "containers", 0, "args"))
		}
	}
	if !strings.Contains(args, "--webhook-config-external=true") {
		t.Errorf("controller args %s lack --webhook-config-external=true", args)
	}
	if countNamed(objs, "MutatingWebhookConfiguration", "neuronetes-sidecar-injector") != 1 {
		t.Errorf("the chart renders no MutatingWebhookConfiguration")
	}
}

// TestChartAdmissionPolicies: each policy matches exactly the ServiceAccounts of the release it
// names (the node-writes policy both the driver's and the node agent's, each limited to its own
// node) and is bound with Deny; rbac.admissionPolicies=false renders none.
func TestChartAdmissionPolicies(t *testing.T) {
	objs, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const sa = "system:serviceaccount:neuronetes-system:"
	want := map[string][]string{
		"nn-neuronetes-controller-writes": {sa + "nn-neuronetes-controller"},
		"nn-neuronetes-node-writes":       {sa + "nn-neuronetes-driver", sa + "nn-neuronetes-nodeagent"},
		// Matches everyone but the controller (the condition names it with !=).
		"nn-neuronetes-agentpool-pods": {sa + "nn-neuronetes-controller"},
	}
	for _, o := range objs {
		switch o.kind() {
		case "ValidatingAdmissionPolicy":
			users, ok := want[o.name()]
			cond := fmt.Sprint(get(o, "spec", "matchConditions", 0, "expression"))
			if !ok || strings.Count(cond, "system:serviceaccount:") != len(users) || get(o, "spec", "failurePolicy") != "Fail" {
				t.Errorf("policy %s: matchCondition %s, failurePolicy %v; want exactly %q and Fail", o.name(), cond, get(o, "spec", "failurePolicy"), users)
			}
			for _, u := range users {
				if !strings.Contains(cond, `"`+u+`"`) {
					t.Errorf("policy %s: matchCondition %s lacks %q", o.name(), cond, u)
				}
			}
			delete(want, o.name())
		case "ValidatingAdmissionPolicyBinding":
			if a := fmt.Sprint(get(o, "spec", "validationActions")); a != "[Deny]" {
				t.Errorf("binding %s: validationActions %s, want [Deny]", o.name(), a)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("policies not rendered: %v", want)
	}
	off, err := render(t, nil, []string{`rbac={"admissionPolicies":false}`})
	if err != nil {
		t.Fatal(err)
	}
	if n := countKind(off, "ValidatingAdmissionPolicy"); n != 0 {
		t.Errorf("rbac.admissionPolicies=false rendered %d policies", n)
	}
}
