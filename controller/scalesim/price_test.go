package scalesim

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/controller/cost"
)

func TestPricingFromTheExampleTable(t *testing.T) {
	table, err := LoadPriceTable(filepath.Join("..", "..", "deploy", "examples", "autoscaling", "06-price-table.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		typ      string
		capacity cost.Capacity
		override float64
		want     float64
		source   cost.Source
		wantErr  bool
	}{
		{"g5.12xlarge", cost.OnDemand, -1, 5.672, cost.SourceTable, false},
		{"g5.12xlarge", cost.Spot, -1, 2.14, cost.SourceTable, false},
		{"g5.12xlarge", cost.Spot, 1.25, 1.25, cost.SourceAnnotation, false},
		{"m5.large", cost.OnDemand, -1, 0, cost.SourceNone, true},
	} {
		p, err := NodePricing(tc.typ, tc.capacity, table, tc.override)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s %s: err %v", tc.typ, tc.capacity, err)
		}
		if p.PerHour != tc.want || p.Source != tc.source {
			t.Errorf("%s %s: %+v, want $%v from %s", tc.typ, tc.capacity, p, tc.want, tc.source)
		}
	}
}

func TestWriteSpend(t *testing.T) {
	p := Pricing{Node: cost.NodePrice{PerHour: 2, Source: cost.SourceTable, InstanceType: "g5.12xlarge", Capacity: cost.Spot}, DailyBudget: 100}
	r := Result{Policy: "neuronetes", ReplicaSeconds: 7200} // 2 replica-hours over a 1-hour trace
	if d := p.Dollars(r); d != 4 {
		t.Fatalf("dollars %v", d)
	}
	if d := p.PerDay(r, 3600); math.Abs(d-96) > 1e-9 {
		t.Fatalf("per day %v", d)
	}
	var b bytes.Buffer
	WriteSpend(&b, Outcome{Oracle: Result{Policy: "oracle"}, Causal: CausalRef{Result: Result{Policy: "causal"}}, Results: []Result{r}}, p, 3600)
	if out := b.String(); !strings.Contains(out, "daily budget of $100.00") || !strings.Contains(out, "96%") {
		t.Fatalf("report:\n%s", out)
	}
}
