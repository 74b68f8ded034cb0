package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
	"github.com/neuronetes/neuronetes/e2e/scale"
	"github.com/neuronetes/neuronetes/e2e/scoring"
)

const (
	gpuResource    = corev1.ResourceName("nvidia.com/gpu")
	gpusPerNode    = 8
	kwokAnnotation = "kwok.x-k8s.io/node"
	spotLabel      = "karpenter.sh/capacity-type"
)

// modelDigest is model m's digest; its warm label is nnv1.WarmNodeLabel(modelDigest(m)).
func modelDigest(m int) string { return fmt.Sprintf("sha256:%064x", m+1) }

// layout returns node i of n: zone i%3; spot when i%5 is 0 or 2 (40 %); on-demand $32.77/h, spot
// $12.00-13.50/h by i; warm for model m when (i/3)%8 == m < models (each model warm on 2 nodes
// of every 24, one third per zone).
func layout(i, models int) scoring.Node {
	n := scoring.Node{Name: "scoring-" + strconv.Itoa(i), Zone: fmt.Sprintf("zone-%c", 'a'+i%3), GPUs: gpusPerNode, Warm: map[string]bool{}}
	n.Spot = i%5 == 0 || i%5 == 2
	n.PricePerHour = 32.77
	if n.Spot {
		n.PricePerHour = 12 + 0.5*float64(i%4)
	}
	if m := (i / 3) % 8; m < models {
		n.Warm["m"+strconv.Itoa(m)] = true
	}
	return n
}

// createNodes creates the kwok nodes of the layout and waits until kwok reports them Ready.
func createNodes(ctx context.Context, cs kubernetes.Interface, runID string, nodes []scoring.Node) error {
	for i, sn := range nodes {
		labels := map[string]string{scale.LabelRun: runID, "type": "kwok", corev1.LabelHostname: sn.Name,
			corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", corev1.LabelTopologyZone: sn.Zone,
			corev1.LabelInstanceTypeStable: "p4d.24xlarge"}
		if sn.Spot {
			labels[spotLabel] = "spot"
		}
		for m := range sn.Warm {
			labels[nnv1.WarmNodeLabel(modelDigest(int(m[1]-'0')))] = "true"
		}
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96"), corev1.ResourceMemory: resource.MustParse("1Ti"),
			corev1.ResourcePods: resource.MustParse("110"), gpuResource: *resource.NewQuantity(gpusPerNode, resource.DecimalSI)}
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: sn.Name, Labels: labels, Annotations: map[string]string{
				kwokAnnotation: "fake", cost.PriceAnnotation: strconv.FormatFloat(sn.PricePerHour, 'f', 2, 64)}},
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: kwokAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc},
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("node %d %s: %w", i, sn.Name, err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: scale.LabelRun + "=" + runID})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		ready := 0
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= len(nodes), nil
	})
}
