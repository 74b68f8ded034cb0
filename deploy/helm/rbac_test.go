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

// gatewayRoles are the Roles and ClusterRoles bound to the gateway's ServiceAccount (by the
// bindings' subjects).
func gatewayRoles(objs []object) []object {
	const sa = "nn-neuronetes-gateway"
	bound := map[string]bool{}
	for _, o := range objs {
		if o.kind() != "RoleBinding" && o.kind() != "ClusterRoleBinding" {
			continue
		}
		for _, s := range asList(o["subjects"]) {
			if get(s, "name") == sa {
				bound[fmt.Sprint(get(o, "roleRef", "kind"), "/", get(o, "metadata", "namespace"), "/", get(o, "roleRef", "name"))] = true
			}
		}
	}
	var out []object
	for _, o := range objs {
		if (o.kind() == "Role" || o.kind() == "ClusterRole") && bound[fmt.Sprint(o.kind(), "/", get(o, "metadata", "namespace"), "/", o.name())] {
			out = append(out, o)
		}
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

// TestChartGatewayHoldsNoSecretRight: whether the gateway serves every namespace or listed ones,
// no Role or ClusterRole bound to its ServiceAccount names Secrets at all (any verb, any name):
// it reads the API-key hashes the controller publishes, both run with
// --api-key-hashes-namespace=<release namespace>, and the gateway may read ConfigMaps there only.
// gateway.guardrails.webhookSecrets=true alone adds get (no list or watch) for webhook credentials.
func TestChartGatewayHoldsNoSecretRight(t *testing.T) {
	const hashes = "--api-key-hashes-namespace=neuronetes-system"
	tests := []struct {
		name        string
		set         []string
		wantNS      string // --api-key-namespaces of the controller
		wantRuleNS  []string
		secretVerbs string
	}{
		{"all namespaces", nil, "", []string{"<nil>"}, ""},
		{"two namespaces", []string{`gateway={"watchNamespaces":["team-a","team-b"]}`}, "team-a,team-b", []string{"team-a", "team-b"}, ""},
		{"guardrail webhook credentials", []string{`gateway={"guardrails":{"webhookSecrets":true}}`}, "", []string{"<nil>"}, "[get]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := render(t, nil, tt.set)
			if err != nil {
				t.Fatal(err)
			}
			roles := gatewayRoles(objs)
			var ruleNS []string
			secretVerbs := ""
			configMaps := false
			for _, o := range roles {
				ns := fmt.Sprint(get(o, "metadata", "namespace"))
				for _, r := range asList(o["rules"]) {
					res := asList(get(r, "resources"))
					if hasValue(res, "secrets") {
						secretVerbs += fmt.Sprint(get(r, "verbs"))
					}
					if hasValue(res, "configmaps") {
						configMaps = ns == "neuronetes-system" && fmt.Sprint(get(r, "verbs")) == "[get list watch]" && len(res) == 1
					}
					if hasValue(res, "agentpools") {
						ruleNS = append(ruleNS, ns)
					}
				}
			}
			if secretVerbs != tt.secretVerbs {
				t.Errorf("gateway Secret rights %q, want %q", secretVerbs, tt.secretVerbs)
			}
			if !configMaps {
				t.Errorf("the gateway may not get, list and watch ConfigMaps of the release namespace (and only those)")
			}
			if strings.Join(ruleNS, ",") != strings.Join(tt.wantRuleNS, ",") {
				t.Errorf("gateway routing rights in %v, want %v", ruleNS, tt.wantRuleNS)
			}
			gw := args(container(find(objs, "Deployment", "nn-neuronetes-gateway"), "gateway"))
			ctl := args(container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller"))
			if !contains(gw, hashes) || !contains(ctl, hashes) {
				t.Errorf("gateway args %v and controller args %v: want %s in both", gw, ctl, hashes)
			}
			hasNS := contains(ctl, "--api-key-namespaces="+tt.wantNS)
			if (tt.wantNS != "") != hasNS {
				t.Errorf("controller args %v: want --api-key-namespaces=%q", ctl, tt.wantNS)
			}
		})
	}
	// Without auth the gateway reads no key at all, and nothing is published.
	objs, err := render(t, nil, []string{`gateway={"auth":"none","anonymousNamespace":"demo"}`})
	if err != nil {
		t.Fatal(err)
	}
	if a := args(container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller")); contains(a, hashes) {
		t.Errorf("auth=none: controller args %v publish API-key hashes", a)
	}
	// API keys need the controller that publishes them.
	if _, err := render(t, nil, []string{`controller={"enabled":false}`, `webhook={"enabled":false}`}); err == nil || !strings.Contains(err.Error(), "controller.enabled") {
		t.Errorf("gateway.auth=required without the controller: %v, want a refusal naming controller.enabled", err)
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

// namespacedResources are resources the controller holds rights on that live in a namespace.
var namespacedResources = []string{"pods", "services", "configmaps", "secrets", "events", "networkpolicies",
	"resourceclaimtemplates", "agentpools", "agentclasses", "models", "toolbindings", "agentcheckpoints",
	"agentrollouts", "agentpools/scale", "agentpools/status", "leases", "roles", "tenants"}

// TestChartControllerWatchNamespaceNarrowsRights: with controller.watchNamespace no ClusterRole
// bound to the controller grants any right on a namespaced resource; those rights are a Role in
// the watched namespace, plus the release namespace's reads (gateway pods, the price table,
// Events); the ClusterRole keeps Nodes and DeviceClasses reads and the webhook configuration by
// name. The controller runs with --namespace, which confines its manager cache. Without the
// value the ClusterRole holds the namespaced rights (the gateway's API-key rules are listed
// namespaces here, so they are Roles too).
func TestChartControllerWatchNamespaceNarrowsRights(t *testing.T) {
	gw := `gateway={"watchNamespaces":["team-a"]}`
	clusterNamespaced := func(objs []object) []string {
		var out []string
		bound := map[string]bool{}
		for _, o := range objs {
			if o.kind() != "ClusterRoleBinding" {
				continue
			}
			for _, s := range asList(o["subjects"]) {
				if get(s, "name") == "nn-neuronetes-controller" {
					bound[fmt.Sprint(get(o, "roleRef", "name"))] = true
				}
			}
		}
		for _, o := range objs {
			if o.kind() != "ClusterRole" || !bound[o.name()] {
				continue
			}
			for _, r := range asList(o["rules"]) {
				for _, res := range asList(get(r, "resources")) {
					if hasValue(toAny(namespacedResources), fmt.Sprint(res)) {
						out = append(out, fmt.Sprintf("%s %v %v", o.name(), res, get(r, "verbs")))
					}
				}
			}
		}
		return out
	}
	wide, err := render(t, nil, []string{gw})
	if err != nil {
		t.Fatal(err)
	}
	if got := clusterNamespaced(wide); len(got) == 0 {
		t.Fatal("without controller.watchNamespace the ClusterRole holds no namespaced right: the check below cannot fail")
	}
	objs, err := render(t, nil, []string{gw, `controller={"watchNamespace":"team-a"}`})
	if err != nil {
		t.Fatal(err)
	}
	if got := clusterNamespaced(objs); len(got) != 0 {
		t.Errorf("controller.watchNamespace=team-a: cluster-wide rights on namespaced resources remain:\n%s", strings.Join(got, "\n"))
	}
	cr := toJSON(find(objs, "ClusterRole", "nn-neuronetes-controller")["rules"])
	for _, res := range []string{`"nodes"`, `"deviceclasses"`, `"mutatingwebhookconfigurations"`} {
		if !strings.Contains(cr, res) {
			t.Errorf("ClusterRole lacks %s: %s", res, cr)
		}
	}
	role := find(objs, "Role", "nn-neuronetes-controller")
	if role == nil || get(role, "metadata", "namespace") != "team-a" || !rulesGrant(role, "pods", "create") || !rulesGrant(role, "agentpools", "watch") {
		t.Errorf("no Role in team-a with the pool rights: %s", toJSON(role))
	}
	rel := find(objs, "Role", "nn-neuronetes-controller-release")
	if rel == nil || get(rel, "metadata", "namespace") != "neuronetes-system" || !rulesGrant(rel, "pods", "list") || rulesGrant(rel, "pods", "create") {
		t.Errorf("release-namespace Role: %s, want pods get/list only", toJSON(rel))
	}
	a := args(container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller"))
	for _, want := range []string{"--namespace=team-a", "--rollout-gateway-namespace=neuronetes-system"} {
		if !contains(a, want) {
			t.Errorf("controller args %v lack %s", a, want)
		}
	}
}

func toAny(l []string) []any {
	out := make([]any, len(l))
	for i, s := range l {
		out[i] = s
	}
	return out
}
