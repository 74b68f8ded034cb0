package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// requireEvictionRefused checks that the session's PodDisruptionBudget session-<session> covers
// its running pod (the disruption controller counts one healthy pod and allows no disruption),
// that the Eviction API refuses to evict the pod (429, as kubectl drain sees it), and that the pod
// is still running, not terminating, afterwards.
func requireEvictionRefused(t *testing.T, e *Env, ns, session, pod string) {
	t.Helper()
	ctx := context.Background()
	Eventually(t, time.Minute, "PodDisruptionBudget session-"+session+" covering pod "+pod, func() (bool, error) {
		pdb, err := e.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "session-"+session, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := pdb.Status
		return st.ObservedGeneration == pdb.Generation && st.ExpectedPods == 1 && st.CurrentHealthy == 1 && st.DisruptionsAllowed == 0,
			fmt.Errorf("status %+v", st)
	})
	evictErr := e.Kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}})
	if !apierrors.IsTooManyRequests(evictErr) {
		t.Fatalf("eviction of session pod %s: %v, want 429 (refused by its PodDisruptionBudget)", pod, evictErr)
	}
	p, err := e.Kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("session pod %s after the refused eviction: %v", pod, err)
	}
	if p.DeletionTimestamp != nil {
		t.Fatalf("session pod %s terminating after the refused eviction (deletion %v)", pod, p.DeletionTimestamp)
	}
	t.Logf("eviction of session pod %s refused: %v", pod, evictErr)
}
