package agentsession

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// useServiceAccount makes name the ServiceAccount session s runs as from now on
// (status.serviceAccountName) and retires the one it ran as until now
// (status.retiredServiceAccountNames): session-<s> when the session had pods but no recorded
// ServiceAccount (it was created with its first pod), else the one recorded. Both are the
// session's own: session-<s> is created owned by it, and a claimed ServiceAccount is adopted
// (ensureServiceAccount) before any later claim can retire it. A claim calls it before counting
// the claimed pod.
func useServiceAccount(s *nnv1.AgentSession, name string) {
	prev := s.Status.ServiceAccountName
	if prev == "" && s.Status.Pods > 0 {
		prev = ServiceAccountName(s.Name)
	}
	s.Status.ServiceAccountName = name
	if prev != "" && prev != name && !slices.Contains(s.Status.RetiredServiceAccountNames, prev) {
		s.Status.RetiredServiceAccountNames = append(s.Status.RetiredServiceAccountNames, prev)
	}
}

// RetirableServiceAccounts splits a session's retired ServiceAccounts into those it may delete
// now and those it keeps: never the one it runs as now (current), nor one any of its pods
// (podAccounts: the ServiceAccount of each pod labelled with the session, terminating ones
// included) still runs as.
func RetirableServiceAccounts(retired []string, current string, podAccounts []string) (del, keep []string) {
	for _, name := range retired {
		if name == current || slices.Contains(podAccounts, name) {
			keep = append(keep, name)
			continue
		}
		del = append(del, name)
	}
	return del, keep
}

// retireServiceAccounts deletes the session's retired ServiceAccounts that none of its pods runs
// as any more (RetirableServiceAccounts) and drops them from status.retiredServiceAccountNames;
// those still in use stay listed and are tried again on a later reconcile (the deletion of the
// pod that uses one enqueues the session). A deletion refused (other than NotFound) is logged
// and kept for a later reconcile: the session's lifecycle does not wait on it.
func (r *Reconciler) retireServiceAccounts(ctx context.Context, s *nnv1.AgentSession) error {
	if len(s.Status.RetiredServiceAccountNames) == 0 {
		return nil
	}
	var pods corev1.PodList
	if err := r.pods().List(ctx, &pods, client.InNamespace(s.Namespace), client.MatchingLabels{nnv1.SessionLabel: s.Name}); err != nil {
		return fmt.Errorf("list the session's pods: %w", err)
	}
	accounts := make([]string, 0, len(pods.Items))
	for _, p := range pods.Items {
		accounts = append(accounts, p.Spec.ServiceAccountName)
	}
	del, keep := RetirableServiceAccounts(s.Status.RetiredServiceAccountNames, s.Status.ServiceAccountName, accounts)
	logger := klog.FromContext(ctx)
	for _, name := range del {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}}
		if err := r.Client.Delete(ctx, sa); err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Deleting a ServiceAccount the session no longer uses; kept for a later try", "serviceAccount", name)
			keep = append(keep, name)
			continue
		}
		logger.Info("Deleted a ServiceAccount the session no longer uses", "serviceAccount", name, "now", s.Status.ServiceAccountName)
	}
	s.Status.RetiredServiceAccountNames = keep
	return nil
}
