package cluster

import (
	"slices"
	"testing"
)

func TestClusterTablesIn(t *testing.T) {
	for _, tc := range []struct {
		name, listing string
		want          []string
	}{
		{"none", "table inet filter\ntable ip nat\n", nil},
		{"kube-proxy both families", "table ip kube-proxy\ntable ip6 kube-proxy\n", []string{"ip kube-proxy", "ip6 kube-proxy"}},
		{"enforcer tables", "table inet kube-network-policies\ntable inet kube-network-policies-dnscache\n", []string{"inet kube-network-policies", "inet kube-network-policies-dnscache"}},
		{"xt-queue table", "table ip kube-network-policies-xt\n", []string{"ip kube-network-policies-xt"}},
		{"same names in other families are not ours", "table inet kube-proxy\ntable ip kube-network-policies\ntable inet kube-network-policies-xt\n", nil},
		{"prefix is not a match", "table inet kube-network-policies-other\ntable ip kube-proxy2\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clusterTablesIn(tc.listing); !slices.Equal(got, tc.want) {
				t.Errorf("clusterTablesIn(%q) = %q, want %q", tc.listing, got, tc.want)
			}
		})
	}
}
