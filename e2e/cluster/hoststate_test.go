package cluster

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseNFT(t *testing.T) {
	tables := []byte(`{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
 {"table": {"family": "ip", "name": "kube-proxy", "handle": 3}},
 {"table": {"family": "inet", "name": "filter", "handle": 1}}]}`)
	chains := []byte(`{"nftables": [{"metainfo": {"version": "1.0.6"}},
 {"chain": {"family": "ip", "table": "kube-proxy", "name": "services", "handle": 4}},
 {"chain": {"family": "inet", "table": "filter", "name": "input", "handle": 1, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}}]}`)
	gotT, gotC, err := parseNFT(tables, chains)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"inet filter", "ip kube-proxy"}; !reflect.DeepEqual(gotT, want) {
		t.Errorf("tables = %q, want %q", gotT, want)
	}
	if want := []string{"inet filter input", "ip kube-proxy services"}; !reflect.DeepEqual(gotC, want) {
		t.Errorf("chains = %q, want %q", gotC, want)
	}
	if _, _, err := parseNFT([]byte("table ip x"), chains); err == nil {
		t.Error("text output parsed as JSON without an error")
	}
}

func TestDiffNet(t *testing.T) {
	before := hostNet{
		Tables: []string{"inet filter"},
		Chains: []string{"inet filter input"},
		Routes: []string{"default via 192.0.2.1 dev eth0"},
	}
	tests := []struct {
		name string
		now  hostNet
		want []string
	}{
		{name: "restored", now: before},
		{name: "kube-proxy table and route left", now: hostNet{
			Tables: []string{"inet filter", "ip kube-proxy"},
			Chains: []string{"inet filter input", "ip kube-proxy services"},
			Routes: []string{"10.96.0.0/16 dev nn0 scope link src 10.88.0.1", "default via 192.0.2.1 dev eth0"},
		}, want: []string{`nftables table "ip kube-proxy"`, `nftables chain "ip kube-proxy services"`, `route "10.96.0.0/16 dev nn0`}},
		{name: "host table removed", now: hostNet{Routes: before.Routes},
			want: []string{`nftables table "inet filter" is gone`, `nftables chain "inet filter input" is gone`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := diffNet(before, tc.now)
			if len(got) != len(tc.want) {
				t.Fatalf("diff = %q, want %d entries like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("diff[%d] = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestParseLinesNormalizesRoutes(t *testing.T) {
	got := parseLines("default via 192.0.2.1 dev eth0 \n\n10.88.0.0/16  dev nn0 proto kernel scope link src 10.88.0.1\n")
	want := []string{"10.88.0.0/16 dev nn0 proto kernel scope link src 10.88.0.1", "default via 192.0.2.1 dev eth0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseLines = %q, want %q", got, want)
	}
}
