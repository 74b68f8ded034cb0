package helm_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// policies returns the rendered NetworkPolicies by "namespace/name".
func policies(objs []object) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		if o.kind() == "NetworkPolicy" {
			out[fmt.Sprint(get(o, "metadata", "namespace"))+"/"+o.name()] = o
		}
	}
	return out
}

// peerComponents lists each peer of rules[i].from (or .to) as "<namespace>/<component>", a
// namespace-only peer as "<namespace>/*", an ipBlock as its CIDR and a peer of agent pods in any
// namespace as "*/agents".
func peerComponents(rule any, key string) []string {
	var out []string
	peers, _ := get(rule, key).([]any)
	for _, p := range peers {
		ns := fmt.Sprint(get(p, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name"))
		switch {
		case get(p, "ipBlock") != nil:
			out = append(out, fmt.Sprint(get(p, "ipBlock", "cidr")))
		case get(p, "podSelector", "matchExpressions") != nil:
			out = append(out, "*/agents")
		case get(p, "podSelector") == nil:
			out = append(out, ns+"/*")
		default:
			out = append(out, ns+"/"+fmt.Sprint(get(p, "podSelector", "matchLabels", "app.kubernetes.io/component")))
		}
	}
	return out
}

// ruleFor returns the ingress rule of a policy that admits the port, or nil.
func ruleFor(np object, port any) any {
	rules, _ := get(np, "spec", "ingress").([]any)
	for _, r := range rules {
		ports, _ := get(r, "ports").([]any)
		for _, p := range ports {
			if fmt.Sprint(get(p, "port")) == fmt.Sprint(port) {
				return r
			}
		}
	}
	return nil
}

// TestChartNetworkPolicies: admin and metrics ports admit only the controller and the monitoring
// namespace, agents only the gateway and the dispatcher, and every agent namespace the chart knows
// gets the agent policy; networkPolicy.enabled=false renders none.
func TestChartNetworkPolicies(t *testing.T) {
	const rel = "neuronetes-system"
	ctrl := rel + "/controller"
	tests := []struct {
		name      string
		set       []string
		wantNone  bool
		agentNS   []string
		adminFrom []string
		egressIP  string
	}{
		{name: "disabled", set: []string{`networkPolicy={"enabled":false}`}, wantNone: true},
		{name: "defaults", agentNS: []string{rel}, adminFrom: []string{ctrl}},
		{name: "monitoring namespace", set: []string{`networkPolicy={"monitoringNamespace":"mon"}`},
			agentNS: []string{rel}, adminFrom: []string{ctrl, "mon/*"}},
		{name: "agent namespaces from every value, once each", set: []string{
			`controller={"watchNamespace":"team-a"}`, `gateway={"watchNamespaces":["team-a","team-b"]}`,
			`networkPolicy={"agentNamespaces":["team-c"]}`,
		}, agentNS: []string{rel, "team-a", "team-b", "team-c"}, adminFrom: []string{ctrl}},
		{name: "admin egress allowlist", set: []string{`networkPolicy={"agentEgressAllow":[{"cidr":"10.1.0.0/16","ports":[6379]}]}`},
			agentNS: []string{rel}, adminFrom: []string{ctrl}, egressIP: "10.1.0.0/16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := render(t, nil, append(tt.set, `dispatcher={"enabled":true}`))
			if err != nil {
				t.Fatal(err)
			}
			nps := policies(objs)
			if tt.wantNone {
				if len(nps) != 0 {
					t.Fatalf("rendered %d NetworkPolicies, want none", len(nps))
				}
				return
			}
			for _, c := range []struct {
				policy string
				ports  []any
			}{
				{"nn-neuronetes-gateway", []any{"admin"}},
				{"nn-neuronetes-controller", []any{"metrics", "health"}},
				{"nn-neuronetes-dispatcher", []any{"admin"}},
				{"nn-neuronetes-node", []any{9401, 9465, 9466}},
			} {
				np := nps[rel+"/"+c.policy]
				if np == nil {
					t.Fatalf("no NetworkPolicy %s/%s; have %v", rel, c.policy, slices.Sorted(maps.Keys(nps)))
				}
				for _, p := range c.ports {
					if got := peerComponents(ruleFor(np, p), "from"); !slices.Equal(got, tt.adminFrom) {
						t.Errorf("%s port %v admits %v, want %v", c.policy, p, got, tt.adminFrom)
					}
				}
			}
			if got := peerComponents(ruleFor(nps[rel+"/nn-neuronetes-gateway"], "api"), "from"); got != nil {
				t.Errorf("gateway API port admits only %v, want everyone", got)
			}
			if got := peerComponents(ruleFor(nps[rel+"/nn-neuronetes-redis"], 6379), "from"); !slices.Equal(got, []string{rel + "/gateway", rel + "/dispatcher", ctrl, "*/agents"}) {
				t.Errorf("redis admits %v", got)
			}
			var agentNS []string
			for key, np := range nps {
				if !strings.HasSuffix(key, "/nn-neuronetes-agents") {
					continue
				}
				agentNS = append(agentNS, strings.TrimSuffix(key, "/nn-neuronetes-agents"))
				in, _ := get(np, "spec", "ingress").([]any)
				if len(in) != 1 || !slices.Equal(peerComponents(in[0], "from"), []string{rel + "/gateway", rel + "/dispatcher"}) {
					t.Errorf("%s ingress = %v, want one rule from the gateway and the dispatcher", key, in)
				}
				var to []string
				eg, _ := get(np, "spec", "egress").([]any)
				for _, r := range eg {
					to = append(to, peerComponents(r, "to")...)
				}
				want := []string{rel + "/gateway", rel + "/dispatcher", rel + "/redis"}
				if tt.egressIP != "" {
					want = append(want, tt.egressIP)
				}
				if !slices.Equal(to, want) {
					t.Errorf("%s egress to %v, want %v (and DNS)", key, to, want)
				}
			}
			slices.Sort(agentNS)
			if !slices.Equal(agentNS, tt.agentNS) {
				t.Errorf("agent policies in %v, want %v", agentNS, tt.agentNS)
			}
		})
	}
}

// TestChartNetworkPolicyPortsExist: every named port a policy admits is a container port of the
// pods it selects (a misspelt name would silently admit nothing).
func TestChartNetworkPolicyPortsExist(t *testing.T) {
	objs, err := render(t, nil, []string{`dispatcher={"enabled":true}`, `autoscaler={"scaleWebhook":{"enabled":true,"tokenSecret":"s"}}`})
	if err != nil {
		t.Fatal(err)
	}
	for _, np := range policies(objs) {
		comp := fmt.Sprint(get(np, "spec", "podSelector", "matchLabels", "app.kubernetes.io/component"))
		var names []string
		for _, o := range objs {
			if (o.kind() == "Deployment" || o.kind() == "DaemonSet" || o.kind() == "StatefulSet") &&
				fmt.Sprint(get(o, "spec", "selector", "matchLabels", "app.kubernetes.io/component")) == comp {
				cs, _ := get(o, "spec", "template", "spec", "containers").([]any)
				for _, c := range cs {
					ps, _ := get(c, "ports").([]any)
					for _, p := range ps {
						names = append(names, fmt.Sprint(get(p, "name")))
					}
				}
			}
		}
		rules, _ := get(np, "spec", "ingress").([]any)
		for _, r := range rules {
			ports, _ := get(r, "ports").([]any)
			for _, p := range ports {
				if name, ok := get(p, "port").(string); ok && !slices.Contains(names, name) {
					t.Errorf("NetworkPolicy %s admits port %q, which no %s container declares (%v)", np.name(), name, comp, names)
				}
			}
		}
	}
}

// TestChartNetworkPolicyRejectsBadValues: the schema names the field of a malformed allowlist.
func TestChartNetworkPolicyRejectsBadValues(t *testing.T) {
	for _, set := range []string{
		`networkPolicy={"agentEgressAllow":[{"cidr":"10.0.0.1"}]}`,
		`networkPolicy={"agentEgressAllow":[{"ports":[80]}]}`,
		`networkPolicy={"monitoringNamespace":"Not_A_Name"}`,
	} {
		if _, err := render(t, nil, []string{set}); err == nil || !strings.Contains(err.Error(), "networkPolicy") {
			t.Errorf("%s: err = %v, want a schema error naming networkPolicy", set, err)
		}
	}
}
