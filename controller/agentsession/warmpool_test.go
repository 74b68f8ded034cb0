package agentsession

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestPlanWarmPool(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := func(name, hash string, ready bool, age int) WarmPod {
		return WarmPod{Name: name, Hash: hash, Ready: ready, Created: t0.Add(-time.Duration(age) * time.Second)}
	}
	term := p("t", "h", true, 9)
	term.Terminating = true
	done := p("d", "h", false, 9)
	done.Done = true
	for _, tc := range []struct {
		name    string
		pods    []WarmPod
		pending int
		size    int
		want    PoolPlan
	}{
		{"empty pool fills", nil, 0, 3, PoolPlan{Create: 3}},
		{"full pool", []WarmPod{p("a", "h", true, 1), p("b", "h", false, 2)}, 0, 2, PoolPlan{}},
		{"a claimed pod is refilled", []WarmPod{p("a", "h", true, 1)}, 0, 2, PoolPlan{Create: 1}},
		{"pending pods count", []WarmPod{p("a", "h", true, 1)}, 1, 2, PoolPlan{}},
		{"stale hash retired and replaced", []WarmPod{p("a", "old", true, 1), p("b", "h", true, 1)}, 0, 2, PoolPlan{Create: 1, Retire: []string{"a"}}},
		{"finished pod retired and replaced", []WarmPod{done, p("b", "h", true, 1)}, 0, 2, PoolPlan{Create: 1, Retire: []string{"d"}}},
		{"terminating pods neither count nor are retired", []WarmPod{term}, 0, 1, PoolPlan{Create: 1}},
		{"shrink: not-ready first, then newest", []WarmPod{p("old", "h", true, 50), p("new", "h", true, 1), p("slow", "h", false, 90)}, 0, 1,
			PoolPlan{Retire: []string{"new", "slow"}}},
		{"size 0 retires all", []WarmPod{p("a", "h", true, 1), p("b", "x", true, 1)}, 0, 0, PoolPlan{Retire: []string{"a", "b"}}},
		{"pending over size retires live", []WarmPod{p("a", "h", true, 1)}, 2, 2, PoolPlan{Retire: []string{"a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanWarmPool(tc.pods, tc.pending, tc.size, "h")
			if got.Create != tc.want.Create || !reflect.DeepEqual(got.Retire, tc.want.Retire) {
				t.Fatalf("PlanWarmPool = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestClaimCandidates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := func(name, hash string, ready bool, age int) WarmPod {
		return WarmPod{Name: name, Hash: hash, Ready: ready, Created: t0.Add(-time.Duration(age) * time.Second)}
	}
	term := p("term", "h", true, 9)
	term.Terminating = true
	done := p("done", "h", true, 9)
	done.Done = true
	for _, tc := range []struct {
		name string
		pods []WarmPod
		want []string
	}{
		{"none", nil, nil},
		{"only ready of the current hash, oldest first", []WarmPod{p("young", "h", true, 1), p("stale", "x", true, 99), p("starting", "h", false, 50), p("old", "h", true, 30)},
			[]string{"old", "young"}},
		{"terminating and finished pods are not claimed", []WarmPod{term, done, p("a", "h", true, 1)}, []string{"a"}},
		{"same age: by name", []WarmPod{p("b", "h", true, 5), p("a", "h", true, 5)}, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ClaimCandidates(tc.pods, "h")
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ClaimCandidates = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCanClaim(t *testing.T) {
	pooled := func(rc *string, allowed ...string) *nnv1.AgentClass {
		c := testClass(rc, allowed...)
		c.Spec.Sessions = &nnv1.SessionsConfig{WarmPoolSize: 2}
		return c
	}
	drained := testSession(nil, "")
	drained.Status.DrainedNode = "n1"
	for _, tc := range []struct {
		name    string
		s       *nnv1.AgentSession
		class   *nnv1.AgentClass
		want    bool
		whyPart string
	}{
		{"plain session", testSession(nil, ""), pooled(nil), true, ""},
		{"no pool", testSession(nil, ""), testClass(nil), false, "no warm pool"},
		{"default workspace named", testSession(nil, "1Gi"), pooled(nil), true, ""},
		{"other workspace", testSession(nil, "2Gi"), pooled(nil), false, "spec.workspaceSizeLimit"},
		{"runtime class override", testSession(ptr("gvisor"), ""), pooled(ptr("runc"), "gvisor"), false, "spec.runtimeClassName"},
		{"runtime class equal to the template's", testSession(ptr("runc"), ""), pooled(ptr("runc"), "runc"), true, ""},
		{"runtime class not allowed", testSession(ptr("runc"), ""), pooled(ptr("runc")), false, "spec.runtimeClassName"},
		{"drained", drained, pooled(nil), false, "drained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := CanClaim(tc.s, tc.class)
			if got != tc.want || (tc.whyPart != "" && !strings.Contains(why, tc.whyPart)) {
				t.Fatalf("CanClaim = %v %q, want %v (%q)", got, why, tc.want, tc.whyPart)
			}
		})
	}
}

func TestTemplateHash(t *testing.T) {
	a, b := testClass(nil), testClass(nil)
	if TemplateHash(a) != TemplateHash(b) {
		t.Fatal("equal classes hash differently")
	}
	b.Spec.Sessions = &nnv1.SessionsConfig{WarmPoolSize: 5}
	if TemplateHash(a) != TemplateHash(b) {
		t.Fatal("the pool size changed the template hash (it would retire every pod on a resize)")
	}
	b.Spec.Template.Spec.Containers[0].Image = "demo:2"
	if TemplateHash(a) == TemplateHash(b) {
		t.Fatal("a template change kept the hash")
	}
	c := testClass(nil)
	c.Spec.Sidecar = &nnv1.SidecarConfig{RedisAddr: "r:6379"}
	if TemplateHash(a) == TemplateHash(c) {
		t.Fatal("a sidecar change kept the hash")
	}
}

func TestBuildWarmPod(t *testing.T) {
	class := testClass(ptr("runc"))
	pod, err := BuildWarmPod(class, "warmpool-demo-abcde", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "warmpool-demo-abcde" || pod.Spec.ServiceAccountName != "warmpool-demo-abcde" {
		t.Errorf("name %q, serviceAccount %q: want both the warm pod's own", pod.Name, pod.Spec.ServiceAccountName)
	}
	if _, ok := pod.Labels[nnv1.SessionLabel]; ok || pod.Labels[nnv1.WarmPoolLabel] != "demo" || pod.Labels[nnv1.WarmPoolTemplateHashLabel] != "h1" || pod.Labels[nnv1.AgentClassLabel] != "demo" {
		t.Errorf("labels %v", pod.Labels)
	}
	// The same rendering as a session's pod: no token, restricted, workspace, tool token.
	if *pod.Spec.AutomountServiceAccountToken || !*pod.Spec.SecurityContext.RunAsNonRoot || deref(pod.Spec.RuntimeClassName) != "runc" {
		t.Errorf("spec %+v", pod.Spec)
	}
	var ws *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == WorkspaceVolume {
			ws = &pod.Spec.Volumes[i]
		}
	}
	if ws == nil || ws.EmptyDir.SizeLimit.Cmp(DefaultWorkspaceSizeLimit) != 0 {
		t.Errorf("workspace %+v", ws)
	}
	if _, err := BuildWarmPod(&nnv1.AgentClass{}, "x", "h"); err == nil || !strings.Contains(err.Error(), "spec.template.spec.containers") {
		t.Errorf("empty template: %v, want an error naming spec.template.spec.containers", err)
	}
}
