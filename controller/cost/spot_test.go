package cost

import (
	"reflect"
	"testing"
)

func TestSplitSpot(t *testing.T) {
	quotes := []NodeQuote{
		{"s-cheap", NodePrice{PerHour: 4, Source: SourceTable, Capacity: Spot}},
		{"s-at-cap", NodePrice{PerHour: 5, Source: SourceAnnotation, Capacity: Spot}},
		{"s-dear", NodePrice{PerHour: 5.01, Source: SourceAnnotation, Capacity: Spot}},
		{"s-unpriced", NodePrice{Source: SourceNone, Capacity: Spot}},
		{"od-cheap", NodePrice{PerHour: 1, Source: SourceTable, Capacity: OnDemand}},
	}
	table := Table{"g5.12xlarge.spot": 2.1, "p3.8xlarge.spot": 7.3, "g5.12xlarge.on-demand": 1, "g4dn.12xlarge.spot": 5}
	got := SplitSpot(quotes, table, 5)
	want := SpotCap{Cheap: []string{"s-at-cap", "s-cheap"}, Dear: []string{"s-dear", "s-unpriced"}, CheapTypes: []string{"g4dn.12xlarge", "g5.12xlarge"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
