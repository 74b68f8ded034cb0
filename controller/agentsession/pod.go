package agentsession

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/tooltoken"
)

// WorkspaceVolume is the emptyDir every session pod mounts at WorkspacePath.
const (
	WorkspaceVolume = "workspace"
	WorkspacePath   = "/workspace"
)

// DefaultWorkspaceSizeLimit bounds a workspace whose session sets no spec.workspaceSizeLimit.
var DefaultWorkspaceSizeLimit = resource.MustParse("1Gi")

// PodName is the name of a session's n-th pod.
func PodName(session string, n int32) string { return session + "-" + strconv.Itoa(int(n)) }

// ServiceAccountName is the session's own ServiceAccount.
func ServiceAccountName(session string) string { return "session-" + session }

// RuntimeClassFor returns the RuntimeClass the session's pod runs with: the session's override
// when the class allows it, else the template's. The error names the field.
func RuntimeClassFor(s *nnv1.AgentSession, class *nnv1.AgentClass) (*string, error) {
	var tmpl *string
	if class.Spec.Template != nil {
		tmpl = class.Spec.Template.Spec.RuntimeClassName
	}
	if s.Spec.RuntimeClassName == nil {
		return tmpl, nil
	}
	rc := *s.Spec.RuntimeClassName
	if !slices.Contains(class.Spec.AllowedRuntimeClassNames, rc) {
		return nil, fmt.Errorf("spec.runtimeClassName: %q is not in AgentClass %s spec.allowedRuntimeClassNames %v", rc, class.Name, class.Spec.AllowedRuntimeClassNames)
	}
	return &rc, nil
}

// BuildPod renders the session's n-th pod from the AgentClass template: its own ServiceAccount
// (no apiserver token unless the template mounts one), the tool proxy's projected token
// (tooltoken.Add), the workspace emptyDir with its size limit, the RuntimeClass of
// RuntimeClassFor, and Pod Security restricted defaults where the template leaves them unset
// (non-root, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp).
//
// hostImage, when set, makes it a resume pod: the first container runs hostImage (a pause
// image) without the template's command, arguments, liveness and startup probes, as the host
// container the node agent restores the checkpointed agent into (docs/checkpoint.md); its
// readiness probe stays, so the pod turns Ready once the restored agent serves.
func BuildPod(s *nnv1.AgentSession, class *nnv1.AgentClass, n int32, hostImage string) (*corev1.Pod, error) {
	if class.Spec.Template == nil || len(class.Spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("agentclass %s: spec.template.spec.containers is empty", class.Name)
	}
	rc, err := RuntimeClassFor(s, class)
	if err != nil {
		return nil, err
	}
	tmpl := class.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: PodName(s.Name, n), Namespace: s.Namespace,
			Labels: map[string]string{}, Annotations: map[string]string{},
		},
		Spec: tmpl.Spec,
	}
	for k, v := range tmpl.Labels {
		pod.Labels[k] = v
	}
	for k, v := range tmpl.Annotations {
		pod.Annotations[k] = v
	}
	// A session restores only its own checkpoints, through its Restore AgentCheckpoint.
	delete(pod.Annotations, nnv1.RestoreFromAnnotation)
	delete(pod.Labels, nnv1.PoolLabel)
	pod.Labels[nnv1.SessionLabel] = s.Name
	pod.Labels[nnv1.AgentClassLabel] = class.Name
	pod.Spec.ServiceAccountName = ServiceAccountName(s.Name)
	pod.Spec.DeprecatedServiceAccount = ""
	if pod.Spec.AutomountServiceAccountToken == nil {
		f := false
		pod.Spec.AutomountServiceAccountToken = &f
	}
	pod.Spec.RuntimeClassName = rc
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	limit := DefaultWorkspaceSizeLimit.DeepCopy()
	if s.Spec.WorkspaceSizeLimit != nil {
		limit = s.Spec.WorkspaceSizeLimit.DeepCopy()
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
		Name:         WorkspaceVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}},
	})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: WorkspaceVolume, MountPath: WorkspacePath})
	if hostImage != "" {
		c.Image, c.Command, c.Args = hostImage, nil, nil
		c.LivenessProbe, c.StartupProbe = nil, nil
	}
	holdForCheckpoint(pod)
	tooltoken.Add(pod)
	restrict(&pod.Spec)
	return pod, nil
}

// DefaultGracePeriodSeconds is a pod's terminationGracePeriodSeconds when the template sets none
// (the Kubernetes default).
const DefaultGracePeriodSeconds = 30

// SuspendedPodGracePeriodSeconds is the grace period of a pod deleted after its checkpoint
// succeeded: its state is stored, so the preStop hold is cut short and its resources freed.
const SuspendedPodGracePeriodSeconds = 1

// holdForCheckpoint gives the first container, unless the template sets its own, a preStop
// sleep of the pod's whole grace period: an eviction (kubectl drain, a NoExecute taint) then
// leaves the agent running for that long, and the controller checkpoints it in that window
// when the node is draining (Decide). The sleep is the kubelet's own (no binary in the image);
// a container already stopped by the checkpoint, as after a suspension, runs no hook.
func holdForCheckpoint(pod *corev1.Pod) {
	c := &pod.Spec.Containers[0]
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		return
	}
	grace := int64(DefaultGracePeriodSeconds)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	if grace <= 0 {
		return
	}
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	c.Lifecycle.PreStop = &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: grace}}
}

// restrict fills Pod Security restricted settings the template leaves unset; a template that
// sets one (e.g. runAsUser 0 for CRIU on the development VM) keeps its value, and the namespace's
// Pod Security admission decides.
func restrict(spec *corev1.PodSpec) {
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	psc := spec.SecurityContext
	if psc.RunAsNonRoot == nil {
		t := true
		psc.RunAsNonRoot = &t
	}
	if psc.SeccompProfile == nil {
		psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.SecurityContext == nil {
			c.SecurityContext = &corev1.SecurityContext{}
		}
		sc := c.SecurityContext
		if sc.AllowPrivilegeEscalation == nil {
			f := false
			sc.AllowPrivilegeEscalation = &f
		}
		if sc.Capabilities == nil {
			sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
		}
	}
}
