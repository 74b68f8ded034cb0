package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Reasons of the TenantAPIKeysReady condition.
const (
	ReasonSecretsRead       = "SecretsRead"
	ReasonSecretNotLabelled = "SecretNotLabelled"
	ReasonSecretNotFound    = "SecretNotFound"
	// ReasonSecretNotPublished: the gateway reads the key hashes controller/apikeys publishes,
	// and there are none (yet) for the Secret.
	ReasonSecretNotPublished = "SecretNotPublished"
)

// TenantStatus writes each Tenant's APIKeysReady condition, so a Tenant whose key Secret the
// gateway cannot use says why instead of every request answering 401.
//
// Every replica computes the same condition from the same objects and patches only when it
// differs from the stored one, so replicas converge without a leader.
type TenantStatus struct {
	// Client patches Tenant status (tenants/status patch).
	Client client.Client
	// Reader reads a Secret the cache lacks, to tell an unlabelled Secret from a missing one
	// (the gateway's uncached reader). Nil with published key sets: their SecretErrors carry the
	// reason, and the gateway may read no Secret.
	Reader client.Reader
	// Timeout bounds one sync (default 10 s).
	Timeout time.Duration
}

// Sync sets the condition of every tenant from the problems BuildDirectory reported.
func (s *TenantStatus) Sync(ctx context.Context, tenants []v1alpha1.Tenant, problems []error) {
	t := s.Timeout
	if t <= 0 {
		t = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	missing := map[string][]*SecretError{}
	for _, e := range problems {
		var se *SecretError
		if errors.As(e, &se) {
			missing[se.Tenant] = append(missing[se.Tenant], se)
		}
	}
	for i := range tenants {
		tn := &tenants[i]
		cond := s.condition(ctx, tn, missing[tn.Namespace+"/"+tn.Name])
		if err := s.patch(ctx, tn, cond); err != nil {
			klog.FromContext(ctx).Error(err, "Tenant status not written", "tenant", tn.Namespace+"/"+tn.Name)
		}
	}
}

// condition is the APIKeysReady condition of tn given its Secrets the cache lacks.
func (s *TenantStatus) condition(ctx context.Context, tn *v1alpha1.Tenant, missing []*SecretError) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.TenantAPIKeysReady, Status: metav1.ConditionTrue, Reason: ReasonSecretsRead,
		Message: "every Secret of spec.apiKeys is read", ObservedGeneration: tn.Generation}
	if len(missing) == 0 {
		return c
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i].Secret < missing[j].Secret })
	var msgs []string
	reason := ReasonSecretNotFound
	for _, m := range missing {
		r, msg := s.explain(ctx, m)
		if r != ReasonSecretNotFound {
			reason = r
		}
		msgs = append(msgs, msg)
	}
	c.Status, c.Reason = metav1.ConditionFalse, reason
	c.Message = "spec.apiKeys: " + strings.Join(msgs, "; ") + "; requests with its keys get 401"
	return c
}

// explain returns the reason and message of one unusable Secret: the published reason when known,
// else what the Reader finds.
func (s *TenantStatus) explain(ctx context.Context, m *SecretError) (string, string) {
	notLabelled := fmt.Sprintf("Secret %s/%s lacks the label %s: only labelled Secrets are read (kubectl label secret -n %s %s %s=true)",
		m.Namespace, m.Secret, v1alpha1.APIKeysSecretLabel, m.Namespace, m.Secret, v1alpha1.APIKeysSecretLabel)
	notFound := fmt.Sprintf("Secret %s/%s not found", m.Namespace, m.Secret)
	switch {
	case m.Reason == ReasonSecretNotLabelled:
		return m.Reason, notLabelled
	case m.Reason == ReasonSecretNotFound:
		return m.Reason, notFound
	case m.Reason == ReasonSecretNotPublished:
		return m.Reason, fmt.Sprintf("the controller has not published the key hashes of Secret %s/%s yet", m.Namespace, m.Secret)
	case s.Reader == nil:
		return ReasonSecretNotFound, fmt.Sprintf("Secret %s/%s not found or not labelled %s", m.Namespace, m.Secret, v1alpha1.APIKeysSecretLabel)
	}
	var sec metav1.PartialObjectMetadata
	sec.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Secret}, &sec)
	switch {
	case err == nil:
		return ReasonSecretNotLabelled, notLabelled
	case apierrors.IsNotFound(err):
		return ReasonSecretNotFound, notFound
	default:
		return ReasonSecretNotFound, fmt.Sprintf("Secret %s/%s not found or not labelled %s (%v)", m.Namespace, m.Secret, v1alpha1.APIKeysSecretLabel, err)
	}
}

// patch stores cond on tn unless it is already there.
func (s *TenantStatus) patch(ctx context.Context, tn *v1alpha1.Tenant, cond metav1.Condition) error {
	old := meta.FindStatusCondition(tn.Status.Conditions, cond.Type)
	if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message &&
		old.ObservedGeneration == cond.ObservedGeneration && tn.Status.ObservedGeneration == tn.Generation {
		return nil
	}
	base := tn.DeepCopy()
	next := tn.DeepCopy()
	meta.SetStatusCondition(&next.Status.Conditions, cond)
	next.Status.ObservedGeneration = tn.Generation
	if err := s.Client.Status().Patch(ctx, next, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("patch tenant status: %w", err)
	}
	return nil
}
