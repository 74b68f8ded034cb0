package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/route"
)

func pod(name, pool, state, ip string, ready bool, mut ...func(*corev1.Pod)) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{v1alpha1.PoolLabel: pool, v1alpha1.StateLabel: state}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Ports: []corev1.ContainerPort{{ContainerPort: 9000}, {Name: "http", ContainerPort: 8000}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
	for _, m := range mut {
		m(&p)
	}
	return p
}

func TestBuildTable(t *testing.T) {
	now := metav1.Now()
	dec := func(s string) *v1alpha1.Decimal { d := v1alpha1.Decimal(s); return &d }
	o := Objects{
		Classes: []v1alpha1.AgentClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "ns"}, Spec: v1alpha1.AgentClassSpec{ModelRef: &v1alpha1.LocalObjectReference{Name: "llama"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}},
		},
		Pools: []v1alpha1.AgentPool{
			{ObjectMeta: metav1.ObjectMeta{Name: "chat-a", Namespace: "ns"}, Spec: v1alpha1.AgentPoolSpec{AgentClassRef: &v1alpha1.LocalObjectReference{Name: "chat"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "ns", DeletionTimestamp: &now, Finalizers: []string{"x"}}},
		},
		Pods: []corev1.Pod{
			pod("a-1", "chat-a", "serving", "10.0.0.1", true),
			pod("a-2", "chat-a", "serving", "10.0.0.2", false),
			pod("a-3", "chat-a", "warm", "10.0.0.3", true),
			pod("a-4", "chat-a", "draining", "10.0.0.4", true),
			pod("a-5", "chat-a", "serving", "10.0.0.5", true, func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
			pod("a-6", "chat-a", "serving", "", true),
			pod("d-1", "demo", "serving", "10.0.1.1", true, func(p *corev1.Pod) {
				p.Annotations = map[string]string{PortAnnotation: "7000", metricsPortAnnotation: "7001", metricsPathAnnotation: "/m"}
			}),
		},
		Policies: []v1alpha1.RoutingPolicy{
			{ObjectMeta: metav1.ObjectMeta{Name: "class", Namespace: "ns", CreationTimestamp: metav1.NewTime(time.Unix(100, 0))},
				Spec: v1alpha1.RoutingPolicySpec{TargetRef: v1alpha1.PolicyTargetRef{Kind: "AgentClass", Name: "chat"}, Priority: "low",
					Scoring:     &v1alpha1.ScoringPolicy{PrefixCache: dec("5")},
					SessionKeys: []v1alpha1.SessionKeySource{{Body: "user"}},
					Pricing:     &v1alpha1.Pricing{InputPerMillionTokens: "1", OutputPerMillionTokens: "2"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", CreationTimestamp: metav1.NewTime(time.Unix(200, 0))},
				Spec: v1alpha1.RoutingPolicySpec{TargetRef: v1alpha1.PolicyTargetRef{Kind: "AgentPool", Name: "chat-a"}, Priority: "high",
					Affinity: &v1alpha1.AffinityPolicy{PinTTL: "10m", LoadFactor: "bad"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "newer", Namespace: "ns", CreationTimestamp: metav1.NewTime(time.Unix(300, 0))},
				Spec: v1alpha1.RoutingPolicySpec{TargetRef: v1alpha1.PolicyTargetRef{Kind: "AgentPool", Name: "chat-a"}, Priority: "low"}},
		},
	}
	snap, errs := BuildTable(o, route.DefaultPolicy())
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.affinity.loadFactor") || !strings.Contains(errs[0].Error(), "ns/pool") {
		t.Fatalf("errors %v", errs)
	}
	chat := snap.Resolve("ns", "llama")
	if len(chat) != 1 || chat[0].AgentClass != "chat" {
		t.Fatalf("llama -> %v", chat)
	}
	p := chat[0]
	if len(p.Endpoints) != 1 || p.Endpoints[0].Addr != "10.0.0.1:8000" || p.Endpoints[0].MetricsURL != "http://10.0.0.1:8000/metrics" {
		t.Fatalf("endpoints %+v (only serving, ready, live pods with an IP; the port named http)", p.Endpoints)
	}
	pol := p.Policy
	if pol.Priority != route.PriorityHigh || pol.Weights.PrefixCache != 5 || pol.PinTTL != 10*time.Minute ||
		pol.LoadFactor != 0.25 || pol.SessionKeys[0].Body != "user" || pol.InputPrice != 1e-6 || pol.OutputPrice != 2e-6 {
		t.Fatalf("policy %+v (pool over class over defaults; the oldest pool policy wins)", pol)
	}
	demo := snap.Resolve("ns", "demo")
	if len(demo) != 1 || demo[0].Endpoints[0].Addr != "10.0.1.1:7000" || demo[0].Endpoints[0].MetricsURL != "http://10.0.1.1:7001/m" {
		t.Fatalf("demo (class without modelRef: model id is the class name) %+v", demo)
	}
	if _, ok := snap.Pool(route.PoolRef{Namespace: "ns", Name: "gone"}); ok {
		t.Fatal("deleted pool routed")
	}
}

func TestBuildDirectory(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	i32 := func(v int32) *int32 { return &v }
	tenants := []v1alpha1.Tenant{
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}, Spec: v1alpha1.TenantSpec{Models: []string{"*"},
			APIKeys: []v1alpha1.APIKeySource{{SecretName: "b-keys"}, {SecretName: "missing"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}, Spec: v1alpha1.TenantSpec{Models: []string{"llama"},
			APIKeys:           []v1alpha1.APIKeySource{{SecretName: "a-keys"}},
			OIDC:              []v1alpha1.OIDCIdentity{{Issuer: "https://i", Audience: "gw", Claim: "team"}},
			Quota:             &v1alpha1.TenantQuota{TokensPerMinute: i64(1000), MaxConcurrent: i32(4)},
			PoolQuotas:        []v1alpha1.PoolQuota{{Pool: "big", Quota: v1alpha1.TenantQuota{RequestsPerMinute: i64(10)}}},
			AllowedPriorities: []v1alpha1.Priority{"high"}}},
	}
	secrets := []corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "a-keys", Namespace: "ns"}, Data: map[string][]byte{"k1": []byte("sk-a\n"), "k2": []byte("sha256:" + access.HashKey("sk-a2"))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b-keys", Namespace: "ns"}, Data: map[string][]byte{"dup": []byte("sk-a"), "bad": []byte("sha256:12")}},
	}
	d, errs := BuildDirectory(tenants, SecretKeySets(secrets), false)
	if len(errs) != 3 {
		t.Fatalf("errors %v (missing Secret, duplicate key, bad hash)", errs)
	}
	a, ok := d.ByKey("sk-a")
	if !ok || a.Name != "a" {
		t.Fatal("sk-a belongs to the first tenant in name order")
	}
	if a2, _ := d.ByKey("sk-a2"); a2 != a {
		t.Fatal("pre-hashed key")
	}
	if !a.Allows("llama") || a.Allows("other") || a.QuotaFor("x").TokensPerMinute != 1000 || a.QuotaFor("big").RequestsPerMinute != 10 ||
		a.QuotaFor("big").TokensPerMinute != 0 || !a.Priorities[route.PriorityHigh] || a.Priorities[route.PriorityLow] {
		t.Fatalf("tenant a %+v", a)
	}
	if len(d.OIDC) != 1 || d.OIDC[0].Tenant != a {
		t.Fatalf("oidc %v", d.OIDC)
	}
	for _, e := range errs {
		if strings.Contains(e.Error(), "sk-a") {
			t.Fatalf("an error shows a key: %v", e)
		}
	}
}

// TestFallbackOf: the controller's status.cost.fallback becomes the pool's route fallback, in
// the pool's own namespace; a fallback to itself or without a name is none.
func TestFallbackOf(t *testing.T) {
	pool := func(fb *v1alpha1.CostFallback) *v1alpha1.AgentPool {
		p := &v1alpha1.AgentPool{}
		p.Namespace, p.Name = "ns", "big"
		if fb != nil {
			p.Status.Cost = &v1alpha1.CostStatus{Fallback: fb}
		}
		return p
	}
	if fallbackOf(pool(nil)) != nil {
		t.Fatal("no status: a fallback")
	}
	for _, fb := range []*v1alpha1.CostFallback{{}, {PoolRef: v1alpha1.LocalObjectReference{Name: "big"}, Scope: v1alpha1.FallbackAllSessions}} {
		if fallbackOf(pool(fb)) != nil {
			t.Fatalf("fallback %+v is used", fb)
		}
	}
	got := fallbackOf(pool(&v1alpha1.CostFallback{PoolRef: v1alpha1.LocalObjectReference{Name: "small"}, Scope: v1alpha1.FallbackAllSessions, Reason: "BudgetExceeded"}))
	if got == nil || got.Pool != (route.PoolRef{Namespace: "ns", Name: "small"}) || !got.AllSessions || got.Reason != "BudgetExceeded" {
		t.Fatalf("fallback %+v", got)
	}
	if got := fallbackOf(pool(&v1alpha1.CostFallback{PoolRef: v1alpha1.LocalObjectReference{Name: "small"}, Scope: v1alpha1.FallbackNewSessions})); got == nil || got.AllSessions {
		t.Fatalf("NewSessions fallback %+v", got)
	}
}
