package e2e

// An AgentPool through sessions (spec.sessions): the gateway creates an AgentSession per
// conversation, the session controller suspends and resumes them, the pool controller keeps no
// pods of its own and reports the sessions.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/agentpool"
	"github.com/neuronetes/neuronetes/controller/agentsession"
	"github.com/neuronetes/neuronetes/e2e/cluster"
)

// poolChat streams one chat turn of conversation conv (header X-Conversation-Id) to the pools
// serving model, through the gateway, as the tenant of key. It reuses sessionChat's parsing by
// sending to the pool route instead of a named session.
func (g *gwProc) poolChat(t *testing.T, key, model, conv, content string) sessionReply {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": model, "stream": true, "max_tokens": 16,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []map[string]string{{"role": "user", "content": content}}})
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.api+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	if conv != "" {
		req.Header.Set("X-Conversation-Id", conv)
	}
	return readSessionReply(t, req)
}

// poolBurst sends n streamed chat turns of new conversations <prefix>-0 ... at once, the i-th to
// gateway apis[i % len(apis)], as the tenant of key, and returns each one's HTTP status (0 when
// the request failed, or was still unanswered after timeout), reading each answer to its end.
func poolBurst(apis []string, key, model, prefix string, n int, timeout time.Duration) []int {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": true, "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": "hello"}}})
	out := make([]int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, "http://"+apis[i%len(apis)]+"/v1/chat/completions", bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("X-Conversation-Id", fmt.Sprintf("%s-%d", prefix, i))
			<-start
			resp, err := (&http.Client{Timeout: timeout}).Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err == nil {
				out[i] = resp.StatusCode
			}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// TestAgentPoolThroughSessions: pool "chat" (spec.sessions, idle timeout 30 s, maxReplicas 2) in
// tenant A's namespace and one in tenant B's. Two conversations of A through the gateway get two
// AgentSessions of the pool (labelled and controlled by it, the pool's class), two pods, and the
// pool's status counts them; a third conversation then gets 429 (the pool at spec.maxReplicas)
// and no session; a request without a conversation gets 400. With no activity both
// are suspended: no session pod is left, the pool holds no pod and reports replicas 0. Tenant B
// sending conversation 1's id gets a session of its own in its namespace, and A's sessions stay
// Suspended with the same checkpoints and activity. A's next turn of conversation 1 resumes its
// session in a new pod whose counters continue the suspended ones (checksum), and conversation 2
// stays Suspended until tenant A's spec.sessions.retention (1 min) deletes it with its
// checkpoints, while conversation 1's running session and tenant B's stay. Tenant B's burst of
// eight new conversations at once through two gateway replicas gets no more pods than its pool's
// free slots (each replica answers 429 beyond them; a session the other replica also admitted
// waits without a pod, PoolFull), and A's sessions are unchanged by it.
func TestAgentPoolThroughSessions(t *testing.T) {
	e := requireEnv(t)
	sock := requireContainerCRIU(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ctrlInstallCRDs(t, e)
	for _, crd := range []string{"agentcheckpoints", "agentsessions", "agentclasses", "agentpools", "tenants"} {
		e.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd+".neuronetes.io", "--timeout=60s")
	}
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	why := "CRIU on the development VM needs the checkpointed agent to run as root (docs/checkpoint.md)"
	nsA := e.NamespaceWithPodSecurity(t, "spool-a", "baseline", why)
	nsB := e.NamespaceWithPodSecurity(t, "spool-b", "baseline", why)
	sessionTenants(t, e, nsA, nsB)
	c := crClient(t, e.Config)
	idle := 30 * time.Second
	maxSessions := int32(2)  // spec.maxReplicas: the pool's sessions holding a pod
	retention := time.Minute // tenant A's spec.sessions.retention
	for _, ns := range []string{nsA, nsB} {
		if err := c.Create(ctx, sessionClass(ns, img, e.NodeName)); err != nil {
			t.Fatal(err)
		}
		pool := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chat"},
			Spec: v1alpha1.AgentPoolSpec{AgentClassRef: &v1alpha1.LocalObjectReference{Name: "demo"}, MaxReplicas: &maxSessions,
				Sessions: &v1alpha1.PoolSessionsSpec{IdleTimeout: metav1.Duration{Duration: idle}}}}
		if ns == nsA {
			pool.Spec.Sessions.Retention = &metav1.Duration{Duration: retention}
		}
		if err := c.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, e, nsA+","+nsB, "--agent-sessions", "--session-resume-timeout=2m")

	engine := startSessionNodeAgent(ctx, t, e, sock)
	mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(ctrlScheme(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&agentsession.Reconciler{RestoreHostImage: cluster.PauseImage}).SetupWithManager(mgr, ""); err != nil {
		t.Fatal(err)
	}
	if err := (&agentpool.Reconciler{Sessions: true}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go func() { _ = mgr.Start(mctx) }()
	t.Cleanup(func() {
		for _, ns := range []string{nsA, nsB} {
			removeRestoredIn(t, c, engine, ns)
			if t.Failed() {
				logSessionObjects(t, c, ns)
			}
		}
	})

	sessionsOf := func(ns string) []v1alpha1.AgentSession {
		t.Helper()
		var l v1alpha1.AgentSessionList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.PoolSessionLabel: "chat"}); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	sessionOfPod := func(ns, pod string) *v1alpha1.AgentSession {
		t.Helper()
		for _, s := range sessionsOf(ns) {
			if s.Status.PodName == pod {
				return &s
			}
		}
		t.Fatalf("no session of pool chat in %s runs pod %q", ns, pod)
		return nil
	}
	poolStatus := func(ns string) v1alpha1.AgentPoolStatus {
		var p v1alpha1.AgentPool
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "chat"}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Status
	}
	turn := func(key, conv, content string) sessionReply {
		t.Helper()
		// A new session's pod is Ready once it runs (the class has no readiness probe), which
		// may be before the demo agent listens: the gateway's hold probes the pod
		// (sessionroute.ProbeDial), so even a first turn is answered at once, never resent.
		r := g.poolChat(t, key, "demo", conv, content)
		if r.status != http.StatusOK || r.content == "" || r.header.Get("X-Neuronetes-Pod") == "" {
			t.Fatalf("%s through the gateway: %d from pod %q: %s", content, r.status, r.header.Get("X-Neuronetes-Pod"), r.body)
		}
		return r
	}

	// No conversation: 400, nothing created.
	if r := g.poolChat(t, gatewayAPIKey, "demo", "", "who am I?"); r.status != http.StatusBadRequest || !bytes.Contains([]byte(r.body), []byte("session_key_required")) {
		t.Fatalf("request without a conversation: %d %s, want 400 session_key_required", r.status, r.body)
	}
	if n := len(sessionsOf(nsA)); n != 0 {
		t.Fatalf("%d sessions after a request without a conversation", n)
	}
	// Two conversations, each created and started by its first turn (held while Pending).
	r1 := turn(gatewayAPIKey, "conv-1", "turn 1 of conversation 1: remember 42")
	t.Logf("conversation 1's first turn (session created and started): first token after %s", r1.ttft.Round(time.Millisecond))
	r2 := turn(gatewayAPIKey, "conv-2", "turn 1 of conversation 2")
	r1b := turn(gatewayAPIKey, "conv-1", "turn 2 of conversation 1")
	pod1, pod2 := r1.header.Get("X-Neuronetes-Pod"), r2.header.Get("X-Neuronetes-Pod")
	if pod1 == pod2 || r1b.header.Get("X-Neuronetes-Pod") != pod1 {
		t.Fatalf("pods: conversation 1 %q then %q, conversation 2 %q; want one pod per conversation", pod1, r1b.header.Get("X-Neuronetes-Pod"), pod2)
	}
	s1, s2 := sessionOfPod(nsA, pod1), sessionOfPod(nsA, pod2)
	if ss := sessionsOf(nsA); len(ss) != 2 {
		t.Fatalf("%d sessions of pool chat, want 2", len(ss))
	}
	for _, s := range []*v1alpha1.AgentSession{s1, s2} {
		o := metav1.GetControllerOf(s)
		if o == nil || o.Kind != "AgentPool" || o.Name != "chat" || s.Spec.ClassRef.Name != "demo" || s.Spec.IdleTimeout == nil || s.Spec.IdleTimeout.Duration != idle || len(s.Name) > 50 {
			t.Fatalf("session %s: owner %+v spec %+v", s.Name, o, s.Spec)
		}
	}
	t.Logf("conversation 1 -> session %s, conversation 2 -> session %s", s1.Name, s2.Name)
	Eventually(t, 30*time.Second, "pool status counts 2 running sessions", func() (bool, error) {
		st := poolStatus(nsA)
		return st.Replicas == 2 && st.ReadyReplicas == 2, fmt.Errorf("status replicas %d ready %d", st.Replicas, st.ReadyReplicas)
	})
	// A third conversation while two sessions run: the pool is at spec.maxReplicas, 429 and
	// nothing created.
	if r := g.poolChat(t, gatewayAPIKey, "demo", "conv-3", "a third conversation"); r.status != http.StatusTooManyRequests || !bytes.Contains([]byte(r.body), []byte("pool_sessions_full")) {
		t.Fatalf("a third conversation at spec.maxReplicas 2: %d %s, want 429 pool_sessions_full", r.status, r.body)
	}
	if n := len(sessionsOf(nsA)); n != 2 {
		t.Fatalf("%d sessions of pool chat after the refused third conversation, want 2", n)
	}
	served, err := demoCounters(podIPOf(t, c, nsA, pod1))
	if err != nil || served["vllm:generation_tokens_total"] == 0 {
		t.Fatalf("conversation 1's state %v (%v)", served, err)
	}
	sum := stateSum(served)

	// No activity: both suspended, no pod left, the pool at 0.
	start := time.Now()
	Eventually(t, idle+3*time.Minute, "both sessions Suspended", func() (bool, error) {
		n := 0
		for _, s := range sessionsOf(nsA) {
			if s.Status.Phase == v1alpha1.SessionSuspended && s.Status.LastCheckpoint != "" {
				n++
			}
		}
		return n == 2, fmt.Errorf("%d suspended", n)
	})
	t.Logf("both sessions suspended %s after the last turn", time.Since(start).Round(time.Second))
	Eventually(t, time.Minute, "no session pod left and the pool at 0", func() (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(nsA)); err != nil {
			return false, err
		}
		st := poolStatus(nsA)
		return len(pods.Items) == 0 && st.Replicas == 0 && st.ReadyReplicas == 0,
			fmt.Errorf("%d pods in %s, pool status replicas %d ready %d", len(pods.Items), nsA, st.Replicas, st.ReadyReplicas)
	})
	before := map[string]v1alpha1.AgentSession{}
	for _, s := range sessionsOf(nsA) {
		before[s.Name] = s
	}

	// Tenant B sends conversation 1's id: a session of its own, in its namespace.
	rb := turn(sessionTenantKeyB, "conv-1", "tenant B: conversation 1")
	sb := sessionOfPod(nsB, rb.header.Get("X-Neuronetes-Pod"))
	if _, clash := before[sb.Name]; clash {
		t.Fatalf("tenant B's conversation 1 has tenant A's session name %s", sb.Name)
	}
	time.Sleep(3 * time.Second)
	for _, s := range sessionsOf(nsA) {
		b := before[s.Name]
		if s.Status.Phase != v1alpha1.SessionSuspended || s.Status.LastCheckpoint != b.Status.LastCheckpoint ||
			s.Annotations[v1alpha1.SessionLastActivityAnnotation] != b.Annotations[v1alpha1.SessionLastActivityAnnotation] {
			t.Fatalf("A's session %s after tenant B's turn: phase %s checkpoint %s activity %q (was %s %s %q)", s.Name, s.Status.Phase,
				s.Status.LastCheckpoint, s.Annotations[v1alpha1.SessionLastActivityAnnotation], b.Status.Phase, b.Status.LastCheckpoint,
				b.Annotations[v1alpha1.SessionLastActivityAnnotation])
		}
	}

	// Tenant B's attack on its pool's bound: eight new conversations at once, four to this
	// gateway and four to a second replica, before either's cache shows any of their sessions.
	// B's pool runs one session of two (spec.maxReplicas): each replica admits at most the free
	// slot (429 for the rest), and of the sessions the two admit the session controller starts
	// only as many as are free (the other waits, PoolFull, its request held until the client
	// gives up); A's sessions stay as they were.
	activeB := 0
	for _, s := range sessionsOf(nsB) {
		if s.Status.Phase != v1alpha1.SessionSuspended {
			activeB++
		}
	}
	free := int(maxSessions) - activeB
	g2 := startGateway(t, e, nsA+","+nsB, "--agent-sessions", "--session-resume-timeout=2m")
	statuses := poolBurst([]string{g.api, g2.api}, sessionTenantKeyB, "demo", "burst", 8, 20*time.Second)
	ok, full := 0, 0
	for _, st := range statuses {
		switch st {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			full++
		}
	}
	sessionsB := len(sessionsOf(nsB))
	if ok != free || full < 8-2*free || sessionsB > 1+2*free {
		t.Fatalf("a burst of 8 new conversations at tenant B's pool through two gateways (%d of %d holding a pod): statuses %v, %d sessions; want %d 200, at least %d 429, at most %d sessions",
			activeB, maxSessions, statuses, sessionsB, free, 8-2*free, 1+2*free)
	}
	var waiting []string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		holding, pods := 0, 0
		waiting = waiting[:0]
		for _, s := range sessionsOf(nsB) {
			switch {
			case s.Status.Phase == v1alpha1.SessionRunning || s.Status.PodName != "":
				holding++
			case meta.FindStatusCondition(s.Status.Conditions, "Ready") != nil && meta.FindStatusCondition(s.Status.Conditions, "Ready").Reason == "PoolFull":
				waiting = append(waiting, s.Name)
			}
		}
		var pl corev1.PodList
		if err := c.List(ctx, &pl, client.InNamespace(nsB)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pl.Items {
			if p.DeletionTimestamp == nil {
				pods++
			}
		}
		if holding > int(maxSessions) || pods > int(maxSessions) {
			t.Fatalf("tenant B's pool: %d sessions hold a pod and %d pods run, over spec.maxReplicas %d", holding, pods, maxSessions)
		}
	}
	if sessionsB-1-free != len(waiting) {
		t.Fatalf("tenant B: %d sessions, %d free slots, sessions waiting with PoolFull %v; want every session admitted beyond the slots waiting", sessionsB, free, waiting)
	}
	for _, s := range sessionsOf(nsA) {
		if b := before[s.Name]; s.Status.Phase != v1alpha1.SessionSuspended || s.Status.LastCheckpoint != b.Status.LastCheckpoint {
			t.Fatalf("A's session %s after tenant B's burst: phase %s checkpoint %s (was %s %s)", s.Name, s.Status.Phase, s.Status.LastCheckpoint,
				b.Status.Phase, b.Status.LastCheckpoint)
		}
	}
	t.Logf("tenant B's burst of 8 new conversations through two gateways (%d of %d slots free): statuses %v, B's sessions %d, waiting for a slot (PoolFull) %v",
		free, maxSessions, statuses, sessionsB, waiting)

	// A's conversation 1 again: held, resumed in a new pod, the state intact.
	r := turn(gatewayAPIKey, "conv-1", "turn 3 of conversation 1: what was the number?")
	t.Logf("conversation 1 resumed through the gateway: first token after %s, served by %s", r.ttft.Round(time.Millisecond), r.header.Get("X-Neuronetes-Pod"))
	name1 := s1.Name
	s1 = sessionOfPod(nsA, r.header.Get("X-Neuronetes-Pod"))
	if s1.Name != name1 || s1.Status.PodName == pod1 || s1.Status.Phase != v1alpha1.SessionRunning {
		t.Fatalf("conversation 1 served by session %s pod %s phase %s; want its session %s resumed in a new pod", s1.Name, s1.Status.PodName, s1.Status.Phase, name1)
	}
	after, err := demoCounters(podIPOf(t, c, nsA, s1.Status.PodName))
	if err != nil {
		t.Fatal(err)
	}
	restored := map[string]float64{"vllm:prompt_tokens_total": after["vllm:prompt_tokens_total"] - r.prompt,
		"vllm:generation_tokens_total": after["vllm:generation_tokens_total"] - r.completion}
	if got := stateSum(restored); got != sum {
		t.Fatalf("restored state %v less this turn's usage is %v (sum %s), want %v (sum %s)", after, restored, got, served, sum)
	}
	var s2now v1alpha1.AgentSession
	if err := c.Get(ctx, types.NamespacedName{Namespace: nsA, Name: s2.Name}, &s2now); err != nil || s2now.Status.Phase != v1alpha1.SessionSuspended {
		t.Fatalf("conversation 2's session %s: %s (%v), want still Suspended", s2.Name, s2now.Status.Phase, err)
	}
	Eventually(t, 30*time.Second, "pool status counts 1 running session", func() (bool, error) {
		st := poolStatus(nsA)
		return st.Replicas == 1 && st.ReadyReplicas == 1, fmt.Errorf("status replicas %d ready %d", st.Replicas, st.ReadyReplicas)
	})
	t.Logf("state sum %s before the suspension and after the resume", sum)

	// Retention: conversation 2's session, Suspended for tenant A's retention since its last
	// activity, is deleted with its checkpoints; conversation 1's (Running) and tenant B's pool
	// (no retention) keep theirs.
	suspendedAt := s2now.Status.TransitionTime.Time
	Eventually(t, time.Until(suspendedAt.Add(retention))+time.Minute, "conversation 2's session deleted past retention", func() (bool, error) {
		err := c.Get(ctx, types.NamespacedName{Namespace: nsA, Name: s2.Name}, &v1alpha1.AgentSession{})
		return apierrors.IsNotFound(err), fmt.Errorf("session %s: %v", s2.Name, err)
	})
	if gone := time.Since(suspendedAt); gone < retention {
		t.Fatalf("conversation 2's session deleted %s after its suspension, before the retention %s", gone, retention)
	}
	t.Logf("conversation 2's session deleted %s after its suspension (retention %s)", time.Since(suspendedAt).Round(time.Second), retention)
	Eventually(t, time.Minute, "conversation 2's checkpoints deleted with its session", func() (bool, error) {
		var cks v1alpha1.AgentCheckpointList
		if err := c.List(ctx, &cks, client.InNamespace(nsA), client.MatchingLabels{v1alpha1.SessionLabel: s2.Name}); err != nil {
			return false, err
		}
		return len(cks.Items) == 0, fmt.Errorf("%d checkpoints of %s left", len(cks.Items), s2.Name)
	})
	if err := c.Get(ctx, types.NamespacedName{Namespace: nsA, Name: s1.Name}, &v1alpha1.AgentSession{}); err != nil {
		t.Fatalf("conversation 1's running session after conversation 2's retention: %v", err)
	}
	if n := len(sessionsOf(nsB)); n != sessionsB {
		t.Fatalf("tenant B's pool (no retention) has %d sessions, want %d (conversation 1 and the burst's)", n, sessionsB)
	}
}
