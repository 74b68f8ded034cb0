package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func agentPod(labels, ann map[string]string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels, Annotations: ann}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "x"})
	}
	return p
}

func TestMutate(t *testing.T) {
	off := false
	tests := []struct {
		name       string
		pod        *corev1.Pod
		cfg        *nnv1.SidecarConfig
		want       bool
		containers int
		volumes    int
	}{
		{"agentclass pod", agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil, "agent"), nil, true, 1, 1},
		{"opt-in label", agentPod(map[string]string{nnv1.InjectSidecarLabel: "true"}, nil, "agent"), nil, true, 1, 1},
		{"opt-in label false", agentPod(map[string]string{nnv1.InjectSidecarLabel: "false"}, nil, "agent"), nil, false, 1, 0},
		{"no label", agentPod(nil, nil, "agent"), nil, false, 1, 0},
		{"already annotated", agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, map[string]string{nnv1.SidecarInjectedAnnotation: "img"}, "agent"), nil, false, 1, 0},
		{"already has container", agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil, "agent", SidecarContainerName), nil, false, 2, 0},
		{"class opts out", agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil, "agent"), &nnv1.SidecarConfig{Inject: &off}, false, 1, 0},
		{"class keys secret", agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil, "agent"), &nnv1.SidecarConfig{KeysSecretName: "k", RedisAddr: "10.88.0.1:6379"}, true, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj := &Injector{RedisAddr: "default:6379", ProbeCommand: DefaultProbeCommand}
			got, err := inj.Mutate(tt.pod, tt.cfg)
			if err != nil || got != tt.want {
				t.Fatalf("Mutate = %v, %v; want %v", got, err, tt.want)
			}
			if n := len(tt.pod.Spec.Containers); n != tt.containers {
				t.Fatalf("containers = %d, want %d", n, tt.containers)
			}
			if n := len(tt.pod.Spec.Volumes); n != tt.volumes {
				t.Fatalf("volumes = %d, want %d", n, tt.volumes)
			}
			if !got {
				return
			}
			if len(tt.pod.Spec.InitContainers) != 1 {
				t.Fatalf("init containers = %d, want the sidecar", len(tt.pod.Spec.InitContainers))
			}
			agent, sc := tt.pod.Spec.Containers[0], tt.pod.Spec.InitContainers[0]
			if sc.Name != SidecarContainerName || sc.Image != DefaultSidecarImage {
				t.Errorf("sidecar = %s %s", sc.Name, sc.Image)
			}
			// A native sidecar: restarted as a sidecar, started (its probe passing) before the agent.
			if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("sidecar restartPolicy = %v, want Always (a native sidecar)", sc.RestartPolicy)
			}
			if sc.StartupProbe == nil || sc.StartupProbe.Exec == nil || len(sc.StartupProbe.Exec.Command) < 2 || sc.StartupProbe.Exec.Command[1] != "probe" {
				t.Errorf("sidecar startupProbe = %+v, want the exec probe", sc.StartupProbe)
			}
			env := map[string]corev1.EnvVar{}
			for _, e := range sc.Env {
				env[e.Name] = e
			}
			wantRedis := "default:6379"
			if tt.cfg != nil && tt.cfg.RedisAddr != "" {
				wantRedis = tt.cfg.RedisAddr
			}
			if env["NEURONETES_REDIS_ADDR"].Value != wantRedis || env["NEURONETES_KEYS_DIR"].Value != KeysDir ||
				env["NEURONETES_NAMESPACE"].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
				t.Errorf("sidecar env = %+v", sc.Env)
			}
			if len(agent.Env) < 1 || agent.Env[0].Name != "NEURONETES_SIDECAR_URL" || agent.Env[0].Value != SidecarURL {
				t.Errorf("agent env = %+v", agent.Env)
			}
			// Idempotence: a second pass changes nothing.
			again, _ := inj.Mutate(tt.pod, tt.cfg)
			if again || len(tt.pod.Spec.Containers) != tt.containers || len(tt.pod.Spec.InitContainers) != 1 {
				t.Errorf("second Mutate changed the pod")
			}
		})
	}
}

func TestMutateDefaultKeysSecret(t *testing.T) {
	pod := agentPod(map[string]string{nnv1.AgentClassLabel: "c"}, nil, "agent")
	inj := &Injector{KeysSecret: "default-keys"}
	if ok, err := inj.Mutate(pod, &nnv1.SidecarConfig{RedisAddr: "r:1"}); !ok || err != nil {
		t.Fatalf("Mutate = %v, %v", ok, err)
	}
	var secret string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secret = v.Secret.SecretName
			if v.Secret.Optional == nil || !*v.Secret.Optional {
				t.Error("keys volume is not optional")
			}
		}
	}
	if secret != "default-keys" {
		t.Fatalf("keys secret = %q, want default-keys", secret)
	}
	sc := pod.Spec.InitContainers[0]
	if m := sc.VolumeMounts[len(sc.VolumeMounts)-1]; m.MountPath != KeysDir || !m.ReadOnly {
		t.Errorf("keys mount = %+v", m)
	}
}

func TestHandlePatches(t *testing.T) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	inj := &Injector{Decoder: admission.NewDecoder(s)}
	raw, _ := json.Marshal(agentPod(map[string]string{nnv1.InjectSidecarLabel: "true"}, nil, "agent"))
	resp := inj.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Namespace: "ns", Object: runtime.RawExtension{Raw: raw},
	}})
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("response = %+v", resp)
	}
	raw, _ = json.Marshal(agentPod(nil, nil, "agent"))
	resp = inj.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Object: runtime.RawExtension{Raw: raw}}})
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("unlabelled pod response = %+v", resp)
	}
	resp = inj.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Object: runtime.RawExtension{Raw: []byte("{bad")}}})
	if resp.Allowed {
		t.Fatal("bad object allowed")
	}
}

func TestEnsureCerts(t *testing.T) {
	dir := t.TempDir()
	ca1, err := EnsureCerts(dir, []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca1)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: roots}); err != nil {
		t.Fatalf("verify: %v", err)
	}
	// Reused when valid for the same hosts.
	ca2, err := EnsureCerts(dir, []string{"127.0.0.1"})
	if err != nil || string(ca2) != string(ca1) {
		t.Fatalf("certs not reused: %v", err)
	}
	// Regenerated for new hosts and when corrupted.
	ca3, err := EnsureCerts(dir, []string{"webhook.ns.svc"})
	if err != nil || string(ca3) == string(ca1) {
		t.Fatalf("certs not regenerated for new host: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca4, err := EnsureCerts(dir, []string{"webhook.ns.svc"})
	if err != nil || string(ca4) == string(ca3) {
		t.Fatalf("certs not regenerated after corruption: %v", err)
	}
}
