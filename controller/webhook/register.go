package webhook

import (
	"context"
	"fmt"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ConfigName is the MutatingWebhookConfiguration the controller keeps.
const ConfigName = "neuronetes-sidecar-injector"

// SystemNamespaces are never sent to the webhook (its namespace selector excludes them), whatever
// labels their pods carry: a fail-closed webhook that is down must not block the cluster's own pods.
// deploy/helm/neuronetes/templates/webhook-config.yaml lists the same names.
var SystemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// Target says how the apiserver reaches the webhook: by URL (a host process) or by Service.
type Target struct {
	// URL, e.g. https://127.0.0.1:9443 (Path is appended).
	URL string
	// ServiceNamespace and ServiceName select the in-cluster Service mode.
	ServiceNamespace, ServiceName string
	// ServicePort of the Service (default 443).
	ServicePort int32
	// ConfigName of the MutatingWebhookConfiguration (default ConfigName).
	ConfigName string
	// Namespace, when set, limits injection to pods of that namespace.
	Namespace string
	// External says the configuration is created and owned by its installer (the Helm chart):
	// Register then only sets the caBundle of this package's webhooks in it, never creates it
	// and never rewrites its selectors, so the controller needs no create right.
	External bool
}

// Register creates or updates the MutatingWebhookConfiguration. Two webhooks share one endpoint:
// one for pods of an AgentClass, one for pods with the opt-in label, because an objectSelector
// cannot express "either label". Failure policy is Fail, scoped by those selectors: an opted-in
// pod is never created without its sidecar, and no other pod depends on the webhook.
func Register(ctx context.Context, c client.Client, t Target, caBundle []byte) error {
	if t.External {
		return patchCABundle(ctx, c, configName(t), caBundle)
	}
	cc := admissionregv1.WebhookClientConfig{CABundle: caBundle}
	switch {
	case t.URL != "":
		u := t.URL + Path
		cc.URL = &u
	case t.ServiceName != "":
		p, port := Path, t.ServicePort
		if port == 0 {
			port = 443
		}
		cc.Service = &admissionregv1.ServiceReference{Namespace: t.ServiceNamespace, Name: t.ServiceName, Path: &p, Port: &port}
	default:
		return fmt.Errorf("webhook target: set URL or ServiceName")
	}
	fail := admissionregv1.Fail
	none := admissionregv1.SideEffectClassNone
	timeout := int32(5)
	reinvoke := admissionregv1.NeverReinvocationPolicy
	nsSel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: SystemNamespaces,
	}}}
	if t.Namespace != "" {
		nsSel.MatchLabels = map[string]string{corev1.LabelMetadataName: t.Namespace}
	}
	mk := func(name string, sel metav1.LabelSelector) admissionregv1.MutatingWebhook {
		return admissionregv1.MutatingWebhook{
			NamespaceSelector:       nsSel,
			Name:                    name,
			ClientConfig:            cc,
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &reinvoke,
			ObjectSelector:          &sel,
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
				},
			}},
		}
	}
	name := configName(t)
	cfg := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_, err := controllerutil.CreateOrUpdate(ctx, c, cfg, func() error {
		cfg.Webhooks = []admissionregv1.MutatingWebhook{
			mk(webhookNames[0], metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: nnv1.AgentClassLabel, Operator: metav1.LabelSelectorOpExists,
			}}}),
			mk(webhookNames[1], metav1.LabelSelector{MatchLabels: map[string]string{nnv1.InjectSidecarLabel: "true"}}),
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mutatingwebhookconfiguration %s: %w", name, err)
	}
	return nil
}

// webhookNames are the webhooks Register keeps in the configuration.
var webhookNames = []string{"agentclass.sidecar.neuronetes.io", "optin.sidecar.neuronetes.io"}

func configName(t Target) string {
	if t.ConfigName == "" {
		return ConfigName
	}
	return t.ConfigName
}

// patchCABundle sets caBundle on this package's webhooks of an existing configuration. A missing
// configuration, or one without those webhooks, is an error naming what the installer must create.
func patchCABundle(ctx context.Context, c client.Client, name string, caBundle []byte) error {
	cfg := &admissionregv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, cfg); err != nil {
		return fmt.Errorf("mutatingwebhookconfiguration %s (created by the chart when the controller runs with --webhook-config-external): %w", name, err)
	}
	before := cfg.DeepCopy()
	found := 0
	for i := range cfg.Webhooks {
		for _, n := range webhookNames {
			if cfg.Webhooks[i].Name == n {
				cfg.Webhooks[i].ClientConfig.CABundle = caBundle
				found++
			}
		}
	}
	if found != len(webhookNames) {
		return fmt.Errorf("mutatingwebhookconfiguration %s has %d of the webhooks %v", name, found, webhookNames)
	}
	if err := c.Patch(ctx, cfg, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("mutatingwebhookconfiguration %s: caBundle: %w", name, err)
	}
	return nil
}
