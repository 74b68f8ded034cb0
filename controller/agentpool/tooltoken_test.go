package agentpool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// TestBuildPodToolToken: every pool pod gets the tool proxy's projected token (its audience, the
// apiserver's minimum lifetime) mounted read-only in each template container with its path in
// the environment; a template that brings its own volume of that name, mount or variable keeps it.
func TestBuildPodToolToken(t *testing.T) {
	own := testClass(nil)
	own.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: nnv1.ToolTokenFileEnv, Value: "/mine"}}
	own.Spec.Template.Spec.Containers = append(own.Spec.Template.Spec.Containers, corev1.Container{Name: "tools", Image: "x"})
	replaced := testClass(nil)
	replaced.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: nnv1.ToolTokenVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	for _, tc := range []struct {
		name     string
		class    *nnv1.AgentClass
		wantProj bool
		env      []string // per container
	}{
		{"plain template", testClass(nil), true, []string{nnv1.ToolTokenFile}},
		{"own variable, second container", own, true, []string{"/mine", nnv1.ToolTokenFile}},
		{"own volume of that name", replaced, false, []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := buildPod(testPool(1), "pool-0", warmpool.Serving, podBuild{class: tc.class})
			if err != nil {
				t.Fatal(err)
			}
			var vols []corev1.Volume
			for _, v := range pod.Spec.Volumes {
				if v.Name == nnv1.ToolTokenVolume {
					vols = append(vols, v)
				}
			}
			if len(vols) != 1 {
				t.Fatalf("%d volumes named %s", len(vols), nnv1.ToolTokenVolume)
			}
			if p := vols[0].Projected; (p != nil) != tc.wantProj {
				t.Fatalf("volume %+v, want projected %v", vols[0], tc.wantProj)
			} else if p != nil {
				sa := p.Sources[0].ServiceAccountToken
				if sa == nil || sa.Audience != nnv1.ToolProxyAudience || sa.ExpirationSeconds == nil || *sa.ExpirationSeconds != 600 || sa.Path != "token" {
					t.Fatalf("token projection %+v", p.Sources[0])
				}
			}
			for i, c := range pod.Spec.Containers {
				env := ""
				for _, e := range c.Env {
					if e.Name == nnv1.ToolTokenFileEnv {
						env = e.Value
					}
				}
				mounted := false
				for _, m := range c.VolumeMounts {
					mounted = mounted || (m.Name == nnv1.ToolTokenVolume && m.MountPath == nnv1.ToolTokenDir && m.ReadOnly)
				}
				if tc.wantProj && (env != tc.env[i] || !mounted) {
					t.Errorf("container %s: %s=%q mounted %v, want %q and a read-only mount", c.Name, nnv1.ToolTokenFileEnv, env, mounted, tc.env[i])
				}
				if !tc.wantProj && (env != "" || mounted) {
					t.Errorf("container %s got the token although the template has its own volume", c.Name)
				}
			}
		})
	}
}
