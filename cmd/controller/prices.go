package main

import (
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/neuronetes/neuronetes/controller/cost"
)

// priceOptions name the admin's node price table (controller/cost).
type priceOptions struct {
	table string
}

func (p *priceOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.table, "price-table", "", "namespace/name of the ConfigMap of node prices in $/hour, keyed <instance-type>.spot, <instance-type>.on-demand or <instance-type> (docs/autoscaling.md, Prices); a node's "+cost.PriceAnnotation+" annotation overrides it (empty: annotations and the AgentClass costPerReplicaHour only)")
}

// ref parses --price-table (zero when unset).
func (p *priceOptions) ref() (types.NamespacedName, error) {
	if p.table == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(p.table, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return types.NamespacedName{}, fmt.Errorf("--price-table %q: want <namespace>/<configmap name>", p.table)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// kubePrices is the price model's view of the cluster: nodes from the cache, the table read
// without one.
func (p *priceOptions) kubePrices(mgr ctrl.Manager) (cost.KubePrices, error) {
	ref, err := p.ref()
	if err != nil {
		return cost.KubePrices{}, err
	}
	return cost.KubePrices{Nodes: mgr.GetClient(), ConfigMaps: mgr.GetAPIReader(), Table: ref}, nil
}
