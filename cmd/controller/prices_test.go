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

func TestInterruptionTaintFlag(t *testing.T) {
	o := interruptionOptions{taints: "example.com/reclaim, spot.example.org/notice"}
	got, err := o.keys()
	if err != nil || len(got) != 2 || got[1] != "spot.example.org/notice" {
		t.Fatalf("%v %v", got, err)
	}
	o.taints = "bad key!"
	if _, err := o.keys(); err == nil || !strings.Contains(err.Error(), "--interruption-taint") {
		t.Fatalf("bad key accepted: %v", err)
	}
}
