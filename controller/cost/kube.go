package cost

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubePrices prices nodes of a cluster: the Node objects (labels, PriceAnnotation) and the admin's
// price table ConfigMap.
type KubePrices struct {
	// Nodes reads Node objects (the manager's cached client).
	Nodes client.Reader
	// ConfigMaps reads the table (an uncached reader: ConfigMaps are not cached); nil means Nodes.
	ConfigMaps client.Reader
	// Table is the price table ConfigMap (empty name: no table).
	Table types.NamespacedName
}

// NodePrices returns the prices of the named nodes; a node that does not exist (any more) is
// left out. A malformed table is an error; a malformed node annotation is logged and the node
// priced by the table.
func (k KubePrices) NodePrices(ctx context.Context, names []string) (map[string]NodePrice, error) {
	table, err := k.table(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]NodePrice, len(names))
	for _, n := range names {
		if _, done := out[n]; done || n == "" {
			continue
		}
		var node corev1.Node
		if err := k.Nodes.Get(ctx, types.NamespacedName{Name: n}, &node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("get node %s: %w", n, err)
		}
		p, err := PriceNode(node.Labels, node.Annotations, table)
		if err != nil {
			klog.FromContext(ctx).Info("Ignoring node price annotation", "node", n, "err", err)
		}
		out[n] = p
	}
	return out, nil
}

func (k KubePrices) table(ctx context.Context) (Table, error) {
	if k.Table.Name == "" {
		return nil, nil
	}
	r := k.ConfigMaps
	if r == nil {
		r = k.Nodes
	}
	var cm corev1.ConfigMap
	if err := r.Get(ctx, k.Table, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get price table %s: %w", k.Table, err)
	}
	t, err := ParseTable(cm.Data)
	if err != nil {
		return nil, fmt.Errorf("price table ConfigMap %s: %w", k.Table, err)
	}
	return t, nil
}

// NodeQuote is one node's price.
type NodeQuote struct {
	// Name of the node.
	Name string
	NodePrice
}

// Quotes lists every node with its price, and the price table.
func (k KubePrices) Quotes(ctx context.Context) ([]NodeQuote, Table, error) {
	table, err := k.table(ctx)
	if err != nil {
		return nil, nil, err
	}
	var nodes corev1.NodeList
	if err := k.Nodes.List(ctx, &nodes); err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	out := make([]NodeQuote, 0, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		p, err := PriceNode(n.Labels, n.Annotations, table)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Ignoring node price annotation", "node", n.Name, "err", err)
		}
		out = append(out, NodeQuote{Name: n.Name, NodePrice: p})
	}
	return out, table, nil
}
