package main

import (
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/poolview"
)

func families(t *testing.T, page string) poolview.Families {
	t.Helper()
	f, err := poolview.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGaugeSum(t *testing.T) {
	f := families(t, `# TYPE neuronetes_gateway_endpoints gauge
neuronetes_gateway_endpoints{pool="neuronetes-demo/demo"} 4
neuronetes_gateway_endpoints{pool="other/demo"} 2
`)
	if got := gaugeSum(f, "neuronetes_gateway_endpoints", "pool", "neuronetes-demo/demo"); got != 4 {
		t.Errorf("got %v, want 4", got)
	}
	if got := gaugeSum(f, "neuronetes_gateway_endpoints", "pool", "missing/pool"); got != 0 {
		t.Errorf("got %v, want 0", got)
	}
}
