// Package webhook is the mutating admission webhook that injects the NeuroNetes sidecar into agent
// pods, plus the TLS material and registration it needs.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Sidecar contract shared with the sidecar and the demo agent.
const (
	// SidecarContainerName is the injected container's name.
	SidecarContainerName = "neuronetes-sidecar"
	// DefaultSidecarImage is the sidecar image of the local cluster.
	DefaultSidecarImage = "neuronetes.local/sidecar:dev"
	// SidecarURL is where agents reach the sidecar's HTTP API (NEURONETES_SIDECAR_URL).
	SidecarURL = "http://127.0.0.1:7070"
	// RunDir is the shared emptyDir holding the sidecar's unix socket.
	RunDir = "/var/run/neuronetes"
	// SocketPath is the sidecar's unix socket.
	SocketPath = RunDir + "/sidecar.sock"
	// KeysDir is where the encryption-keys Secret is mounted.
	KeysDir = "/etc/neuronetes/keys"
	// Path is the webhook's HTTP path.
	Path = "/mutate-v1-pod-sidecar"

	runVolume  = "neuronetes-run"
	keysVolume = "neuronetes-keys"
)

// Injector injects the sidecar. The zero value is not usable; set Decoder.
type Injector struct {
	// Client reads AgentClasses for per-class sidecar settings; nil skips the lookup.
	Client client.Reader
	// Decoder decodes admission requests.
	Decoder admission.Decoder
	// Image of the sidecar (default DefaultSidecarImage).
	Image string
	// PullPolicy of the sidecar image (default IfNotPresent).
	PullPolicy corev1.PullPolicy
	// RedisAddr is the default NEURONETES_REDIS_ADDR when the class sets none.
	RedisAddr string
	// ExtraArgs are appended to the sidecar's command line.
	ExtraArgs []string
	// RedisSecret names a Secret in the pod's namespace holding that namespace's Redis user
	// (keys "username" and "password", the user store.ACLRules describes); the sidecar reads them
	// as NEURONETES_REDIS_USERNAME and NEURONETES_REDIS_PASSWORD. Unless RedisSecretRequired, the
	// references are optional: a namespace without the Secret connects as Redis' default user.
	// Empty injects nothing.
	RedisSecret string
	// RedisSecretRequired makes the RedisSecret references required: set when the controller
	// manages the Secrets (controller/redisusers), so a sidecar never starts without its
	// namespace's user; the kubelet retries the container until the Secret exists.
	RedisSecretRequired bool
	// KeysSecret is the default encryption-keys Secret mounted at KeysDir when the AgentClass names
	// none; empty mounts nothing. The volume is optional, so a missing Secret does not block the pod.
	KeysSecret string
	// Resources of the sidecar; nil means DefaultSidecarResources. In a pod that is Guaranteed
	// before injection, the sidecar's requests equal its limits so the pod keeps its QoS class.
	Resources *corev1.ResourceRequirements
	// GoMaxProcs is the sidecar's GOMAXPROCS; 0 leaves Go's default (the CPU limit, else the
	// node's CPUs). Use DefaultGoMaxProcs.
	GoMaxProcs int
	// ProbeCommand is the exec startup and readiness probe of the sidecar (DefaultProbeCommand:
	// the sidecar binary's probe mode, since it listens on loopback and the kubelet's HTTP probes
	// reach the pod IP); empty injects no probe, and the agent then starts as soon as the sidecar's
	// process runs.
	ProbeCommand []string
	// WeightsWaitImage, when set, is the node agent image whose wait-weights init container is
	// added to pods that mount a node agent ready directory (InjectWeightsWait); it uses PullPolicy.
	WeightsWaitImage string
}

// DefaultProbeCommand runs the sidecar image's own binary in probe mode against its /healthz.
var DefaultProbeCommand = []string{"/sidecar", "probe", SidecarURL + "/healthz"}

// wantsSidecar reports whether the pod opted in: it belongs to an AgentClass or carries the
// opt-in label.
func wantsSidecar(pod *corev1.Pod) bool {
	return pod.Labels[nnv1.AgentClassLabel] != "" || pod.Labels[nnv1.InjectSidecarLabel] == "true"
}

// injected reports whether the pod already has the sidecar. Invariant: Mutate never adds a second
// sidecar, whether the annotation or only the container is present.
func injected(pod *corev1.Pod) bool {
	if pod.Annotations[nnv1.SidecarInjectedAnnotation] != "" {
		return true
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == SidecarContainerName {
			return true
		}
	}
	return false
}

// Handle implements admission.Handler.
func (i *Injector) Handle(ctx context.Context, req admission.Request) admission.Response {
	logger := klog.FromContext(ctx).WithValues("namespace", req.Namespace, "name", req.Name)
	var pod corev1.Pod
	if err := i.Decoder.Decode(req, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode pod: %w", err))
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	var cfg *nnv1.SidecarConfig
	if cls := pod.Labels[nnv1.AgentClassLabel]; cls != "" && i.Client != nil {
		var ac nnv1.AgentClass
		if err := i.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: cls}, &ac); err == nil {
			cfg = ac.Spec.Sidecar
		} else {
			logger.V(2).Info("agentclass lookup failed; using defaults", "agentclass", cls, "err", err)
		}
	}
	changed, err := i.Mutate(&pod, cfg)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	pull := i.PullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	if InjectWeightsWait(&pod, i.WeightsWaitImage, pull) {
		changed = true
		logger.V(2).Info("injected the weights wait container")
	}
	if !changed {
		return admission.Allowed("no injection needed")
	}
	out, err := json.Marshal(&pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encode pod: %w", err))
	}
	logger.V(2).Info("injected sidecar")
	return admission.PatchResponseFromRaw(req.Object.Raw, out)
}

// Mutate injects the sidecar, its volumes and the agents' env into pod. It returns false when the
// pod did not opt in, opted out through its class, or already has the sidecar. The sidecar is a
// native sidecar: the first init container, with restartPolicy Always and a startup probe, so the
// kubelet starts the agent containers only once it answers, keeps it running beside them, and
// stops it after them.
func (i *Injector) Mutate(pod *corev1.Pod, cfg *nnv1.SidecarConfig) (bool, error) {
	if !wantsSidecar(pod) || injected(pod) {
		return false, nil
	}
	if cfg != nil && cfg.Inject != nil && !*cfg.Inject {
		return false, nil
	}
	image := i.Image
	if image == "" {
		image = DefaultSidecarImage
	}
	pull := i.PullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	redis, keysSecret := i.RedisAddr, i.KeysSecret
	if cfg != nil {
		if cfg.RedisAddr != "" {
			redis = cfg.RedisAddr
		}
		if cfg.KeysSecretName != "" {
			keysSecret = cfg.KeysSecretName
		}
	}

	runMount := corev1.VolumeMount{Name: runVolume, MountPath: RunDir}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
		Name: runVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
	})
	sc := corev1.Container{
		Name:            SidecarContainerName,
		Image:           image,
		ImagePullPolicy: pull,
		Args:            append([]string(nil), i.ExtraArgs...),
		Env: []corev1.EnvVar{
			{Name: "NEURONETES_REDIS_ADDR", Value: redis},
			{Name: "NEURONETES_KEYS_DIR", Value: KeysDir},
			{Name: "NEURONETES_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"},
			}},
			{Name: "NEURONETES_AGENT_CLASS", Value: pod.Labels[nnv1.AgentClassLabel]},
		},
		VolumeMounts:    []corev1.VolumeMount{runMount},
		SecurityContext: sidecarSecurityContext(),
	}
	sc.Env = append(sc.Env, goMaxProcsEnv(i.GoMaxProcs)...)
	sc.Env = append(sc.Env, redisCredentialsEnv(i.RedisSecret, !i.RedisSecretRequired)...)
	res := DefaultSidecarResources()
	if i.Resources != nil {
		res = *i.Resources
	}
	sc.Resources = sidecarResources(pod, res) // before the sidecar joins pod.Spec.Containers
	if keysSecret != "" {
		optional := true
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name: keysVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: keysSecret, Optional: &optional,
			}},
		})
		sc.VolumeMounts = append(sc.VolumeMounts, corev1.VolumeMount{Name: keysVolume, MountPath: KeysDir, ReadOnly: true})
	}
	for j := range pod.Spec.Containers {
		c := &pod.Spec.Containers[j]
		c.Env = setEnv(c.Env, "NEURONETES_SIDECAR_URL", SidecarURL)
		c.Env = setEnv(c.Env, "NEURONETES_SIDECAR_SOCKET", SocketPath)
		c.VolumeMounts = append(c.VolumeMounts, runMount)
	}
	always := corev1.ContainerRestartPolicyAlways
	sc.RestartPolicy = &always
	if len(i.ProbeCommand) > 0 {
		exec := corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: append([]string(nil), i.ProbeCommand...)}}
		sc.StartupProbe = &corev1.Probe{ProbeHandler: exec, PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 120}
		sc.ReadinessProbe = &corev1.Probe{ProbeHandler: exec, PeriodSeconds: 10, TimeoutSeconds: 2, FailureThreshold: 3}
	}
	pod.Spec.InitContainers = append([]corev1.Container{sc}, pod.Spec.InitContainers...)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[nnv1.SidecarInjectedAnnotation] = image
	return true, nil
}

// setEnv adds name=value unless the container already sets name.
// redisCredentialsEnv reads the namespace's Redis user from Secret name (optional keys).
func redisCredentialsEnv(name string, optional bool) []corev1.EnvVar {
	if name == "" {
		return nil
	}
	ref := func(key string) *corev1.EnvVarSource {
		optional := optional
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
	}
	return []corev1.EnvVar{
		{Name: "NEURONETES_REDIS_USERNAME", ValueFrom: ref("username")},
		{Name: "NEURONETES_REDIS_PASSWORD", ValueFrom: ref("password")},
	}
}

func setEnv(env []corev1.EnvVar, name, value string) []corev1.EnvVar {
	for _, e := range env {
		if e.Name == name {
			return env
		}
	}
	return append(env, corev1.EnvVar{Name: name, Value: value})
}

// SidecarUID is the user the injected sidecar runs as (distroless' nonroot; the sidecar image's
// USER): set in the container, so the pod's own securityContext does not decide it.
const SidecarUID = 65532

// sidecarSecurityContext meets Pod Security "restricted" on its own, so an agent pod is as
// restricted as its own containers: non-root, read-only root filesystem (the sidecar writes only
// to the run volume), no privilege escalation, no capabilities, the runtime's seccomp profile.
func sidecarSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](SidecarUID),
		RunAsGroup:               ptr.To[int64](SidecarUID),
		ReadOnlyRootFilesystem:   ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
