// Package cost is NeuroNetes' one price model: what a node costs per hour, read from where real
// clusters publish it, and what an AgentPool spends from the nodes its pods run on. The
// autoscaler's maxCostPerHour and dailyBudget accounting, the spot price cap of
// costConstraints.optimization and the autoscaler simulator all price through it.
//
// A node's price, first match wins:
//  1. the node annotation PriceAnnotation ("neuronetes.io/price-per-hour", $/hour), set by the
//     admin or a cloud integration;
//  2. the admin's price table (a ConfigMap, see ParseTable) for the node's instance type
//     (node.kubernetes.io/instance-type) and capacity type (spot or on-demand, from the
//     well-known labels of Karpenter, EKS, GKE and AKS: SpotNodeLabels);
//  3. the table's entry for the instance type alone.
//
// Everything here is pure: callers pass labels, annotations and tables.
package cost

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Capacity is a node's capacity type.
type Capacity string

const (
	// Spot capacity can be reclaimed by the provider.
	Spot Capacity = "spot"
	// OnDemand is every node that carries no spot label.
	OnDemand Capacity = "on-demand"
)

// PriceAnnotation on a node overrides every other price source: the node's $/hour.
const PriceAnnotation = "neuronetes.io/price-per-hour"

// SpotNodeLabels are the well-known node labels (key, value) of spot capacity: Karpenter, EKS
// managed node groups, GKE Spot and preemptible VMs, AKS spot node pools.
var SpotNodeLabels = [][2]string{
	{"karpenter.sh/capacity-type", "spot"},
	{"eks.amazonaws.com/capacityType", "SPOT"},
	{"cloud.google.com/gke-spot", "true"},
	{"cloud.google.com/gke-preemptible", "true"},
	{"kubernetes.azure.com/scalesetpriority", "spot"},
}

// NodeCapacity returns Spot when the node carries any of SpotNodeLabels, else OnDemand.
func NodeCapacity(labels map[string]string) Capacity {
	for _, l := range SpotNodeLabels {
		if labels[l[0]] == l[1] {
			return Spot
		}
	}
	return OnDemand
}

// Table maps "<instance-type>.<capacity>" (capacity "spot" or "on-demand") or "<instance-type>"
// to $/hour.
type Table map[string]float64

// ParseTable reads a price table from a ConfigMap's data. Each key is an instance type with an
// optional ".spot" or ".on-demand" suffix ("g5.12xlarge.spot"); each value a non-negative
// $/hour ("2.13"). An error names the bad key.
func ParseTable(data map[string]string) (Table, error) {
	t := make(Table, len(data))
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := parsePrice(data[k])
		if err != nil {
			return nil, fmt.Errorf("price table key %q: %w", k, err)
		}
		if k == "" || k == "."+string(Spot) || k == "."+string(OnDemand) {
			return nil, fmt.Errorf("price table key %q: no instance type", k)
		}
		t[k] = v
	}
	return t, nil
}

func parsePrice(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("not a number of $/hour: %q", s)
	}
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("must be a finite $/hour >= 0, got %q", s)
	}
	return v, nil
}

// Source says where a price came from.
type Source string

// The price sources, in the order they are tried.
const (
	SourceAnnotation Source = "annotation"
	SourceTable      Source = "table"
	SourceClass      Source = "agentclass"
	SourceNone       Source = "none"
)

// NodePrice is a node's price with its provenance.
type NodePrice struct {
	// PerHour in $; 0 when Source is SourceNone.
	PerHour float64
	// Source of PerHour.
	Source Source
	// Capacity and InstanceType as read from the node's labels.
	Capacity     Capacity
	InstanceType string
}

// Known reports whether the node has a price.
func (p NodePrice) Known() bool { return p.Source != SourceNone && p.Source != "" }

// PriceNode prices a node from its labels and annotations and the table (nil: none). A malformed
// PriceAnnotation is an error naming it; the node is then priced by the table.
func PriceNode(labels, annotations map[string]string, t Table) (NodePrice, error) {
	p := NodePrice{Capacity: NodeCapacity(labels), InstanceType: labels[corev1.LabelInstanceTypeStable], Source: SourceNone}
	var err error
	if s, ok := annotations[PriceAnnotation]; ok {
		v, perr := parsePrice(s)
		if perr == nil {
			p.PerHour, p.Source = v, SourceAnnotation
			return p, nil
		}
		err = fmt.Errorf("node annotation %s: %w", PriceAnnotation, perr)
	}
	if p.InstanceType != "" {
		if v, ok := t[p.InstanceType+"."+string(p.Capacity)]; ok {
			p.PerHour, p.Source = v, SourceTable
		} else if v, ok := t[p.InstanceType]; ok {
			p.PerHour, p.Source = v, SourceTable
		}
	}
	return p, err
}
