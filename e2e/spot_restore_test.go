package e2e

// Spot interruption with a checkpoint (docs/autoscaling.md "Interruptions"): the interrupted pod's
// replacement on the other real node is restored from the pod's own checkpoint.

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/controller/agentpool"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/internal/testreq"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

// spotRestoreYAML: one spot-eligible serving pod of the demo agent, run as root with MPTCP off
// for CRIU (as in TestCheckpointDemoAgentRestoreIntoWarmPod), with a slow readiness probe (a probe
// connection open at dump time would be a socket CRIU has to carry).
const spotRestoreYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: ck}
spec:
  sidecar: {inject: false}
  template:
    spec:
      nodeSelector: {neuronetes.io/e2e-spot: "%[2]s"}
      tolerations: [{key: neuronetes.io/second-node, operator: Exists, effect: NoSchedule}]
      automountServiceAccountToken: false
      containers:
      - name: agent
        image: %[1]s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--token-rate=2000", "--ttft-base=1ms"]
        securityContext: {runAsUser: 0}
        env: [{name: GODEBUG, value: multipathtcp=0}]
        readinessProbe: {httpGet: {path: /readyz, port: 8000}, periodSeconds: 5}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: ck}
spec:
  agentClassRef: {name: ck}
  replicas: 1
  minReplicas: 1
  maxReplicas: 1
  prewarmPercent: 0
  drainGracePeriodSeconds: 2
  autoscaling:
    metrics: [{type: concurrent-sessions, target: "100"}]
    spotStrategy:
      enabled: true
      maxSpotPercent: 100
      onInterruption: {action: migrate-to-on-demand, timeout: 120s}
`

// startNodeAgents runs the node agent's AgentCheckpoint handling in-process for both real nodes,
// each on its own containerd, over one checkpoint store, and returns their engines by node.
func startNodeAgents(t *testing.T, e *Env, ctx context.Context) map[string]*snapshot.ContainerdEngine {
	t.Helper()
	engines := map[string]*snapshot.ContainerdEngine{}
	store, key := t.TempDir(), writeSigningKey(t)
	for node, sock := range map[string]string{e.NodeName: filepath.Join(e.Root, ".local", "containerd", "containerd.sock"),
		cluster.SecondNodeName: cluster.SecondNodeSocket(e.Root)} {
		scheme := ctrlScheme(t)
		mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(scheme))
		if err != nil {
			t.Fatal(err)
		}
		engine, err := snapshot.NewEngine(ctx, snapshot.Config{ContainerdSocket: sock, StoreDir: store, WorkDir: t.TempDir(), SigningKeyFile: key})
		if err != nil {
			t.Fatal(err)
		}
		if err := snapshot.Setup(mgr, snapshot.Options{NodeName: node, Engine: engine}); err != nil {
			t.Fatal(err)
		}
		engines[node] = engine
		go func() { _ = mgr.Start(ctx) }()
	}
	return engines
}

// TestSpotInterruptionRestoresFromCheckpoint: the pool's pod on the spot node (the first) serves
// three turns and is checkpointed (leaveRunning); the spot node gets karpenter.sh/disrupted. The
// replacement on the on-demand node (the second) is a resume pod restored from that checkpoint:
// it carries the restore-from annotation, its Restore AgentCheckpoint succeeds, its agent's token
// counters are the interrupted agent's, it serves the next turn, and the interrupted pod is gone
// within the timeout.
func TestSpotInterruptionRestoresFromCheckpoint(t *testing.T) {
	e := requireEnv(t)
	criuPath, err := criu.Locate()
	if err != nil {
		testreq.Tool(t, "criu", "not found (hack/test-deps.d/30-criu.sh builds it): %v", err)
	}
	if err := criu.Check(context.Background(), criuPath); err != nil {
		testreq.Tool(t, "criu", "criu check fails here: %v", err)
	}
	ctrlInstallCRDs(t, e)
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	e.requireSecondNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := e.NamespaceWithPodSecurity(t, "spot-ck", "privileged", "CRIU on the development VM needs the checkpointed agent to run as root (docs/checkpoint.md)")
	spotNode, odNode := e.NodeName, cluster.SecondNodeName
	labelSpotNodes(t, e, ns, spotNode, odNode)
	startNodeAgents(t, e, ctx)
	ctl := startController(t, e, ns, "neuronetes.local/no-sidecar:dev", "", "--session-restore-host-image=neuronetes.local/pause:dev")
	e.Apply(t, ns, fmt.Sprintf(spotRestoreYAML, agentImg, ns))

	c, err := client.New(e.Config, client.Options{Scheme: ctrlScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	var victim string
	var victimIP string
	waitPool(t, e, ns, "ck", procLogs(ctl), 3*time.Minute, "the pool's pod Ready on the spot node", func() (bool, error) {
		pods := poolPods(t, e, ns, "ck")["serving"]
		if len(pods) == 1 && readyCount(pods) == 1 && pods[0].Spec.NodeName == spotNode {
			victim, victimIP = pods[0].Name, pods[0].Status.PodIP
			return true, nil
		}
		return false, fmt.Errorf("serving %d, ready %d", len(pods), readyCount(pods))
	})
	for i := range 3 {
		if err := chat(victimIP, fmt.Sprintf("turn %d: remember the number 42", i)); err != nil {
			t.Fatal(err)
		}
	}
	served, err := demoCounters(victimIP)
	if err != nil || served["vllm:generation_tokens_total"] == 0 {
		t.Fatalf("demo agent counters %v, %v", served, err)
	}
	ck := &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "before-interruption"},
		Spec: v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Agent: "ck", LeaveRunning: true,
			Source: &v1alpha1.ContainerRef{Pod: victim}}}
	if err := c.Create(ctx, ck); err != nil {
		t.Fatal(err)
	}
	waitCheckpoint(t, c, ns, ck.Name)

	taintNode(t, e, spotNode, true)
	t.Cleanup(func() { taintNode(t, e, spotNode, false) })
	notice := time.Now()
	var repl string
	waitPool(t, e, ns, "ck", procLogs(ctl), 2*time.Minute, "a resume pod on the on-demand node", func() (bool, error) {
		for _, p := range poolPods(t, e, ns, "ck")["serving"] {
			if p.Name != victim && p.Annotations[agentpool.RestoresInterruptedAnnotation] == victim {
				repl = p.Name
				return p.Annotations[v1alpha1.RestoreFromAnnotation] == "ck/"+ns+".before-interruption" && p.Spec.NodeName == odNode,
					fmt.Errorf("replacement %s on %q with annotations %v", p.Name, p.Spec.NodeName, p.Annotations)
			}
		}
		return false, fmt.Errorf("no resume pod yet")
	})
	waitCheckpoint(t, c, ns, repl+"-restore")
	Eventually(t, 2*time.Minute, "interrupted pod "+victim+" gone", func() (bool, error) {
		_, err := e.Kube.CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	t.Logf("interrupted pod gone %s after the notice (timeout 120s)", time.Since(notice).Round(10*time.Millisecond))
	if time.Since(notice) > 120*time.Second {
		t.Errorf("the drain took %s, over the 120s timeout", time.Since(notice))
	}
	p := e.WaitPodRunning(t, ns, repl, time.Minute)
	restored, err := demoCounters(p.Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range served {
		if restored[k] != v {
			t.Errorf("restored agent %s = %v, want %v (the interrupted agent's)", k, restored[k], v)
		}
	}
	if err := chat(p.Status.PodIP, "turn 4: what was the number?"); err != nil {
		t.Fatalf("the restored replacement does not serve: %v", err)
	}
}

// waitCheckpoint waits until the AgentCheckpoint succeeds (failing the test when it fails).
func waitCheckpoint(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	var got v1alpha1.AgentCheckpoint
	Eventually(t, 2*time.Minute, "AgentCheckpoint "+name+" done", func() (bool, error) {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &got); err != nil {
			return false, err
		}
		if got.Status.Phase == v1alpha1.AgentCheckpointFailed {
			t.Fatalf("AgentCheckpoint %s failed: %s", name, got.Status.Message)
		}
		return got.Status.Phase == v1alpha1.AgentCheckpointSucceeded, fmt.Errorf("phase %q %s", got.Status.Phase, got.Status.Message)
	})
	t.Logf("%s: %s (checkpoint %s)", name, got.Status.Message, got.Status.CheckpointID)
}
