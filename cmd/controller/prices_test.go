package main

import (
	"strings"
	"testing"
)

func TestPriceTableFlag(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "/", ""},
		{"neuronetes-system/node-prices", "neuronetes-system/node-prices", ""},
		{"node-prices", "", "--price-table"},
		{"Bad_NS/x", "", "--price-table"},
	} {
		p := priceOptions{table: tc.in}
		got, err := p.ref()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want one naming %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("%q: %v %v, want %s", tc.in, got, err, tc.want)
		}
	}
}
