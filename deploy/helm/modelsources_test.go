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

// TestChartModelSourceCopies: the node agent reads Model source credentials only from the
// controller's copies: its ClusterRole grants no Secret right, and the chart renders its Role in
// the release namespace without rules; the controller (--model-source-reader-role, with get and
// update of that one Role) keeps them at get of exactly the copies. Both run with
// --model-source-namespace=<release namespace>. The controller gets the source Secrets of the
// Models' namespaces (cluster-wide, or a Role in controller.watchNamespace) and writes copies in
// the release namespace only; controller.modelSourceNamespaces turns the cluster-wide get into one
// Role per listed namespace. Without the admission policies or without the controller nothing
// is copied and the node agent has no Secret right at all.
func TestChartModelSourceCopies(t *testing.T) {
	const flag = "--model-source-namespace=neuronetes-system"
	for _, tc := range []struct {
		name          string
		set           []string
		copies        bool
		controller    []string // Secret rights of the controller without resourceNames
		agentHasFlags bool
	}{
		{"default", nil, true, []string{"ClusterRole <nil> get", "ClusterRole <nil> create",
			"ClusterRole <nil> get", // controller/apikeys: the gateway serves every namespace
			"Role neuronetes-system get", "Role neuronetes-system list", "Role neuronetes-system watch",
			"Role neuronetes-system create", "Role neuronetes-system update", "Role neuronetes-system delete",
			"Role neuronetes-system create"}, true},
		{"one watched namespace", []string{`controller={"watchNamespace":"team-a"}`, `gateway={"watchNamespaces":["team-a"]}`}, true, []string{"Role team-a create",
			"Role team-a get", "Role team-a get",
			"Role neuronetes-system get", "Role neuronetes-system list", "Role neuronetes-system watch",
			"Role neuronetes-system create", "Role neuronetes-system update", "Role neuronetes-system delete",
			"Role neuronetes-system create"}, true},
		{"listed namespaces", []string{`controller={"modelSourceNamespaces":["team-a","team-b"]}`}, true, []string{"ClusterRole <nil> create",
			"Role team-a get", "Role team-b get",
			"ClusterRole <nil> get", // controller/apikeys: the gateway serves every namespace
			"Role neuronetes-system get", "Role neuronetes-system list", "Role neuronetes-system watch",
			"Role neuronetes-system create", "Role neuronetes-system update", "Role neuronetes-system delete",
			"Role neuronetes-system create"}, true},
		{"listed namespaces, gateway too", []string{`controller={"modelSourceNamespaces":["team-a","team-b"]}`, `gateway={"watchNamespaces":["team-a"]}`}, true, []string{"ClusterRole <nil> create",
			"Role team-a get", "Role team-b get", "Role team-a get",
			"Role neuronetes-system get", "Role neuronetes-system list", "Role neuronetes-system watch",
			"Role neuronetes-system create", "Role neuronetes-system update", "Role neuronetes-system delete",
			"Role neuronetes-system create"}, true},
		{"no admission policies", []string{`rbac={"admissionPolicies":false}`}, false, []string{"Role neuronetes-system create", "ClusterRole <nil> get"}, false},
		{"no controller", []string{`controller={"enabled":false}`, `webhook={"enabled":false}`, `gateway={"enabled":false}`}, false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			if cr := find(objs, "ClusterRole", "nn-neuronetes-nodeagent"); cr == nil || strings.Contains(toJSON(cr["rules"]), `"secrets"`) {
				t.Errorf("node agent ClusterRole grants Secrets (or is missing): %s", toJSON(cr))
			}
			if agent := secretRights(objs, "nodeagent"); len(agent) != 0 {
				t.Errorf("node agent Secret rights %q rendered, want none (the controller names the copies)", agent)
			}
			const readerRole = "nn-neuronetes-nodeagent-model-sources"
			role := find(objs, "Role", readerRole)
			if (role != nil) != tc.copies || (role != nil && role["rules"] != nil) {
				t.Errorf("Role %s: %s; want it (without rules) exactly when copies are made (%v)", readerRole, toJSON(role), tc.copies)
			}
			if dep := find(objs, "Deployment", "nn-neuronetes-controller"); dep != nil {
				a := args(container(dep, "controller"))
				if contains(a, "--model-source-reader-role="+readerRole) != tc.copies {
					t.Errorf("controller args %v: --model-source-reader-role=%s present %v, want %v", a, readerRole, !tc.copies, tc.copies)
				}
				var roleRights []string
				for _, o := range objs {
					if o.kind() == "Role" || o.kind() == "ClusterRole" {
						if strings.Contains(o.name(), "-controller") && strings.Contains(toJSON(o["rules"]), `"roles"`) {
							roleRights = append(roleRights, toJSON(o["rules"]))
						}
					}
				}
				wantRoles := 0
				if tc.copies {
					wantRoles = 1
				}
				if len(roleRights) != wantRoles || (wantRoles == 1 && !strings.Contains(roleRights[0], `"resourceNames":["`+readerRole+`"],"resources":["roles"],"verbs":["get","update"]`)) {
					t.Errorf("controller rights on Roles %v, want get and update of %s only (%d)", roleRights, readerRole, wantRoles)
				}
			}
			na := args(container(find(objs, "DaemonSet", "nn-neuronetes-nodeagent"), "nodeagent"))
			if contains(na, flag) != tc.agentHasFlags {
				t.Errorf("node agent args %v: %s present %v, want %v", na, flag, !tc.agentHasFlags, tc.agentHasFlags)
			}
			if dep := find(objs, "Deployment", "nn-neuronetes-controller"); dep != nil {
				if a := args(container(dep, "controller")); contains(a, flag) != tc.copies {
					t.Errorf("controller args %v: %s present %v, want %v", a, flag, !tc.copies, tc.copies)
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
