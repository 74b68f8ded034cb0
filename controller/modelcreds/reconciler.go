// Package modelcreds resolves Model source credentials in the controller, so that the node agents,
// which run where tenant code runs, read no Secret at all: they ask Server, which answers only
// for Models used on the caller's node (Decide). For each Model with
// spec.source.secretRef the reconciler reads that Secret in the Model's own namespace (the
// reference has no namespace field: another namespace's Secret cannot be named), copies its
// credential keys (nnv1.ModelSecretKeys) into the Secret nnv1.ModelSourceSecretName of one
// namespace (the chart's release namespace), and reports the outcome in the Model's
// SourceCredentialsReady condition. The copy goes when the Model, its secretRef or the source
// Secret goes. Tenant Secrets are read one at a time, uncached (no list or watch of Secrets):
// a change to one reaches its copy within Resync.
package modelcreds

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of the condition this reconciler writes.
const FieldManager = "neuronetes-controller/modelcreds"

// DefaultResync is how often a Model's source Secret is read again.
const DefaultResync = time.Minute

// Condition reasons.
const (
	ReasonCopied         = "Copied"
	ReasonSecretNotFound = "SecretNotFound"
	ReasonKeyMissing     = "KeyMissing"
	ReasonInvalidName    = "InvalidName"
	// ReasonNamespaceNotAllowed: the controller may not read Secrets of the Model's namespace (the
	// installer grants it get only in the namespaces an admin lists).
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
)

// Reconciler keeps the copy of one Model's source credentials. Requests name the Model.
type Reconciler struct {
	// Client reads Models and the copies (cached) and writes copies and Model status.
	Client client.Client
	// Secrets reads the tenants' source Secrets, uncached (get only).
	Secrets client.Reader
	// Namespace holds the copies.
	Namespace string
	// WatchNamespace, when set, is the one namespace whose Models the manager caches (the
	// controller's --namespace); copies naming a Model elsewhere are ignored.
	WatchNamespace string
	// Resync is how often a source Secret is read again; 0 means DefaultResync.
	Resync time.Duration
}

// Desired is the copy of src's credential keys for m in namespace ns.
func Desired(m *nnv1.Model, src *corev1.Secret, ns string) *corev1.Secret {
	data := map[string][]byte{}
	for _, k := range nnv1.ModelSecretKeys {
		if v, ok := src.Data[k]; ok {
			data[k] = v
		}
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: nnv1.ModelSourceSecretName(m.Namespace, m.Name), Namespace: ns,
			Labels: map[string]string{nnv1.ManagedByLabel: nnv1.ManagedByController, nnv1.ModelSourceLabel: "true"},
			Annotations: map[string]string{
				nnv1.ModelSourceNamespaceAnnotation: m.Namespace,
				nnv1.ModelSourceNameAnnotation:      m.Name,
				nnv1.ModelSourceUIDAnnotation:       string(m.UID),
				nnv1.ModelSourceSecretAnnotation:    src.Name,
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// MissingKeys lists the keys uri needs that src lacks (or holds empty).
func MissingKeys(uri string, src *corev1.Secret) []string {
	var out []string
	for _, k := range nnv1.ModelSecretRequiredKeys(uri) {
		if len(src.Data[k]) == 0 {
			out = append(out, k)
		}
	}
	return out
}

// Reconcile brings one Model's copy and condition in line with its source Secret.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx).WithValues("model", req.NamespacedName)
	copyKey := types.NamespacedName{Namespace: r.Namespace, Name: nnv1.ModelSourceSecretName(req.Namespace, req.Name)}
	var m nnv1.Model
	switch err := r.Client.Get(ctx, req.NamespacedName, &m); {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, r.deleteCopy(ctx, copyKey, "the Model is gone")
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading Model %s: %w", req.NamespacedName, err)
	}
	ref := m.Spec.Source.SecretRef
	if ref == nil || m.DeletionTimestamp != nil {
		if err := r.deleteCopy(ctx, copyKey, "the Model names no spec.source.secretRef"); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.setCondition(ctx, &m, nil)
	}
	cond, err := r.sync(ctx, &m, ref.Name, copyKey)
	if err != nil {
		return reconcile.Result{}, err
	}
	if cond.Status != metav1.ConditionTrue {
		log.V(2).Info("Model source credentials not copied", "reason", cond.Reason, "message", cond.Message)
	}
	if err := r.setCondition(ctx, &m, cond); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: r.resync()}, nil
}

// sync reads the source Secret (in m's namespace, always) and writes or deletes the copy; the
// returned condition says which and why.
func (r *Reconciler) sync(ctx context.Context, m *nnv1.Model, secret string, copyKey types.NamespacedName) (*metav1.Condition, error) {
	cond := &metav1.Condition{Type: nnv1.ModelConditionSourceCredentials, Status: metav1.ConditionFalse, ObservedGeneration: m.Generation}
	srcKey := types.NamespacedName{Namespace: m.Namespace, Name: secret}
	if errs := validation.IsDNS1123Subdomain(secret); len(errs) > 0 {
		cond.Reason = ReasonInvalidName
		cond.Message = fmt.Sprintf("spec.source.secretRef.name %q is not a Secret name: %s", secret, strings.Join(errs, "; "))
		return cond, r.deleteCopy(ctx, copyKey, cond.Message)
	}
	var src corev1.Secret
	switch err := r.Secrets.Get(ctx, srcKey, &src); {
	case apierrors.IsNotFound(err):
		cond.Reason = ReasonSecretNotFound
		cond.Message = fmt.Sprintf("Secret %s named by spec.source.secretRef does not exist in the Model's namespace", srcKey)
		return cond, r.deleteCopy(ctx, copyKey, cond.Message)
	case apierrors.IsForbidden(err):
		cond.Reason = ReasonNamespaceNotAllowed
		cond.Message = fmt.Sprintf("the controller may not read Secret %s named by spec.source.secretRef: namespace %s is not one whose Models an admin lets name source Secrets (Helm value controller.modelSourceNamespaces)", srcKey, m.Namespace)
		return cond, r.deleteCopy(ctx, copyKey, cond.Message)
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s of Model %s/%s: %w", srcKey, m.Namespace, m.Name, err)
	}
	if missing := MissingKeys(m.Spec.Source.URI, &src); len(missing) > 0 {
		cond.Reason = ReasonKeyMissing
		cond.Message = fmt.Sprintf("Secret %s named by spec.source.secretRef lacks the key %s (needed for spec.source.uri %s)",
			srcKey, strings.Join(missing, ", "), schemeOf(m.Spec.Source.URI))
		return cond, r.deleteCopy(ctx, copyKey, cond.Message)
	}
	if err := r.writeCopy(ctx, Desired(m, &src, r.Namespace)); err != nil {
		return nil, err
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, ReasonCopied
	cond.Message = fmt.Sprintf("credentials of Secret %s copied to %s for the node agents", srcKey, copyKey)
	return cond, nil
}

// writeCopy creates want or brings the existing copy to it. A Secret of that name without the
// managed-by label is not the controller's: it is left alone and reported.
func (r *Reconciler) writeCopy(ctx context.Context, want *corev1.Secret) error {
	var cur corev1.Secret
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &cur); {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) { // invisible to the label-selected cache: not ours
				return fmt.Errorf("secret %s/%s exists without %s=%s: not the controller's copy, left alone", want.Namespace, want.Name, nnv1.ManagedByLabel, nnv1.ManagedByController)
			}
			return fmt.Errorf("creating Secret %s/%s: %w", want.Namespace, want.Name, err)
		}
		klog.FromContext(ctx).Info("Copied Model source credentials", "secret", klog.KObj(want))
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s/%s: %w", want.Namespace, want.Name, err)
	}
	if cur.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController {
		return fmt.Errorf("secret %s/%s exists without %s=%s: not the controller's copy, left alone", cur.Namespace, cur.Name, nnv1.ManagedByLabel, nnv1.ManagedByController)
	}
	if maps.Equal(cur.Labels, want.Labels) && maps.Equal(cur.Annotations, want.Annotations) &&
		cur.Type == want.Type && maps.EqualFunc(cur.Data, want.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
		return nil
	}
	cur.Labels, cur.Annotations, cur.Data = want.Labels, want.Annotations, want.Data
	if err := r.Client.Update(ctx, &cur); err != nil {
		return fmt.Errorf("updating Secret %s/%s: %w", cur.Namespace, cur.Name, err)
	}
	klog.FromContext(ctx).Info("Updated Model source credentials", "secret", klog.KObj(&cur))
	return nil
}

// deleteCopy deletes the copy at key when it exists and is the controller's.
func (r *Reconciler) deleteCopy(ctx context.Context, key types.NamespacedName, why string) error {
	var cur corev1.Secret
	switch err := r.Client.Get(ctx, key, &cur); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if cur.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController {
		return nil
	}
	if err := r.Client.Delete(ctx, &cur); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting Secret %s: %w", key, err)
	}
	klog.FromContext(ctx).Info("Deleted Model source credentials", "secret", key, "why", why)
	return nil
}

// setCondition applies cond as this reconciler's one condition of m (server-side apply under
// FieldManager, so the node agents' status.nodes entries are untouched); nil removes it. The
// transition time is kept while the status stays the same, and an unchanged condition is not
// written again.
func (r *Reconciler) setCondition(ctx context.Context, m *nnv1.Model, cond *metav1.Condition) error {
	cur := meta.FindStatusCondition(m.Status.Conditions, nnv1.ModelConditionSourceCredentials)
	conds := []any{}
	if cond != nil {
		cond.LastTransitionTime = metav1.Now()
		if cur != nil && cur.Status == cond.Status {
			if cur.Reason == cond.Reason && cur.Message == cond.Message && cur.ObservedGeneration == cond.ObservedGeneration {
				return nil
			}
			cond.LastTransitionTime = cur.LastTransitionTime
		}
		conds = append(conds, map[string]any{
			"type": cond.Type, "status": string(cond.Status), "reason": cond.Reason, "message": cond.Message,
			"observedGeneration": cond.ObservedGeneration, "lastTransitionTime": cond.LastTransitionTime.UTC().Format(time.RFC3339),
		})
	} else if cur == nil {
		return nil
	}
	obj := map[string]any{
		"apiVersion": nnv1.GroupVersion.String(), "kind": "Model",
		"metadata": map[string]any{"name": m.Name, "namespace": m.Namespace},
		"status":   map[string]any{"conditions": conds},
	}
	u := &unstructured.Unstructured{Object: obj}
	if err := r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("writing condition %s of Model %s/%s: %w", nnv1.ModelConditionSourceCredentials, m.Namespace, m.Name, err)
	}
	return nil
}

func (r *Reconciler) resync() time.Duration {
	if r.Resync > 0 {
		return r.Resync
	}
	return DefaultResync
}

// schemeOf is the scheme part of uri, for messages ("s3://").
func schemeOf(uri string) string {
	if i := strings.Index(uri, "://"); i > 0 {
		return uri[:i+3]
	}
	return uri
}
