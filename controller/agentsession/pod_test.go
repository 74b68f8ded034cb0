package agentsession

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func testClass(rc *string, allowed ...string) *nnv1.AgentClass {
	return &nnv1.AgentClass{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "a"},
		Spec: nnv1.AgentClassSpec{
			AllowedRuntimeClassNames: allowed,
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"app": "demo", nnv1.PoolLabel: "p"},
					Annotations: map[string]string{nnv1.RestoreFromAnnotation: "other"},
				},
				Spec: corev1.PodSpec{RuntimeClassName: rc, Containers: []corev1.Container{{Name: "agent", Image: "demo", Args: []string{"--listen=:8000"},
					ReadinessProbe: &corev1.Probe{}, LivenessProbe: &corev1.Probe{}}}},
			},
		},
	}
}

func testSession(rc *string, ws string) *nnv1.AgentSession {
	s := &nnv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: "a"},
		Spec:       nnv1.AgentSessionSpec{ClassRef: nnv1.LocalObjectReference{Name: "demo"}, RuntimeClassName: rc},
	}
	if ws != "" {
		q := resource.MustParse(ws)
		s.Spec.WorkspaceSizeLimit = &q
	}
	return s
}

func ptr(s string) *string { return &s }

func TestBuildPod(t *testing.T) {
	pod, err := BuildPod(testSession(nil, "2Gi"), testClass(ptr("gvisor")), 3, "")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "s1-3" || pod.Namespace != "a" {
		t.Errorf("pod %s/%s, want a/s1-3", pod.Namespace, pod.Name)
	}
	if pod.Labels[nnv1.SessionLabel] != "s1" || pod.Labels[nnv1.AgentClassLabel] != "demo" || pod.Labels["app"] != "demo" {
		t.Errorf("labels %v", pod.Labels)
	}
	if _, ok := pod.Labels[nnv1.PoolLabel]; ok {
		t.Errorf("a session pod carries the pool label: %v", pod.Labels)
	}
	if _, ok := pod.Annotations[nnv1.RestoreFromAnnotation]; ok {
		t.Errorf("a session pod keeps the template's restore-from: %v", pod.Annotations)
	}
	if pod.Spec.ServiceAccountName != "session-s1" || pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("service account %q automount %v", pod.Spec.ServiceAccountName, pod.Spec.AutomountServiceAccountToken)
	}
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName %v, want the template's gvisor", pod.Spec.RuntimeClassName)
	}
	var ws *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == WorkspaceVolume {
			ws = &pod.Spec.Volumes[i]
		}
	}
	if ws == nil || ws.EmptyDir == nil || ws.EmptyDir.SizeLimit.String() != "2Gi" {
		t.Fatalf("workspace volume %+v", ws)
	}
	if m := pod.Spec.Containers[0].VolumeMounts; len(m) != 2 || m[0].MountPath != WorkspacePath || m[1].MountPath != nnv1.ToolTokenDir {
		t.Errorf("mounts %v, want the workspace and the tool token", m)
	}
	if pod.Spec.Containers[0].Image != "demo" || len(pod.Spec.Containers[0].Args) != 1 {
		t.Errorf("a first start runs the template's container: %+v", pod.Spec.Containers[0])
	}
	sc := pod.Spec.Containers[0].SecurityContext
	if *pod.Spec.SecurityContext.RunAsNonRoot != true || pod.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("not restricted: pod %+v container %+v", pod.Spec.SecurityContext, sc)
	}
}

// TestBuildPodHoldsForCheckpoint: the first container waits the pod's grace period in a preStop
// sleep (the window in which an evicted session is checkpointed); a template's own preStop and
// grace period are kept.
func TestBuildPodHoldsForCheckpoint(t *testing.T) {
	sleep := func(p *corev1.Pod) int64 {
		if l := p.Spec.Containers[0].Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
			return l.PreStop.Sleep.Seconds
		}
		return -1
	}
	for _, tc := range []struct {
		name  string
		edit  func(*corev1.PodSpec)
		host  string
		sleep int64
	}{
		{"default grace", func(*corev1.PodSpec) {}, "", DefaultGracePeriodSeconds},
		{"resume host pod too", func(*corev1.PodSpec) {}, "pause:test", DefaultGracePeriodSeconds},
		{"template grace", func(s *corev1.PodSpec) { g := int64(90); s.TerminationGracePeriodSeconds = &g }, "", 90},
		{"no grace, no hold", func(s *corev1.PodSpec) { g := int64(0); s.TerminationGracePeriodSeconds = &g }, "", -1},
		{"template preStop kept", func(s *corev1.PodSpec) {
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}, "", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testClass(nil)
			tc.edit(&c.Spec.Template.Spec)
			pod, err := BuildPod(testSession(nil, ""), c, 1, tc.host)
			if err != nil {
				t.Fatal(err)
			}
			if got := sleep(pod); got != tc.sleep {
				t.Fatalf("preStop sleep %d, want %d (lifecycle %+v)", got, tc.sleep, pod.Spec.Containers[0].Lifecycle)
			}
		})
	}
}

func TestBuildPodKeepsTemplateToken(t *testing.T) {
	c := testClass(nil)
	tr := true
	c.Spec.Template.Spec.AutomountServiceAccountToken = &tr
	pod, err := BuildPod(testSession(nil, ""), c, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if !*pod.Spec.AutomountServiceAccountToken {
		t.Error("the template asked for a token; the pod has none")
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == WorkspaceVolume && v.EmptyDir.SizeLimit.Cmp(DefaultWorkspaceSizeLimit) != 0 {
			t.Errorf("default workspace limit %v", v.EmptyDir.SizeLimit)
		}
	}
}

func TestRuntimeClassFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		session  *string
		tmpl     *string
		allowed  []string
		want     string
		errField string
	}{
		{"template's", nil, ptr("runc"), nil, "runc", ""},
		{"none", nil, nil, nil, "", ""},
		{"allowed override", ptr("kata"), ptr("runc"), []string{"kata", "gvisor"}, "kata", ""},
		{"override not allowed", ptr("kata"), nil, []string{"gvisor"}, "", "spec.runtimeClassName"},
		{"override without allowlist", ptr("kata"), nil, nil, "", "spec.runtimeClassName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RuntimeClassFor(testSession(tc.session, ""), testClass(tc.tmpl, tc.allowed...))
			if tc.errField != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errField) {
					t.Fatalf("err %v, want one naming %s", err, tc.errField)
				}
				if _, berr := BuildPod(testSession(tc.session, ""), testClass(tc.tmpl, tc.allowed...), 1, ""); berr == nil {
					t.Fatal("BuildPod built a pod with a refused RuntimeClass")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := deref(got); s != tc.want {
				t.Fatalf("got %q, want %q", s, tc.want)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestBuildPodResumeHost: a resume pod's first container is the host image without the
// template's arguments and liveness probe (a pause container would fail them), keeps the
// readiness probe (Ready once the restored agent serves), and carries the same mounts as the
// first pod, so the restored container finds its workspace and tool token.
func TestBuildPodResumeHost(t *testing.T) {
	first, err := BuildPod(testSession(nil, ""), testClass(nil), 1, "")
	if err != nil {
		t.Fatal(err)
	}
	pod, err := BuildPod(testSession(nil, ""), testClass(nil), 2, "pause:1")
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != "pause:1" || c.Args != nil || c.Command != nil || c.LivenessProbe != nil || c.ReadinessProbe == nil {
		t.Fatalf("host container %+v", c)
	}
	if len(c.VolumeMounts) != len(first.Spec.Containers[0].VolumeMounts) || len(c.Env) != len(first.Spec.Containers[0].Env) {
		t.Errorf("host mounts %v env %v, first pod %v %v", c.VolumeMounts, c.Env, first.Spec.Containers[0].VolumeMounts, first.Spec.Containers[0].Env)
	}
}
