package e2e

// The AgentSession warm pool (docs/sessions.md, "Warm pool"): the session controller
// in-process against the local cluster keeps an AgentClass's unclaimed session pods, and a new
// session claims one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/agentsession"
	"github.com/neuronetes/neuronetes/e2e/cluster"
)

// warmSessionPolicy is the session policy the in-process controller applies (as the chart's
// --session-network-policy-file): default deny both ways, egress only to DNS.
func warmSessionPolicy() *networkingv1.NetworkPolicySpec {
	dns := intstr.FromInt32(53)
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	return &networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: v1alpha1.SessionLabel, Operator: metav1.LabelSelectorOpExists}}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}}}},
	}
}

// warmClass is an AgentClass whose agent runs image with args (non-root, restricted), pinned to
// node, with a session warm pool of size (0: none).
func warmClass(ns, name, image, node string, size int32, command ...string) *v1alpha1.AgentClass {
	uid, grace := int64(65532), int64(1)
	c := &v1alpha1.AgentClass{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentClassSpec{Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeName: node, TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid},
			Containers:      []corev1.Container{{Name: "agent", Image: image, ImagePullPolicy: corev1.PullNever, Command: command}},
		}}},
	}
	if size > 0 {
		c.Spec.Sessions = &v1alpha1.SessionsConfig{WarmPoolSize: size}
	}
	return c
}

// startSessionController runs the session controller (with its warm pool controller and the
// session policy spec np, nil for none) in-process until the test ends.
func startSessionController(ctx context.Context, t *testing.T, e *Env, np *networkingv1.NetworkPolicySpec) {
	t.Helper()
	mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(ctrlScheme(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&agentsession.Reconciler{RestoreHostImage: cluster.PauseImage, NetworkPolicy: np}).SetupWithManager(mgr, ""); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	t.Cleanup(mcancel)
	go func() { _ = mgr.Start(mctx) }()
}

// readyWarmPods lists class's unclaimed warm pods that are Ready.
func readyWarmPods(ctx context.Context, c client.Client, ns, class string) ([]corev1.Pod, error) {
	var l corev1.PodList
	if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.WarmPoolLabel: class}); err != nil {
		return nil, err
	}
	var ready []corev1.Pod
	for _, p := range l.Items {
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready = append(ready, p)
			}
		}
	}
	return ready, nil
}

// dialFrom runs netcheck's dial to target in pod's container; "" when it connected.
func dialFrom(e *Env, ns, pod, container, target string) string {
	out, err := e.KubectlErr("-n", ns, "exec", pod, "-c", container, "--", "/netcheck", "probe", "-dial", target)
	var res netResult
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); jerr != nil {
		return fmt.Sprintf("no result (%v): %v", jerr, err)
	}
	return res.Error
}

// requireRefused fails unless dials from pod to target are refused three times in a row.
func requireRefused(t *testing.T, e *Env, ns, pod, target string) {
	t.Helper()
	refusals := 0
	Eventually(t, time.Minute, target+" refused 3 times in a row from "+pod, func() (bool, error) {
		if msg := dialFrom(e, ns, pod, "agent", target); msg == "" {
			refusals = 0
			return false, errors.New("connected: no policy confines " + pod)
		}
		refusals++
		return refusals >= 3, nil
	})
}

// TestAgentSessionWarmPoolClaim: an AgentClass with spec.sessions.warmPoolSize 2 gets two Ready
// warm pods, each with its own ServiceAccount (no token), confined by the warm pool's
// NetworkPolicy (a dial to a listener in another namespace is refused, while an ordinary pod
// reaches it). A new AgentSession claims one: it is Running in that pod (not <session>-1), the
// pod runs as the ServiceAccount the session now owns (status.serviceAccountName), it carries
// neuronetes.io/session=<session> and the session's own policy confines it; the pool refills to
// two. A template change retires the warm pods of the old template.
func TestAgentSessionWarmPoolClaim(t *testing.T) {
	e := requireEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ctrlInstallCRDs(t, e)
	for _, crd := range []string{"agentcheckpoints", "agentsessions", "agentclasses"} {
		e.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd+".neuronetes.io", "--timeout=60s")
	}
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	ns := e.Namespace(t, "sess-warm")
	outside := e.Namespace(t, "sess-warm-out")
	e.Apply(t, outside, netcheckServer("listener", "", img, ":8080", false))
	listener := net.JoinHostPort(e.WaitPodRunning(t, outside, "listener", 2*time.Minute).Status.PodIP, "8080")
	e.Apply(t, ns, netcheckServer("plain", "", img, ":8080", false))
	e.WaitPodRunning(t, ns, "plain", 2*time.Minute)
	Eventually(t, time.Minute, "an ordinary pod reaches "+listener, func() (bool, error) {
		msg := dialFrom(e, ns, "plain", "netcheck", listener)
		return msg == "", errors.New(msg)
	})

	c := crClient(t, e.Config)
	startSessionController(ctx, t, e, warmSessionPolicy())
	if err := c.Create(ctx, warmClass(ns, "np-warm", img, e.NodeName, 2, "/netcheck", "serve", "-addr", ":8080")); err != nil {
		t.Fatal(err)
	}
	var warm []corev1.Pod
	Eventually(t, 2*time.Minute, "2 Ready warm pods", func() (bool, error) {
		var err error
		warm, err = readyWarmPods(ctx, c, ns, "np-warm")
		return len(warm) == 2, err
	})
	for _, p := range warm {
		var sa corev1.ServiceAccount
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: p.Spec.ServiceAccountName}, &sa); err != nil || p.Spec.ServiceAccountName != p.Name {
			t.Fatalf("warm pod %s runs as %q: %v", p.Name, p.Spec.ServiceAccountName, err)
		}
		if *p.Spec.AutomountServiceAccountToken || !*p.Spec.SecurityContext.RunAsNonRoot {
			t.Errorf("warm pod %s: token mounted or not restricted", p.Name)
		}
	}
	requireRefused(t, e, ns, warm[0].Name, listener)

	if err := c.Create(ctx, &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "np-warm"}}}); err != nil {
		t.Fatal(err)
	}
	var s v1alpha1.AgentSession
	Eventually(t, time.Minute, "session s Running", func() (bool, error) {
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "s"}, &s)
		return err == nil && s.Status.Phase == v1alpha1.SessionRunning, err
	})
	var pod corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Name == agentsession.PodName("s", 1) || !strings.HasPrefix(pod.Name, "warmpool-np-warm-") {
		t.Fatalf("session runs in pod %s, want a claimed warm pod", pod.Name)
	}
	if ref := metav1.GetControllerOf(&pod); ref == nil || ref.UID != s.UID || pod.Labels[v1alpha1.SessionLabel] != "s" || pod.Labels[v1alpha1.WarmPoolLabel] != "" {
		t.Fatalf("claimed pod owner %+v labels %v", pod.OwnerReferences, pod.Labels)
	}
	// The reconcile after the claim moves the ServiceAccount to the session.
	var sa corev1.ServiceAccount
	Eventually(t, 30*time.Second, "the claimed pod's ServiceAccount owned by the session", func() (bool, error) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Spec.ServiceAccountName}, &sa); err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(&sa)
		return s.Status.ServiceAccountName == sa.Name && ref != nil && ref.UID == s.UID && len(sa.OwnerReferences) == 1 && sa.Labels[v1alpha1.SessionLabel] == "s",
			fmt.Errorf("pod runs as %s (status.serviceAccountName %q) owned by %+v", sa.Name, s.Status.ServiceAccountName, sa.OwnerReferences)
	})
	var evs corev1.EventList
	Eventually(t, 30*time.Second, "a Claimed event", func() (bool, error) {
		err := c.List(ctx, &evs, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": "s"})
		for _, ev := range evs.Items {
			if ev.Reason == agentsession.ClaimReason {
				return true, nil
			}
		}
		return false, err
	})
	var np networkingv1.NetworkPolicy
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: agentsession.NetworkPolicyName("s")}, &np); err != nil {
		t.Fatalf("session policy: %v", err)
	}
	requireRefused(t, e, ns, pod.Name, listener)

	Eventually(t, 2*time.Minute, "the pool refilled to 2 Ready warm pods", func() (bool, error) {
		var err error
		warm, err = readyWarmPods(ctx, c, ns, "np-warm")
		return len(warm) == 2, err
	})
	for _, p := range warm {
		if p.Name == pod.Name {
			t.Fatalf("the claimed pod %s is still in the pool", p.Name)
		}
	}

	// A template change retires the old warm pods; the claimed pod stays with its session.
	var class v1alpha1.AgentClass
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "np-warm"}, &class); err != nil {
		t.Fatal(err)
	}
	class.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "V", Value: "2"}}
	if err := c.Update(ctx, &class); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 2*time.Minute, "2 Ready warm pods of the new template", func() (bool, error) {
		var l corev1.PodList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.WarmPoolLabel: "np-warm"}); err != nil {
			return false, err
		}
		ready, err := readyWarmPods(ctx, c, ns, "np-warm")
		for _, p := range l.Items {
			if len(p.Spec.Containers[0].Env) == 0 || p.Spec.Containers[0].Env[0].Value != "2" {
				return false, fmt.Errorf("pod %s of the old template remains", p.Name)
			}
		}
		return len(ready) == 2, err
	})
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Name}, &pod); err != nil || !pod.DeletionTimestamp.IsZero() {
		t.Fatalf("the session's pod %s went with the old template: %v", pod.Name, err)
	}
}
