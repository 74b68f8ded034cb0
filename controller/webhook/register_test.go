package webhook

import (
	"context"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestRegister(t *testing.T) {
	s := runtime.NewScheme()
	if err := admissionregv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		target  Target
		wantErr bool
		check   func(t *testing.T, w admissionregv1.MutatingWebhook)
	}{
		{"url mode", Target{URL: "https://127.0.0.1:9443", ConfigName: "c", Namespace: "ns1"}, false, func(t *testing.T, w admissionregv1.MutatingWebhook) {
			if *w.ClientConfig.URL != "https://127.0.0.1:9443"+Path || w.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ns1" {
				t.Errorf("webhook = %+v", w)
			}
		}},
		{"service mode", Target{ServiceNamespace: "sys", ServiceName: "ctl", ConfigName: "c"}, false, func(t *testing.T, w admissionregv1.MutatingWebhook) {
			if w.ClientConfig.Service.Name != "ctl" || *w.ClientConfig.Service.Port != 443 || *w.ClientConfig.Service.Path != Path || w.NamespaceSelector.MatchLabels != nil {
				t.Errorf("webhook = %+v", w)
			}
		}},
		{"no target", Target{ConfigName: "c"}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).Build()
			err := Register(context.Background(), c, tt.target, []byte("ca"))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Register err = %v", err)
			}
			if tt.wantErr {
				return
			}
			// Registering twice updates in place.
			if err := Register(context.Background(), c, tt.target, []byte("ca2")); err != nil {
				t.Fatal(err)
			}
			var cfg admissionregv1.MutatingWebhookConfiguration
			if err := c.Get(context.Background(), types.NamespacedName{Name: "c"}, &cfg); err != nil {
				t.Fatal(err)
			}
			if len(cfg.Webhooks) != 2 {
				t.Fatalf("webhooks = %d, want 2", len(cfg.Webhooks))
			}
			for _, w := range cfg.Webhooks {
				if !excludesSystemNamespaces(w.NamespaceSelector) {
					t.Errorf("webhook %s: namespace selector %v does not exclude %v", w.Name, w.NamespaceSelector, SystemNamespaces)
				}
				if *w.FailurePolicy != admissionregv1.Fail || string(w.ClientConfig.CABundle) != "ca2" || w.ObjectSelector == nil {
					t.Errorf("webhook %s: policy %v ca %q selector %v", w.Name, *w.FailurePolicy, w.ClientConfig.CABundle, w.ObjectSelector)
				}
				tt.check(t, w)
			}
		})
	}
}

// TestRegisterExternal: with an installer-owned configuration Register sets only caBundle, keeps
// the installer's selectors, and never creates a missing configuration.
func TestRegisterExternal(t *testing.T) {
	s := runtime.NewScheme()
	if err := admissionregv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	target := Target{ServiceNamespace: "sys", ServiceName: "ctl", ConfigName: "c", External: true}
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}}
	own := func(names ...string) *admissionregv1.MutatingWebhookConfiguration {
		cfg := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
		for _, n := range names {
			cfg.Webhooks = append(cfg.Webhooks, admissionregv1.MutatingWebhook{Name: n, NamespaceSelector: sel})
		}
		return cfg
	}
	tests := []struct {
		name    string
		objs    []client.Object
		wantErr string
	}{
		{"missing configuration is not created", nil, "not found"},
		{"configuration lacking a webhook", []client.Object{own(webhookNames[0])}, "has 1 of the webhooks"},
		{"chart-owned configuration", []client.Object{own(webhookNames...)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(tt.objs...).Build()
			err := Register(context.Background(), c, target, []byte("ca"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Register err = %v, want %q", err, tt.wantErr)
				}
				var cfg admissionregv1.MutatingWebhookConfiguration
				if gerr := c.Get(context.Background(), types.NamespacedName{Name: "c"}, &cfg); len(tt.objs) == 0 && gerr == nil {
					t.Fatalf("Register created the configuration: %+v", cfg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cfg admissionregv1.MutatingWebhookConfiguration
			if err := c.Get(context.Background(), types.NamespacedName{Name: "c"}, &cfg); err != nil {
				t.Fatal(err)
			}
			for _, w := range cfg.Webhooks {
				if string(w.ClientConfig.CABundle) != "ca" || w.NamespaceSelector == nil || w.NamespaceSelector.MatchExpressions[0].Values[0] != "kube-system" {
					t.Errorf("webhook %s: ca %q selector %v (want the installer's)", w.Name, w.ClientConfig.CABundle, w.NamespaceSelector)
				}
			}
		})
	}
}

// excludesSystemNamespaces reports whether sel rejects a namespace of every SystemNamespaces name
// (labelled as the apiserver labels it) and admits an ordinary one.
func excludesSystemNamespaces(sel *metav1.LabelSelector) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease"} {
		if s.Matches(labels.Set{"kubernetes.io/metadata.name": ns}) {
			return false
		}
	}
	allowed := "ns1"
	if sel.MatchLabels == nil {
		allowed = "team-a"
	}
	return s.Matches(labels.Set{"kubernetes.io/metadata.name": allowed})
}
