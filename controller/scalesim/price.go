package scalesim

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/neuronetes/neuronetes/controller/cost"
)

// Pricing turns replica-seconds into dollars with the controller's price model: every simulated
// replica runs on a node of one instance type and capacity type, priced by cost.PriceNode from
// the admin's price table (the same ConfigMap the controller reads) or a per-node override.
type Pricing struct {
	// Node is the priced node (its instance type, capacity and the price's source).
	Node cost.NodePrice
	// DailyBudget in $ per day (0: none), the costConstraints.dailyBudget the spend is compared with.
	DailyBudget float64
}

// NodePricing prices a node of instanceType on capacity (spot or on-demand) from table, or from
// override ($/hour, as the neuronetes.io/price-per-hour annotation) when it is >= 0.
func NodePricing(instanceType string, capacity cost.Capacity, table cost.Table, override float64) (cost.NodePrice, error) {
	labels := map[string]string{corev1.LabelInstanceTypeStable: instanceType, "karpenter.sh/capacity-type": string(capacity)}
	var ann map[string]string
	if override >= 0 {
		ann = map[string]string{cost.PriceAnnotation: fmt.Sprint(override)}
	}
	p, err := cost.PriceNode(labels, ann, table)
	if err != nil {
		return p, err
	}
	if !p.Known() {
		return p, fmt.Errorf("no price for instance type %q on %s capacity in the price table", instanceType, capacity)
	}
	return p, nil
}

// LoadPriceTable reads a price table from a ConfigMap manifest (its data) as the controller's
// --price-table ConfigMap holds it.
func LoadPriceTable(path string) (cost.Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("price table: %w", err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		return nil, fmt.Errorf("price table %s: %w", path, err)
	}
	t, err := cost.ParseTable(cm.Data)
	if err != nil {
		return nil, fmt.Errorf("price table %s: %w", path, err)
	}
	return t, nil
}

// Dollars is what r's replica-seconds cost at p.
func (p Pricing) Dollars(r Result) float64 { return r.ReplicaSeconds / 3600 * p.Node.PerHour }

// PerDay scales r's spend over a trace of seconds to 24 hours.
func (p Pricing) PerDay(r Result, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return p.Dollars(r) * 86400 / seconds
}

// WriteSpend prints each policy's spend in dollars and, with a daily budget, the spend projected
// to a day against it.
func WriteSpend(w io.Writer, o Outcome, p Pricing, seconds float64) {
	fmt.Fprintf(w, "spend at $%.4g/replica-hour (%s %s, price from the %s; controller/cost)", p.Node.PerHour, p.Node.InstanceType, p.Node.Capacity, p.Node.Source)
	if p.DailyBudget > 0 {
		fmt.Fprintf(w, ", against a daily budget of $%.2f", p.DailyBudget)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\t$ over the trace\t$ per day\tbudget\t")
	rows := append([]Result{o.Oracle, o.Causal.Result}, o.Results...)
	for _, r := range rows {
		verdict := "-"
		if p.DailyBudget > 0 {
			verdict = fmt.Sprintf("%.0f%%", 100*p.PerDay(r, seconds)/p.DailyBudget)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%s\t\n", r.Policy, p.Dollars(r), p.PerDay(r, seconds), verdict)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
