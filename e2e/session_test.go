package e2e

// AgentSession e2e: the session controller (controller/agentsession) and the node agent's
// AgentCheckpoint handling (nodeagent/snapshot), both in-process against the local cluster, with
// the demo agent as the session's process.

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/agentsession"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

// sessionClass is the demo agent as an AgentClass template: root and no readiness probe, as in
// TestCheckpointDemoAgentRestoreIntoWarmPod (CRIU on the development VM; no probe socket open at
// dump time), on the node whose node agent runs in-process.
func sessionClass(ns, image, node string) *v1alpha1.AgentClass {
	root, no := int64(0), false
	return &v1alpha1.AgentClass{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
		Spec: v1alpha1.AgentClassSpec{Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeName:        node,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &no},
			Containers: []corev1.Container{{Name: "agent", Image: image, ImagePullPolicy: corev1.PullNever,
				Args:            []string{"--listen=:8000", "--token-rate=2000", "--ttft-base=1ms"},
				SecurityContext: &corev1.SecurityContext{RunAsUser: &root},
				Env:             []corev1.EnvVar{{Name: "GODEBUG", Value: "multipathtcp=0"}}}},
		}}},
	}
}

// stateSum is the checksum of the demo agent's in-memory state: its token counters.
func stateSum(c map[string]float64) string {
	return fmt.Sprintf("%x", sha256.Sum256(fmt.Appendf(nil, "%v %v", c["vllm:prompt_tokens_total"], c["vllm:generation_tokens_total"])))
}

// TestAgentSessionIdleSuspendResume: a session's demo agent serves three turns through the
// gateway's session route (state: its token counters), is suspended by its idle timeout
// (checkpoint stored, pod deleted). Tenant B naming it through the gateway gets the same 404 as a
// missing session and leaves it Suspended and unannotated. Tenant A's next turn through the
// gateway is held while the session resumes into a new pod and streams from the restored process,
// whose counters continue the suspended ones (checksum). A session of tenant B whose status
// names tenant A's checkpoint gets no Restore (Ready=False naming status.lastCheckpoint), and A's
// session resumes unaffected.
func TestAgentSessionIdleSuspendResume(t *testing.T) {
	e := requireEnv(t)
	sock := requireContainerCRIU(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Every CRD: the gateway watches AgentPools, Tenants, RoutingPolicies and the rest.
	ctrlInstallCRDs(t, e)
	for _, crd := range []string{"agentcheckpoints", "agentsessions", "agentclasses", "tenants"} {
		e.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd+".neuronetes.io", "--timeout=60s")
	}
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	why := "CRIU on the development VM needs the checkpointed agent to run as root (docs/checkpoint.md)"
	nsA := e.NamespaceWithPodSecurity(t, "sess-a", "baseline", why)
	nsB := e.NamespaceWithPodSecurity(t, "sess-b", "baseline", why)
	// The gateway (cmd/gateway, a host process) serves both tenants' namespaces, with session
	// routes: tenant A's turns go through it.
	sessionTenants(t, e, nsA, nsB)
	g := startGateway(t, e, nsA+","+nsB, "--agent-sessions", "--session-resume-timeout=2m")

	scheme := ctrlScheme(t)
	c := crClient(t, e.Config)
	for _, ns := range []string{nsA, nsB} {
		// One warm restore host per class: A's resume must use A's, never B's.
		cls := sessionClass(ns, img, e.NodeName)
		cls.Spec.Sessions = &v1alpha1.SessionsConfig{WarmRestoreHosts: 1}
		if err := c.Create(ctx, cls); err != nil {
			t.Fatal(err)
		}
	}
	// Tenant B's session, its status forged (as if by anyone who may write it) to name A's
	// checkpoint before the controller starts: the controller must refuse the restore.
	victimID := v1alpha1.CheckpointIDFor(nsA, agentsession.CheckpointName("s", 1))
	forged := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "t"},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "demo"}}}
	if err := c.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	forged.Status = v1alpha1.AgentSessionStatus{Phase: v1alpha1.SessionSuspended, SuspendedByRequest: true, LastCheckpoint: victimID, TransitionTime: &now}
	if err := c.Status().Update(ctx, forged); err != nil {
		t.Fatal(err)
	}

	// The node agent's AgentCheckpoint handling and the session controller, in-process.
	mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(scheme))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := snapshot.NewEngine(ctx, snapshot.Config{ContainerdSocket: sock, StoreDir: t.TempDir(), WorkDir: t.TempDir(), SigningKeyFile: writeSigningKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.Setup(mgr, snapshot.Options{NodeName: e.NodeName, Engine: engine}); err != nil {
		t.Fatal(err)
	}
	if err := (&agentsession.Reconciler{RestoreHostImage: cluster.PauseImage}).SetupWithManager(mgr, ""); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go func() { _ = mgr.Start(mctx) }()
	t.Cleanup(func() {
		for _, ns := range []string{nsA, nsB} {
			var pods corev1.PodList
			if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err == nil {
				for _, p := range pods.Items {
					if len(p.Status.ContainerStatuses) > 0 {
						removeRestored(t, engine.C, p.Status.ContainerStatuses[0].ContainerID)
					}
				}
			}
		}
	})

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, ns := range []string{nsA, nsB} {
			var cks v1alpha1.AgentCheckpointList
			if err := c.List(context.Background(), &cks, client.InNamespace(ns)); err == nil {
				for _, ck := range cks.Items {
					t.Logf("AgentCheckpoint %s/%s: %s %s", ns, ck.Name, ck.Status.Phase, ck.Status.Message)
				}
			}
			var evs corev1.EventList
			if err := c.List(context.Background(), &evs, client.InNamespace(ns)); err == nil {
				for _, ev := range evs.Items {
					t.Logf("event %s/%s %s %s: %s", ns, ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
				}
			}
		}
	})
	session := func(ns, name string) *v1alpha1.AgentSession {
		var s v1alpha1.AgentSession
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	waitPhase := func(name string, want v1alpha1.AgentSessionPhase, timeout time.Duration) *v1alpha1.AgentSession {
		t.Helper()
		var s *v1alpha1.AgentSession
		Eventually(t, timeout, "session "+name+" "+string(want), func() (bool, error) {
			s = session(nsA, name)
			return s.Status.Phase == want, fmt.Errorf("phase %q, conditions %+v", s.Status.Phase, s.Status.Conditions)
		})
		return s
	}

	idle := 45 * time.Second
	s := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "s"},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "demo"}, IdleTimeout: &metav1.Duration{Duration: idle}}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	s = waitPhase("s", v1alpha1.SessionRunning, 2*time.Minute)
	first := s.Status.PodName
	ip := podIPOf(t, c, nsA, first)
	Eventually(t, 30*time.Second, "demo agent of "+first+" answers /readyz", func() (bool, error) { return agentReady(ip) })
	for i := 0; i < 3; i++ {
		r := g.sessionChat(t, gatewayAPIKey, "s", fmt.Sprintf("turn %d: remember the number 42", i))
		if r.status != http.StatusOK || r.header.Get("X-Neuronetes-Pod") != first || r.content == "" {
			t.Fatalf("turn %d through the gateway: %d from pod %q: %s", i, r.status, r.header.Get("X-Neuronetes-Pod"), r.body)
		}
	}
	served, err := demoCounters(ip)
	if err != nil || served["vllm:generation_tokens_total"] == 0 {
		t.Fatalf("demo agent state %v (%v)", served, err)
	}
	sum := stateSum(served)

	// No activity: the idle timeout suspends it.
	start := time.Now()
	s = waitPhase("s", v1alpha1.SessionSuspended, idle+2*time.Minute)
	t.Logf("suspended %s after %s: checkpoint %s", first, time.Since(start).Round(time.Second), s.Status.LastCheckpoint)
	if s.Status.LastCheckpoint != victimID || s.Status.PodName != "" {
		t.Fatalf("suspended status %+v, want checkpoint %s and no pod", s.Status, victimID)
	}
	// The first suspension succeeded: nothing the gateway left open (a keep-alive connection to
	// the agent) made CRIU refuse the dump.
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(nsA)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Name == "s" && ev.Reason == "CheckpointFailed" {
			t.Errorf("suspension of s failed before it succeeded: %s", ev.Message)
		}
	}
	Eventually(t, time.Minute, "pod "+first+" deleted", func() (bool, error) {
		var p corev1.Pod
		err := c.Get(ctx, types.NamespacedName{Namespace: nsA, Name: first}, &p)
		return err != nil && strings.Contains(err.Error(), "not found"), err
	})

	// Tenant B names A's session through the gateway: the same 404 as for a session that does
	// not exist, and A's session is not woken, annotated or changed.
	foreign := g.sessionChat(t, sessionTenantKeyB, "s", "tenant B: wake A's session")
	missing := g.sessionChat(t, gatewayAPIKey, "nope", "tenant A: a session that does not exist")
	if foreign.status != http.StatusNotFound || !strings.Contains(foreign.body, "session_not_found") {
		t.Fatalf("tenant B naming A's session: %d %s, want 404 session_not_found", foreign.status, foreign.body)
	}
	if strings.ReplaceAll(missing.body, "nope", "s") != foreign.body || missing.status != foreign.status {
		t.Fatalf("foreign session answer %d %q differs from a missing one's %d %q", foreign.status, foreign.body, missing.status, missing.body)
	}
	time.Sleep(3 * time.Second)
	if after := session(nsA, "s"); after.Status.Phase != v1alpha1.SessionSuspended || after.Status.LastCheckpoint != victimID ||
		after.Annotations[v1alpha1.SessionLastActivityAnnotation] != s.Annotations[v1alpha1.SessionLastActivityAnnotation] {
		t.Fatalf("A's session after tenant B's request: phase %s, checkpoint %s, activity %q (was %q)", after.Status.Phase,
			after.Status.LastCheckpoint, after.Annotations[v1alpha1.SessionLastActivityAnnotation], s.Annotations[v1alpha1.SessionLastActivityAnnotation])
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(nsA), client.MatchingLabels{v1alpha1.SessionLabel: "s"}); err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods of A's session after tenant B's request: %d (%v), want none", len(pods.Items), err)
	}
	// Each class's warm restore host runs before the resume.
	warmHosts := func(ns string) []corev1.Pod {
		var l corev1.PodList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.WarmPoolLabel: "demo", v1alpha1.WarmRestoreHostLabel: "true"}); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	for _, ns := range []string{nsA, nsB} {
		Eventually(t, 2*time.Minute, "a running warm restore host in "+ns, func() (bool, error) {
			hs := warmHosts(ns)
			return len(hs) == 1 && hs[0].Status.Phase == corev1.PodRunning, fmt.Errorf("%d hosts", len(hs))
		})
	}
	hostB := warmHosts(nsB)[0].Name

	// A's next turn through the gateway: it records activity, is held while the session
	// resumes into a new pod, and streams from the restored process, whose counters continue
	// the suspended ones by exactly this turn's usage.
	r := g.sessionChat(t, gatewayAPIKey, "s", "turn 4: what was the number?")
	if r.status != http.StatusOK || r.content == "" || r.completion == 0 {
		t.Fatalf("turn through the gateway after the suspension: %d %s", r.status, r.body)
	}
	t.Logf("resumed through the gateway: first token after %s, whole turn %s, served by %s", r.ttft.Round(time.Millisecond),
		r.total.Round(time.Millisecond), r.header.Get("X-Neuronetes-Pod"))
	s = session(nsA, "s")
	if s.Status.Phase != v1alpha1.SessionRunning || s.Status.PodName == first || r.header.Get("X-Neuronetes-Pod") != s.Status.PodName {
		t.Fatalf("after the turn: phase %s pod %q, served by %q; want Running in a new pod that served it", s.Status.Phase, s.Status.PodName, r.header.Get("X-Neuronetes-Pod"))
	}
	checkWarmHostClaimed(ctx, t, c, s)
	if hs := warmHosts(nsB); len(hs) != 1 || hs[0].Name != hostB || hs[0].Labels[v1alpha1.SessionLabel] != "" {
		t.Fatalf("tenant B's warm restore host %s changed by A's resume: %d hosts %v", hostB, len(hs), hs)
	}
	after, err := demoCounters(podIPOf(t, c, nsA, s.Status.PodName))
	if err != nil {
		t.Fatal(err)
	}
	restored := map[string]float64{"vllm:prompt_tokens_total": after["vllm:prompt_tokens_total"] - r.prompt,
		"vllm:generation_tokens_total": after["vllm:generation_tokens_total"] - r.completion}
	if got := stateSum(restored); got != sum {
		t.Fatalf("restored state %v less this turn's usage (%v prompt, %v completion) is %v (sum %s), want %v (sum %s)",
			after, r.prompt, r.completion, restored, got, served, sum)
	}
	if held := g.metric(t, "neuronetes_gateway_session_resume_wait_seconds_count", map[string]string{"result": "served"}); held != 1 {
		t.Errorf("gateway counted %v held requests served, want 1", held)
	}
	t.Logf("state sum %s before suspend and after resume (counters %v less this turn's usage)", sum, after)

	// Tenant B: no Restore of A's checkpoint was created, and its session says why.
	Eventually(t, time.Minute, "tenant B's forged session refused", func() (bool, error) {
		b := session(nsB, "t")
		cond := meta.FindStatusCondition(b.Status.Conditions, agentsession.ConditionReady)
		return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "status.lastCheckpoint"), fmt.Errorf("status %+v", b.Status)
	})
	var cks v1alpha1.AgentCheckpointList
	if err := c.List(ctx, &cks, client.InNamespace(nsB)); err != nil {
		t.Fatal(err)
	}
	for _, ck := range cks.Items {
		if ck.Spec.Operation == v1alpha1.RestoreOperation {
			t.Errorf("tenant B got a Restore AgentCheckpoint %s of %q", ck.Name, ck.Spec.CheckpointID)
		}
	}
}

// checkWarmHostClaimed checks that session s, just resumed, runs in a claimed warm restore host of
// its class: a pod warmpool-<class>-<id>, labelled with the session and no warm label, controlled
// by the session alone, running as the ServiceAccount the session now owns
// (status.serviceAccountName, labelled with it, no token), and that a ClaimedRestoreHost event
// names it.
func checkWarmHostClaimed(ctx context.Context, t *testing.T, c client.Client, s *v1alpha1.AgentSession) {
	t.Helper()
	var p corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Status.PodName}, &p); err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(&p)
	if !strings.HasPrefix(p.Name, "warmpool-"+s.Spec.ClassRef.Name+"-") || p.Labels[v1alpha1.SessionLabel] != s.Name || p.Labels[v1alpha1.WarmPoolLabel] != "" ||
		p.Labels[v1alpha1.WarmRestoreHostLabel] != "" || ref == nil || ref.UID != s.UID || len(p.OwnerReferences) != 1 ||
		p.Spec.ServiceAccountName != p.Name || s.Status.ServiceAccountName != p.Name {
		t.Fatalf("resumed pod %s (labels %v, owners %+v, serviceAccount %q; session's %q): want a claimed warm restore host of the session",
			p.Name, p.Labels, p.OwnerReferences, p.Spec.ServiceAccountName, s.Status.ServiceAccountName)
	}
	Eventually(t, 30*time.Second, "ServiceAccount "+p.Name+" adopted by "+s.Name, func() (bool, error) {
		var sa corev1.ServiceAccount
		err := c.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: p.Name}, &sa)
		r := metav1.GetControllerOf(&sa)
		return err == nil && r != nil && r.UID == s.UID && sa.Labels[v1alpha1.SessionLabel] == s.Name && sa.AutomountServiceAccountToken != nil && !*sa.AutomountServiceAccountToken,
			fmt.Errorf("owners %+v labels %v (%v)", sa.OwnerReferences, sa.Labels, err)
	})
	Eventually(t, 30*time.Second, agentsession.ClaimHostReason+" event for "+p.Name, func() (bool, error) {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(s.Namespace)); err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == s.Name && ev.Reason == agentsession.ClaimHostReason && strings.Contains(ev.Message, p.Name) {
				t.Logf("%s resumed into warm restore host %s: %s", s.Name, p.Name, ev.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("%d events, none", len(evs.Items))
	})
}
