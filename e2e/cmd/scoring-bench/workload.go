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

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/scale"
	"github.com/neuronetes/neuronetes/e2e/scoring"
)

// place runs a scenario's workload with one scheduler: its batches in order, each batch's pods
// created together and waited for until every pod created so far is bound. It returns the
// placements and removes the pods.
func place(ctx context.Context, cs kubernetes.Interface, runID, scheduler string, sc scoring.Scenario, timeout time.Duration) ([]scoring.Placement, error) {
	ns := "scoring-" + runID + "-" + sc.Name + "-" + scheduler
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{scale.LabelRun: runID}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	defer func() { _ = scale.DeleteNamespace(context.WithoutCancel(ctx), cs, ns) }()
	run := map[string]string{scale.LabelRun: runID}
	var bound []corev1.Pod
	want := 0
	for i, batch := range sc.Batches {
		for _, r := range batch {
			if err := createReplica(ctx, cs, ns, scheduler, run, r); err != nil {
				return nil, err
			}
			want += r.Pods()
		}
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // transient: poll again
			}
			bound = bound[:0]
			for _, po := range list.Items {
				if po.Spec.NodeName != "" {
					bound = append(bound, po)
				}
			}
			return len(bound) == want, nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: batch %d: %d of %d replicas bound after %s: %w", scheduler, i, len(bound), want, timeout, err)
		}
	}
	out := make([]scoring.Placement, 0, len(bound))
	for _, po := range bound {
		out = append(out, scoring.Placement{Pool: po.Labels[nnv1.PoolLabel], Model: po.Labels[nnv1.PoolLabel], Node: po.Spec.NodeName,
			Gang: po.Labels[scoring.GangLabel], GPUs: scoring.ReplicaGPUs})
	}
	return out, removePods(ctx, cs, ns)
}

// createReplica creates one replica: a pod, or for a gang its PodGroup (as the AgentPool
// controller writes it) and then its pods, as 62-gangs.sh's gangs are created.
func createReplica(ctx context.Context, cs kubernetes.Interface, ns, scheduler string, run map[string]string, r scoring.Replica) error {
	if r.Size <= 1 {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, scoring.ReplicaPod(ns, scheduler, cluster.PauseImage, run, run, r.Pool, r.Index), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pod %d of pool m%d: %w", r.Index, r.Pool, err)
		}
		return nil
	}
	if _, err := cs.SchedulingV1beta1().PodGroups(ns).Create(ctx, scoring.GangPodGroup(ns, run, r.Pool, r.Index, r.Size), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("PodGroup %s: %w", scoring.GangName(r.Pool, r.Index), err)
	}
	for _, p := range scoring.GangPods(ns, scheduler, cluster.PauseImage, run, run, r.Pool, r.Index, r.Size) {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// removePods deletes the namespace's pods at once and waits until they are gone, so that the next
// scheduler starts from empty nodes.
func removePods(ctx context.Context, cs kubernetes.Interface, ns string) error {
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting pods of %s: %w", ns, err)
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
}
