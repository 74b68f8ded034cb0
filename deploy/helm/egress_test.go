package helm_test

import (
	"strings"
	"testing"
)

// TestChartEgress renders the egress policy into the node agent, the gateway and the dispatcher,
// the node agent's file roots and the gateway's approved OIDC issuers; with the defaults none of
// these flags is rendered (deny by default) and the disk budget is 80% of the cache filesystem.
func TestChartEgress(t *testing.T) {
	set := []string{`egress={"allowCIDRs":["10.96.0.0/12","127.0.0.1"],"allowHosts":["presidio.guardrails.svc"],"clusterCIDRs":["34.118.224.0/20"]}`,
		`nodeagent.fileSourceRoots=["/mnt/weights","/data"]`,
		`gateway.oidc={"allowedIssuers":[{"issuer":"https://idp.a.example","namespaces":["team-a","team-b"]},{"issuer":"https://shared.example/realms/x"}]}`,
		`dispatcher={"enabled":true}`}
	objs, err := render(t, nil, set)
	if err != nil {
		t.Fatal(err)
	}
	policy := []string{"--egress-allow-cidrs=10.96.0.0/12,127.0.0.1", "--egress-allow-hosts=presidio.guardrails.svc", "--egress-cluster-cidrs=34.118.224.0/20"}
	for _, c := range []struct {
		kind, name, container string
		want                  []string
	}{
		{"DaemonSet", "nn-neuronetes-nodeagent", "nodeagent", append([]string{"--file-source-roots=/mnt/weights,/data"}, policy...)},
		{"Deployment", "nn-neuronetes-gateway", "gateway", append([]string{"--oidc-allowed-issuers=https://idp.a.example=team-a|team-b,https://shared.example/realms/x"}, policy...)},
		{"Deployment", "nn-neuronetes-dispatcher", "dispatcher", policy},
		{"Deployment", "nn-neuronetes-controller", "controller", policy},
	} {
		o := find(objs, c.kind, c.name)
		if o == nil {
			t.Fatalf("no %s %s", c.kind, c.name)
		}
		a := args(container(o, c.container))
		for _, w := range c.want {
			if !contains(a, w) {
				t.Errorf("%s args %v lack %s", c.container, a, w)
			}
		}
	}

	objs, err = render(t, nil, []string{`dispatcher={"enabled":true}`})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][3]string{{"DaemonSet", "nn-neuronetes-nodeagent", "nodeagent"}, {"Deployment", "nn-neuronetes-gateway", "gateway"}, {"Deployment", "nn-neuronetes-dispatcher", "dispatcher"}, {"Deployment", "nn-neuronetes-controller", "controller"}} {
		for _, a := range args(container(find(objs, c[0], c[1]), c[2])) {
			if strings.HasPrefix(a, "--egress-") || strings.HasPrefix(a, "--file-source-roots") || strings.HasPrefix(a, "--oidc-allowed-issuers") {
				t.Errorf("%s renders %s by default", c[2], a)
			}
		}
	}
	if a := args(container(find(objs, "DaemonSet", "nn-neuronetes-nodeagent"), "nodeagent")); !contains(a, "--disk-budget=80%") {
		t.Errorf("nodeagent args %v lack the default --disk-budget=80%%", a)
	}
	for _, bad := range []string{`egress.allowCIDRs=["http://x"]`, `nodeagent.fileSourceRoots=["relative"]`, `gateway.oidc={"allowedIssuers":[{"issuer":"idp.example"}]}`} {
		if _, err := render(t, nil, []string{bad}); err == nil {
			t.Errorf("%s accepted by the schema", bad)
		}
	}
}
