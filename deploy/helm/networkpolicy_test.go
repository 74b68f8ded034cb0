package helm_test

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/neuronetes/neuronetes/controller/agentnetpol"
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
			exprs, _ := get(p, "podSelector", "matchExpressions").([]any)
			if len(exprs) == 1 && get(exprs[0], "key") == "neuronetes.io/session" {
				out = append(out, "*/sessions")
				break
			}
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

// TestChartNetworkPolicyAdmitsSessions: the tool proxy's port and the bundled Redis admit pool
// agents and, with controller.agentSessions.enabled, AgentSession pods (whose own policy sends to
// both); without sessions, only pool agents.
func TestChartNetworkPolicyAdmitsSessions(t *testing.T) {
	const rel = "neuronetes-system"
	for _, tc := range []struct {
		name   string
		set    []string
		agents []string
	}{
		{"without sessions", nil, []string{"*/agents"}},
		{"with sessions", []string{`controller.agentSessions.enabled=true`}, []string{"*/agents", "*/sessions"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, append(tc.set, `dispatcher={"enabled":true}`))
			if err != nil {
				t.Fatal(err)
			}
			nps := policies(objs)
			if got := peerComponents(ruleFor(nps[rel+"/nn-neuronetes-dispatcher"], "tools"), "from"); !slices.Equal(got, tc.agents) {
				t.Errorf("the tool proxy's port admits %v, want %v", got, tc.agents)
			}
			want := append([]string{rel + "/gateway", rel + "/dispatcher", rel + "/controller"}, tc.agents...)
			if got := peerComponents(ruleFor(nps[rel+"/nn-neuronetes-redis"], 6379), "from"); !slices.Equal(got, want) {
				t.Errorf("redis admits %v, want %v", got, want)
			}
		})
	}
}

// TestChartNetworkPolicies: admin and metrics ports admit only the controller and the monitoring
// namespace; the agent policy the controller keeps in every AgentPool namespace admits only the
// gateway, the dispatcher, the controller and monitoring, of which only the gateway reaches the
// KV-event port, and sends only to DNS, the gateway, the tool proxy, Redis and the admin's
// allowlist; networkPolicy.enabled=false renders none.
func TestChartNetworkPolicies(t *testing.T) {
	const rel = "neuronetes-system"
	ctrl := rel + "/controller"
	agentsFrom := []string{rel + "/gateway", rel + "/dispatcher", ctrl}
	tests := []struct {
		name       string
		set        []string
		wantNone   bool
		adminFrom  []string
		agentsFrom []string
		egressIP   string
		dnsTo      []string
		kvPort     int // 0: the default, 5557
	}{
		{name: "disabled", set: []string{`networkPolicy={"enabled":false}`}, wantNone: true},
		{name: "defaults", adminFrom: []string{ctrl}, agentsFrom: agentsFrom, dnsTo: []string{kubeDNS}},
		{name: "monitoring namespace", set: []string{`networkPolicy={"monitoringNamespace":"mon"}`},
			adminFrom: []string{ctrl, "mon/*"}, agentsFrom: append(slices.Clone(agentsFrom), "mon/*"), dnsTo: []string{kubeDNS}},
		{name: "admin egress allowlist", set: []string{`networkPolicy={"agentEgressAllow":[{"cidr":"10.1.0.0/16","ports":[6379]}]}`},
			adminFrom: []string{ctrl}, agentsFrom: agentsFrom, egressIP: "10.1.0.0/16", dnsTo: []string{kubeDNS}},
		{name: "DNS servers outside pods", set: []string{`networkPolicy={"dns":{"cidrs":["169.254.20.10/32"]}}`},
			adminFrom: []string{ctrl}, agentsFrom: agentsFrom, dnsTo: []string{kubeDNS, "169.254.20.10/32"}},
		{name: "KV-event port", set: []string{`networkPolicy={"agentKVEventsPort":6000}`},
			adminFrom: []string{ctrl}, agentsFrom: agentsFrom, dnsTo: []string{kubeDNS}, kvPort: 6000},
		{name: "KV-event port at the top of the range", set: []string{`networkPolicy={"agentKVEventsPort":65535}`},
			adminFrom: []string{ctrl}, agentsFrom: agentsFrom, dnsTo: []string{kubeDNS}, kvPort: 65535},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := render(t, nil, append(tt.set, `dispatcher={"enabled":true}`))
			if err != nil {
				t.Fatal(err)
			}
			nps := policies(objs)
			spec, args := agentPolicySpec(t, objs)
			if tt.wantNone {
				if len(nps) != 0 || spec != nil || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--agent-network-policy") }) {
					t.Fatalf("rendered %d NetworkPolicies, agent spec %v, controller args %v; want none", len(nps), spec != nil, args)
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
			for key := range nps {
				if strings.HasSuffix(key, "-agents") {
					t.Errorf("the chart renders %s; the controller owns the agent policies", key)
				}
			}
			if !slices.Contains(args, "--agent-network-policy-name=nn-neuronetes-agents") {
				t.Errorf("controller args %v lack --agent-network-policy-name=nn-neuronetes-agents", args)
			}
			in, _ := get(spec, "ingress").([]any)
			if len(in) != 2 || !slices.Equal(append(peerComponents(in[0], "from"), peerComponents(in[1], "from")...), tt.agentsFrom) {
				t.Fatalf("agent ingress = %v, want two rules from %v", in, tt.agentsFrom)
			}
			kv := cmp.Or(tt.kvPort, 5557)
			if !slices.Equal(peerComponents(in[0], "from"), []string{rel + "/gateway"}) || get(in[0], "ports") != nil {
				t.Errorf("agent ingress rule 0 = %v, want the gateway on every port", in[0])
			}
			for _, port := range []int{1, 8000, kv - 1, kv, kv + 1, 65535} {
				if want := port != kv && port <= 65535; admitsTCP(in[1], port) != want {
					t.Errorf("agent ingress from the dispatcher, controller and monitoring admits port %d: %v, want %v", port, !want, want)
				}
			}
			var to []string
			eg, _ := get(spec, "egress").([]any)
			for _, r := range eg {
				if get(r, "to") == nil {
					t.Errorf("agent egress rule %v names no peer: it admits its ports to every address", r)
				}
				if isDNSRule(r) {
					if got := dnsPeers(r); !slices.Equal(got, tt.dnsTo) {
						t.Errorf("agent DNS egress to %v, want %v", got, tt.dnsTo)
					}
					continue
				}
				to = append(to, peerComponents(r, "to")...)
			}
			want := []string{rel + "/gateway", rel + "/dispatcher", rel + "/redis"}
			if tt.egressIP != "" {
				want = append(want, tt.egressIP)
			}
			if !slices.Equal(to, want) {
				t.Errorf("agent egress to %v, want %v (and DNS)", to, want)
			}
		})
	}
}

// admitsTCP reports whether an ingress rule's ports admit TCP port (no ports: every port).
func admitsTCP(rule any, port int) bool {
	ports, ok := get(rule, "ports").([]any)
	if !ok {
		return true
	}
	for _, p := range ports {
		lo, _ := get(p, "port").(float64)
		hi, ok := get(p, "endPort").(float64)
		if !ok {
			hi = lo
		}
		if get(p, "protocol") == "TCP" && float64(port) >= lo && float64(port) <= hi {
			return true
		}
	}
	return false
}

// kubeDNS is how dnsPeers names the cluster DNS pods of the chart's default networkPolicy.dns.
const kubeDNS = "kube-system/k8s-app=kube-dns"

// isDNSRule reports whether an egress rule admits exactly port 53 (UDP and TCP).
func isDNSRule(rule any) bool {
	ports, _ := get(rule, "ports").([]any)
	var got []string
	for _, p := range ports {
		got = append(got, fmt.Sprint(get(p, "protocol"), "/", get(p, "port")))
	}
	slices.Sort(got)
	return slices.Equal(got, []string{"TCP/53", "UDP/53"})
}

// dnsPeers lists the peers of a DNS rule: "<namespace>/<label>=<value>" for pods, the CIDR of an
// ipBlock.
func dnsPeers(rule any) []string {
	var out []string
	peers, _ := get(rule, "to").([]any)
	for _, p := range peers {
		if get(p, "ipBlock") != nil {
			out = append(out, fmt.Sprint(get(p, "ipBlock", "cidr")))
			continue
		}
		labels, _ := get(p, "podSelector", "matchLabels").(map[string]any)
		var sel []string
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			sel = append(sel, k+"="+fmt.Sprint(labels[k]))
		}
		out = append(out, fmt.Sprint(get(p, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name"))+"/"+strings.Join(sel, ","))
	}
	return out
}

// agentPolicySpec returns the agent NetworkPolicySpec of the chart's ConfigMap (nil when none),
// after checking the controller loads it, and the controller's arguments.
func agentPolicySpec(t *testing.T, objs []object) (map[string]any, []string) {
	t.Helper()
	var spec map[string]any
	var args []string
	for _, o := range objs {
		switch {
		case o.kind() == "ConfigMap" && o.name() == "nn-neuronetes-agent-networkpolicy":
			body := fmt.Sprint(get(o, "data", "spec.yaml"))
			p := filepath.Join(t.TempDir(), "spec.yaml")
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := agentnetpol.LoadSpec(p); err != nil {
				t.Fatalf("the controller refuses the chart's agent policy: %v\n%s", err, body)
			}
			if err := yaml.Unmarshal([]byte(body), &spec); err != nil {
				t.Fatal(err)
			}
		case o.kind() == "Deployment" && o.name() == "nn-neuronetes-controller":
			cs, _ := get(o, "spec", "template", "spec", "containers").([]any)
			for _, a := range get(cs[0], "args").([]any) {
				args = append(args, fmt.Sprint(a))
			}
		}
	}
	return spec, args
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
