package cost

import (
	"math"
	"strings"
	"testing"
)

func TestParseTable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    map[string]string
		want    Table
		wantErr string
	}{
		{"typed and untyped", map[string]string{"g5.12xlarge.spot": "2.1", "g5.12xlarge.on-demand": "5.67", "p3.8xlarge": " 12.24 "},
			Table{"g5.12xlarge.spot": 2.1, "g5.12xlarge.on-demand": 5.67, "p3.8xlarge": 12.24}, ""},
		{"negative", map[string]string{"g5.12xlarge.spot": "-1"}, nil, `"g5.12xlarge.spot"`},
		{"not a number", map[string]string{"g5": "cheap"}, nil, `"g5": not a number`},
		{"no type", map[string]string{".spot": "1"}, nil, "no instance type"},
		{"NaN", map[string]string{"x": "NaN"}, nil, "finite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTable(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %v", got)
			}
		})
	}
}

func TestPriceNode(t *testing.T) {
	table := Table{"g5.12xlarge.spot": 2.1, "g5.12xlarge.on-demand": 5.67, "p3.8xlarge": 12.24}
	karpSpot := map[string]string{"karpenter.sh/capacity-type": "spot", "node.kubernetes.io/instance-type": "g5.12xlarge"}
	for _, tc := range []struct {
		name        string
		labels, ann map[string]string
		want        NodePrice
		wantErr     bool
	}{
		{"karpenter spot from table", karpSpot, nil, NodePrice{2.1, SourceTable, Spot, "g5.12xlarge"}, false},
		{"karpenter on-demand", map[string]string{"karpenter.sh/capacity-type": "on-demand", "node.kubernetes.io/instance-type": "g5.12xlarge"}, nil,
			NodePrice{5.67, SourceTable, OnDemand, "g5.12xlarge"}, false},
		{"GKE spot, untyped entry", map[string]string{"cloud.google.com/gke-spot": "true", "node.kubernetes.io/instance-type": "p3.8xlarge"}, nil,
			NodePrice{12.24, SourceTable, Spot, "p3.8xlarge"}, false},
		{"annotation overrides table", karpSpot, map[string]string{PriceAnnotation: "1.5"}, NodePrice{1.5, SourceAnnotation, Spot, "g5.12xlarge"}, false},
		{"bad annotation falls back to table", karpSpot, map[string]string{PriceAnnotation: "-3"}, NodePrice{2.1, SourceTable, Spot, "g5.12xlarge"}, true},
		{"unknown type", map[string]string{"node.kubernetes.io/instance-type": "m5.large"}, nil, NodePrice{0, SourceNone, OnDemand, "m5.large"}, false},
		{"no labels", nil, nil, NodePrice{0, SourceNone, OnDemand, ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PriceNode(tc.labels, tc.ann, table)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), PriceAnnotation) {
				t.Errorf("error does not name the annotation: %v", err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPoolRate(t *testing.T) {
	nodes := map[string]NodePrice{
		"spot-a": {PerHour: 2, Source: SourceTable},
		"od-b":   {PerHour: 6, Source: SourceAnnotation},
		"bare":   {Source: SourceNone},
	}
	for _, tc := range []struct {
		name       string
		pods       []string
		class      float64
		want       float64
		unpriced   int32
		wantPerPod float64
	}{
		{"one pod per node", []string{"spot-a", "od-b"}, 0, 8, 0, 4},
		{"two pods share a node", []string{"od-b", "od-b"}, 0, 6, 0, 3},
		{"unpriced node uses class price", []string{"bare", "spot-a"}, 1.5, 3.5, 0, 1.75},
		{"unscheduled and unpriced", []string{"", "bare", "spot-a"}, 0, 2, 2, 2},
		{"none", nil, 1, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := PoolRate(tc.pods, nodes, tc.class)
			if math.Abs(r.PerHour-tc.want) > 1e-9 || r.Unpriced != tc.unpriced || math.Abs(r.PerPod()-tc.wantPerPod) > 1e-9 {
				t.Fatalf("got %+v (per pod %v), want %v/h, %d unpriced, %v per pod", r, r.PerPod(), tc.want, tc.unpriced, tc.wantPerPod)
			}
		})
	}
}
