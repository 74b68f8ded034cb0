package e2e

// A tool-using AgentSession end to end: its agent calls a tool through the dispatcher's tool
// proxy on every turn, keeps the answers in memory and in a journal in its /workspace, is
// suspended by its idle timeout, and the next turn through the gateway resumes it in a new pod
// with memory and workspace intact, under a session NetworkPolicy whose only egress is DNS, the
// tool proxy and Redis.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/controller/agentsession"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/internal/testreq"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

// sessionAgentState is e2e/cmd/session-agent's GET /state.
type sessionAgentState struct {
	Turns        int      `json:"turns"`
	Memory       []string `json:"memory"`
	MemorySHA256 string   `json:"memorySHA256"`
	Journal      string   `json:"journal"`
}

// sessionAgentGet GETs path from the session agent at ip (no keep-alive: an open connection
// would make the next checkpoint fail) and decodes the JSON answer into v.
func sessionAgentGet(ip, path string, v any) error {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + net.JoinHostPort(ip, "8000") + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s on %s: %s %s", path, ip, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// sessionEgressPolicy is the chart's session policy (neuronetes.sessionNetworkPolicySpec) for
// this test's addresses: default deny, egress only to DNS, the tool proxy's port and Redis's.
func sessionEgressPolicy(hostIP string, toolPort, redisPort int) *networkingv1.NetworkPolicySpec {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	port := func(p int, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt(p)
		return networkingv1.NetworkPolicyPort{Port: &v, Protocol: &proto}
	}
	host := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: hostIP + "/32"}}}
	return &networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
				Ports: []networkingv1.NetworkPolicyPort{port(53, udp), port(53, tcp)}},
			{To: host, Ports: []networkingv1.NetworkPolicyPort{port(toolPort, tcp)}},
			{To: host, Ports: []networkingv1.NetworkPolicyPort{port(redisPort, tcp)}},
		},
	}
}

// TestAgentSessionToolsWorkspace: a session whose agent calls a tool through the tool proxy on
// each of three turns through the gateway (its memory: the answers; its workspace: a journal of
// them, held open) is suspended by its 20 s idle timeout; the checkpoint stores the workspace
// archive; the fourth turn through the gateway resumes it in pod w-2, where the restored process
// still holds the three answers (same SHA-256), finds the journal (three lines, then the fourth
// appended through the file it kept open), and calls the tool again as the session (the proxy's
// audit names both pods). From the restored pod, a server in another namespace, which the test
// itself reaches, and an unlabelled pod of the session's own namespace are refused three times
// in a row.
func TestAgentSessionToolsWorkspace(t *testing.T) { runSessionToolsWorkspace(t, false) }

// TestAgentSessionToolsWarmRestoreHost is TestAgentSessionToolsWorkspace with the class keeping
// one warm restore host and the session the default workspace limit: the fourth turn resumes the
// session into the claimed host (checkWarmHostClaimed), where the restored process keeps its
// memory and journal and calls the tool through the proxy as the session, while its dials to a
// pod of another namespace and to an unlabelled pod of its own namespace are refused.
func TestAgentSessionToolsWarmRestoreHost(t *testing.T) { runSessionToolsWorkspace(t, true) }

// runSessionToolsWorkspace is the tool-using session's test; warmHost: the class keeps a warm
// restore host and the resume must claim it.
func runSessionToolsWorkspace(t *testing.T, warmHost bool) {
	e := requireEnv(t)
	sock := requireContainerCRIU(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ctrlInstallCRDs(t, e)
	for _, crd := range []string{"agentcheckpoints", "agentsessions", "agentclasses", "tenants", "toolbindings"} {
		e.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd+".neuronetes.io", "--timeout=60s")
	}
	img := e.Image(t, "session-agent", "./e2e/cmd/session-agent")
	ns := e.NamespaceWithPodSecurity(t, "sess-tools", "baseline", "CRIU on the development VM needs the checkpointed agent to run as root (docs/checkpoint.md)")
	applyAPIKeyTenant(t, e, ns, gatewayAPIKey)
	// A server in another namespace, which the session's policy must keep its pods from.
	outside := e.Namespace(t, "sess-tools-out")
	netcheckImg := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	e.Apply(t, outside, netcheckServer("listener", "", netcheckImg, ":8080", false))
	// And an ordinary pod of the session's own namespace, which no session policy selects.
	e.Apply(t, ns, netcheckServer("peer", "", netcheckImg, ":8080", false))
	g := startGateway(t, e, ns, "--agent-sessions", "--session-resume-timeout=2m")
	redis := bridgeRedis(t)

	// The tool, the tool proxy (the dispatcher), and the ToolBinding that lets sessions of class
	// "tools" call it.
	var calls atomic.Int64
	toolAddr := fmt.Sprintf("%s:%d", cluster.NodeIP, freePort(t))
	tool := &http.Server{Addr: toolAddr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var args struct{ Turn int }
		_ = json.NewDecoder(r.Body).Decode(&args)
		n := calls.Add(1)
		fmt.Fprintf(w, `{"fact":"call %d for turn %d: the number is %d"}`, n, args.Turn, 40+n)
	})}
	go func() { _ = tool.ListenAndServe() }()
	t.Cleanup(func() { _ = tool.Close() })
	proxyPort := freePort(t)
	proxyAddr := fmt.Sprintf("%s:%d", cluster.NodeIP, proxyPort)
	dp := startDispatcher(t, e, ns, g.api, redis.Addr, "d-sess", "--tool-listen", proxyAddr)
	e.Apply(t, ns, fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: facts}
spec:
  type: http
  endpoint: http://%s/fact
  tool: {timeout: 5s, allowedSessionClasses: [tools]}
`, toolAddr))
	waitBindingCondition(t, e, ns, "facts", "Ready", "True", 60*time.Second)

	root, no, grace := int64(0), false, int64(1)
	class := &v1alpha1.AgentClass{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tools"},
		Spec: v1alpha1.AgentClassSpec{Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeName: e.NodeName, TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &no},
			Containers: []corev1.Container{{Name: "agent", Image: img, ImagePullPolicy: corev1.PullNever,
				Args:            []string{"--listen=:8000", "--tool-url=http://" + proxyAddr + "/v1/tools/" + ns + "/facts"},
				SecurityContext: &corev1.SecurityContext{RunAsUser: &root},
				Env:             []corev1.EnvVar{{Name: "GODEBUG", Value: "multipathtcp=0"}}}},
		}}}}
	if warmHost {
		class.Spec.Sessions = &v1alpha1.SessionsConfig{WarmRestoreHosts: 1}
	}
	c := crClient(t, e.Config)
	if err := c.Create(ctx, class); err != nil {
		t.Fatal(err)
	}

	// The node agent's checkpointing and the session controller, in-process, the controller with
	// the session NetworkPolicy.
	mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(ctrlScheme(t)))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := snapshot.NewEngine(ctx, snapshot.Config{ContainerdSocket: sock, StoreDir: t.TempDir(), WorkDir: t.TempDir(), SigningKeyFile: writeSigningKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	var eng snapshot.Engine = engine
	if os.Getenv("NEURONETES_E2E_SESSION_WORKSPACE_OFF") == "1" {
		// The behaviour before checkpoints carried the workspace: this run is expected to fail.
		eng = noWorkspaceEngine{engine}
	}
	if err := snapshot.Setup(mgr, snapshot.Options{NodeName: e.NodeName, Engine: eng}); err != nil {
		t.Fatal(err)
	}
	_, redisPort, _ := net.SplitHostPort(redis.Addr)
	var rp int
	fmt.Sscan(redisPort, &rp)
	rec := &agentsession.Reconciler{RestoreHostImage: cluster.PauseImage, NetworkPolicy: sessionEgressPolicy(cluster.NodeIP, proxyPort, rp)}
	if err := rec.SetupWithManager(mgr, ""); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go func() { _ = mgr.Start(mctx) }()
	t.Cleanup(func() { removeRestoredIn(t, c, engine, ns) })
	t.Cleanup(func() {
		if t.Failed() {
			logSessionObjects(t, c, ns)
		}
	})
	session := func() *v1alpha1.AgentSession {
		var s v1alpha1.AgentSession
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "w"}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	waitPhase := func(want v1alpha1.AgentSessionPhase, timeout time.Duration) *v1alpha1.AgentSession {
		t.Helper()
		var s *v1alpha1.AgentSession
		Eventually(t, timeout, "session w "+string(want), func() (bool, error) {
			s = session()
			return s.Status.Phase == want, fmt.Errorf("phase %q, conditions %+v", s.Status.Phase, s.Status.Conditions)
		})
		return s
	}

	idle, limit := 20*time.Second, resource.MustParse("64Mi")
	if warmHost {
		// A session with another limit than the default gets a host pod of its own.
		limit = agentsession.DefaultWorkspaceSizeLimit.DeepCopy()
	}
	if err := c.Create(ctx, &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w"},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "tools"},
			IdleTimeout: &metav1.Duration{Duration: idle}, WorkspaceSizeLimit: &limit}}); err != nil {
		t.Fatal(err)
	}
	first := waitPhase(v1alpha1.SessionRunning, 2*time.Minute).Status.PodName
	ip := podIPOf(t, c, ns, first)
	Eventually(t, 30*time.Second, "session agent of "+first+" answers /readyz", func() (bool, error) { return agentReady(ip) })
	for i := 1; i <= 3; i++ {
		r := g.sessionChat(t, gatewayAPIKey, "w", fmt.Sprintf("turn %d: look up the number", i))
		if r.status != http.StatusOK || r.header.Get("X-Neuronetes-Pod") != first || !strings.Contains(r.content, fmt.Sprintf("turn %d;", i)) {
			t.Fatalf("turn %d through the gateway: %d from pod %q: %s", i, r.status, r.header.Get("X-Neuronetes-Pod"), r.body)
		}
	}
	var before sessionAgentState
	if err := sessionAgentGet(ip, "/state", &before); err != nil {
		t.Fatal(err)
	}
	if before.Turns != 3 || strings.Count(before.Journal, "\n") != 3 || calls.Load() != 3 {
		t.Fatalf("state after three turns %+v, tool calls %d", before, calls.Load())
	}

	start := time.Now()
	s := waitPhase(v1alpha1.SessionSuspended, idle+2*time.Minute)
	t.Logf("suspended %s after %s: checkpoint %s", first, time.Since(start).Round(time.Second), s.Status.LastCheckpoint)
	m, err := engine.C.Store.Manifest(ctx, store.Key{Namespace: ns, Agent: "session.w"}, s.Status.LastCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(m.Files, func(f store.File) bool { return f.Path == "workspace.tar.zst" && f.Size > 0 }) {
		t.Fatalf("checkpoint %s holds no workspace archive: %+v", m.ID, m.Files)
	}

	if warmHost {
		Eventually(t, 2*time.Minute, "a running warm restore host in "+ns, func() (bool, error) {
			var l corev1.PodList
			if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.WarmPoolLabel: "tools", v1alpha1.WarmRestoreHostLabel: "true"}); err != nil {
				return false, err
			}
			return len(l.Items) == 1 && l.Items[0].Status.Phase == corev1.PodRunning, fmt.Errorf("%d hosts", len(l.Items))
		})
	}
	r := g.sessionChat(t, gatewayAPIKey, "w", "turn 4: what did the tool say before?")
	if r.status != http.StatusOK || !strings.Contains(r.content, "turn 4; I remember 4 tool answers") {
		t.Fatalf("turn 4 through the gateway after the suspension: %d %s", r.status, r.body)
	}
	s = session()
	second := s.Status.PodName
	if s.Status.Phase != v1alpha1.SessionRunning || second == first || r.header.Get("X-Neuronetes-Pod") != second {
		t.Fatalf("after turn 4: phase %s pod %q (first %q), served by %q", s.Status.Phase, second, first, r.header.Get("X-Neuronetes-Pod"))
	}
	t.Logf("resumed into %s through the gateway: first token after %s", second, r.ttft.Round(time.Millisecond))
	if warmHost {
		checkWarmHostClaimed(ctx, t, c, s)
	}
	ip2 := podIPOf(t, c, ns, second)
	var after sessionAgentState
	if err := sessionAgentGet(ip2, "/state", &after); err != nil {
		t.Fatal(err)
	}
	if after.Turns != 4 || !slices.Equal(after.Memory[:3], before.Memory) || !strings.HasPrefix(after.Journal, before.Journal) ||
		strings.Count(after.Journal, "\n") != 4 || !strings.Contains(after.Journal, "turn 4: ") {
		t.Fatalf("restored state %+v, want the three answers of %+v and a fourth, the journal continued", after, before)
	}
	t.Logf("memory SHA-256 %s (3 turns) restored; journal %d bytes -> %d bytes after turn 4", before.MemorySHA256, len(before.Journal), len(after.Journal))
	if n := calls.Load(); n != 4 {
		t.Fatalf("the tool was called %d times, want 4", n)
	}
	resp, err := http.Get("http://" + dp.admin + "/audit?tool=facts")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var audit struct {
		Entries []struct{ Session, Pod, Outcome string }
	}
	if err := json.Unmarshal(raw, &audit); err != nil || len(audit.Entries) != 4 {
		t.Fatalf("audit: %v %s", err, raw)
	}
	for i, a := range audit.Entries {
		if want := map[bool]string{true: first, false: second}[i < 3]; a.Outcome != "ok" || a.Pod != want || a.Session != "w" {
			t.Errorf("audit entry %d %+v, want ok from session w's pod %s", i, a, want)
		}
	}

	// The resumed pod's egress. Its idle timeout is raised first: these requests go to the pod,
	// not through the gateway, so they count as no activity, and one in flight during a dump
	// fails the checkpoint ("In-flight connection").
	if err := c.Patch(ctx, &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w"}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"idleTimeout":"10m"}}`))); err != nil {
		t.Fatal(err)
	}
	listener := net.JoinHostPort(e.WaitPodRunning(t, outside, "listener", 2*time.Minute).Status.PodIP, "8080")
	peer := net.JoinHostPort(e.WaitPodRunning(t, ns, "peer", 2*time.Minute).Status.PodIP, "8080")
	for _, target := range []string{listener, peer} {
		conn, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			t.Fatalf("the listener %s does not accept the test's own connection: %v", target, err)
		}
		conn.Close()
	}
	dialFrom := func(target string) string {
		var res struct{ Error string }
		if err := sessionAgentGet(ip2, "/dial?addr="+target, &res); err != nil {
			return "no answer: " + err.Error()
		}
		return res.Error
	}
	// (The local cluster's enforcer filters pod traffic in postrouting, so connections from a pod
	// to the node's own address, where the tool proxy and Redis listen here, are not filtered
	// at all; that they connect shows the pod is up, not that the policy admits them.
	// TestDeployLocal/AttackSessionEgress checks the chart's policy against pods.)
	for _, ok := range []string{proxyAddr, redis.Addr} {
		if msg := dialFrom(ok); msg != "" {
			t.Errorf("the session pod cannot reach %s: %s", ok, msg)
		}
	}
	for _, target := range []string{listener, peer} {
		refusals := 0
		Eventually(t, time.Minute, target+" refused 3 times in a row from the resumed session's pod", func() (bool, error) {
			if msg := dialFrom(target); msg == "" {
				refusals = 0
				return false, fmt.Errorf("connected: the session policy lets the session's pod %s reach %s", second, target)
			}
			refusals++
			return refusals >= 3, nil
		})
	}
	// The allowed egress still works after the refusals: the tool proxy answers the restored
	// process's next turn.
	if r := g.sessionChat(t, gatewayAPIKey, "w", "turn 5: one more look-up"); r.status != http.StatusOK || !strings.Contains(r.content, "turn 5; I remember 5 tool answers") {
		t.Fatalf("turn 5 through the gateway after the refused dials: %d %s", r.status, r.body)
	}
	if n := calls.Load(); n != 5 {
		t.Fatalf("the tool was called %d times, want 5", n)
	}
}

// requireContainerCRIU skips unless the local cluster's containerd socket and a working CRIU are
// there (what the in-process node agent's checkpointing needs), and returns the socket's path.
func requireContainerCRIU(t *testing.T, e *Env) string {
	t.Helper()
	sock := filepath.Join(e.Root, ".local", "containerd", "containerd.sock")
	if _, err := os.Stat(sock); err != nil {
		testreq.Tool(t, "containerd", "socket %s: %v", sock, err)
	}
	criuPath, err := criu.Locate()
	if err != nil {
		testreq.Tool(t, "criu", "not found (hack/test-deps.d/30-criu.sh builds it): %v", err)
	}
	if err := criu.Check(context.Background(), criuPath); err != nil {
		testreq.Tool(t, "criu", "criu check fails here: %v", err)
	}
	return sock
}

// startSessionNodeAgent runs the node agent's checkpointing (the AgentCheckpoint reconciler with
// a containerd engine, a store in a temporary directory) in-process until the test ends.
func startSessionNodeAgent(ctx context.Context, t *testing.T, e *Env, sock string) *snapshot.ContainerdEngine {
	t.Helper()
	mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(ctrlScheme(t)))
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
	mctx, mcancel := context.WithCancel(ctx)
	t.Cleanup(mcancel)
	go func() { _ = mgr.Start(mctx) }()
	return engine
}

// removeRestoredIn removes the containers the node agent restored into the pods of ns (call it
// before the pods go).
func removeRestoredIn(t *testing.T, c client.Client, engine *snapshot.ContainerdEngine, ns string) {
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err == nil {
		for _, p := range pods.Items {
			if len(p.Status.ContainerStatuses) > 0 {
				removeRestored(t, engine.C, p.Status.ContainerStatuses[0].ContainerID)
			}
		}
	}
}

// podIPOf returns the IP of pod ns/name.
func podIPOf(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	var p corev1.Pod
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}

// waitSessionPhase waits up to timeout for AgentSession ns/name to reach phase want and returns
// it as last read; a read that fails is retried, and the last error is the failure's message.
func waitSessionPhase(ctx context.Context, t *testing.T, c client.Client, ns, name string, want v1alpha1.AgentSessionPhase, timeout time.Duration) *v1alpha1.AgentSession {
	t.Helper()
	var s v1alpha1.AgentSession
	Eventually(t, timeout, "session "+name+" "+string(want), func() (bool, error) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
			return false, err
		}
		return s.Status.Phase == want, fmt.Errorf("phase %q, conditions %+v", s.Status.Phase, s.Status.Conditions)
	})
	return &s
}

// setSessionSuspend sets spec.suspend of AgentSession ns/name (a merge patch of that field only).
func setSessionSuspend(ctx context.Context, t *testing.T, c client.Client, ns, name string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"suspend":%v}}`, on)
	if err := c.Patch(ctx, &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// logSessionObjects logs a namespace's AgentCheckpoints and events (a failed test's context).
func logSessionObjects(t *testing.T, c client.Client, ns string) {
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

// noWorkspaceEngine checkpoints without the workspace (NEURONETES_E2E_SESSION_WORKSPACE_OFF=1),
// as the node agent did before checkpoints carried it.
type noWorkspaceEngine struct{ *snapshot.ContainerdEngine }

// Checkpoint implements snapshot.Engine without the container's workspace.
func (n noWorkspaceEngine) Checkpoint(ctx context.Context, c snapshot.Container, k store.Key, id string, lr bool, p store.ProgressFunc) (*store.Manifest, error) {
	c.Workspace = nil
	return n.ContainerdEngine.Checkpoint(ctx, c, k, id, lr, p)
}
