package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/neuronetes/neuronetes/e2e/scale"
	"github.com/neuronetes/neuronetes/e2e/scoring"
)

// createNodes creates the kwok nodes of the layout and waits until kwok reports them Ready.
func createNodes(ctx context.Context, cs kubernetes.Interface, runID string, nodes []scoring.Node) error {
	for i, sn := range nodes {
		n := scoring.NodeObject(sn, map[string]string{scale.LabelRun: runID, "type": "kwok"})
		n.Status.Conditions = nil // kwok reports the node's conditions
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

// deleteNodes deletes the layout's kwok nodes and waits until they are gone, so that the next
// scenario's nodes start with its own labels and no pods.
func deleteNodes(ctx context.Context, cs kubernetes.Interface, nodes []scoring.Node) error {
	for _, n := range nodes {
		if err := cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			if _, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil //nolint:nilerr // still there, or transient: poll again
			}
		}
		return true, nil
	})
}
