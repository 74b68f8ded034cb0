package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/container"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

const checkpointPods = `
apiVersion: v1
kind: Pod
metadata:
  name: agent
  labels: {app: ckpt-e2e}
spec:
  nodeName: %[3]s
  automountServiceAccountToken: false
  containers:
  - name: agent
    image: %[1]s
    imagePullPolicy: Never
    args: ["--listen=:8000", "--token-rate=2000", "--ttft-base=1ms"]
    # Root, not the image's non-root USER: CRIU reads the target's rlimits (prlimit), which needs
    # the same uid or CAP_SYS_RESOURCE, and the development VM's capability bounding set lacks
    # CAP_SYS_RESOURCE (docs/checkpoint.md). Ordinary nodes have it.
    securityContext: {runAsUser: 0}
    env:
    # Go >= 1.24 listens with MPTCP by default; CRIU 4.1 cannot dump MPTCP sockets.
    - {name: GODEBUG, value: multipathtcp=0}
---
apiVersion: v1
kind: Pod
metadata:
  name: warm
  labels: {app: ckpt-e2e}
  annotations:
    checkpoint.neuronetes.io/restore-from: demo-chat
spec:
  nodeName: %[3]s
  automountServiceAccountToken: false
  containers:
  - name: host
    image: %[2]s
    imagePullPolicy: Never
    securityContext: {runAsUser: 0}
`

// demoCounters reads the demo agent's token counters: its in-memory record
// of the conversation it served.
func demoCounters(ip string) (map[string]float64, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + ip + ":8000/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range []string{"vllm:prompt_tokens_total", "vllm:generation_tokens_total"} {
			if strings.HasPrefix(line, name) {
				f := strings.Fields(line)
				v, err := strconv.ParseFloat(f[len(f)-1], 64)
				if err == nil {
					out[name] = v
				}
			}
		}
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("metrics of %s lack token counters: %v", ip, out)
	}
	return out, nil
}

func chat(ip, text string) error {
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	body := fmt.Sprintf(`{"model":"demo-model","max_tokens":16,"messages":[{"role":"user","content":%q}]}`, text)
	resp, err := c.Post("http://"+ip+":8000/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("chat on %s: %s", ip, resp.Status)
	}
	_, err = bufio.NewReader(resp.Body).WriteTo(devNull{})
	return err
}

// agentReady reports whether the demo agent at ip answers /readyz with 200.
func agentReady(ip string) (bool, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + ip + ":8000/readyz")
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("/readyz on %s: %s", ip, resp.Status)
	}
	return true, nil
}

type devNull struct{}

func (devNull) Write(b []byte) (int, error) { return len(b), nil }

// TestCheckpointDemoAgentRestoreIntoWarmPod checkpoints a demo-agent container
// that has served a conversation (AgentCheckpoint Checkpoint, through
// containerd and CRIU into the image store) and restores it into a warm pod
// (AgentCheckpoint Restore); the restored agent still holds the token
// counters of the conversation and keeps serving at the warm pod's IP.
func TestCheckpointDemoAgentRestoreIntoWarmPod(t *testing.T) {
	e := requireEnv(t)
	sock := requireContainerCRIU(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e.Kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(e.Root, "deploy", "crds", "neuronetes.io_agentcheckpoints.yaml"))
	e.Kubectl(t, "wait", "--for=condition=Established", "crd/agentcheckpoints.neuronetes.io", "--timeout=60s")

	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	ns := e.NamespaceWithPodSecurity(t, "ckpt", "baseline",
		"CRIU on the development VM needs the checkpointed agent to run as root (docs/checkpoint.md)")
	e.Apply(t, ns, fmt.Sprintf(checkpointPods, agentImg, "neuronetes.local/pause:dev", e.NodeName))
	agent := e.WaitPodRunning(t, ns, "agent", 2*time.Minute)
	warm := e.WaitPodRunning(t, ns, "warm", 2*time.Minute)

	// No readiness probe on the agent: a probe connection open at dump time would be a
	// socket CRIU has to carry. Running is not listening yet, so wait for /readyz here.
	Eventually(t, 30*time.Second, "demo agent at "+agent.Status.PodIP+" answers /readyz", func() (bool, error) {
		return agentReady(agent.Status.PodIP)
	})
	for i := 0; i < 3; i++ {
		if err := chat(agent.Status.PodIP, fmt.Sprintf("turn %d: remember the number 42", i)); err != nil {
			t.Fatal(err)
		}
	}
	served, err := demoCounters(agent.Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	if served["vllm:generation_tokens_total"] == 0 {
		t.Fatalf("demo agent served no tokens: %v", served)
	}

	// The node agent's AgentCheckpoint handling, in-process.
	scheme := ctrlScheme(t)
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
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go func() { _ = mgr.Start(mctx) }()
	t.Cleanup(func() { removeRestored(t, engine.C, warm.Status.ContainerStatuses[0].ContainerID) })

	c := crClient(t, e.Config)
	run := func(name string, spec v1alpha1.AgentCheckpointSpec) *v1alpha1.AgentCheckpoint {
		t.Helper()
		ac := &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
		if err := c.Create(ctx, ac); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.AgentCheckpoint
		Eventually(t, 2*time.Minute, "AgentCheckpoint "+name+" done", func() (bool, error) {
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &got); err != nil {
				return false, err
			}
			if got.Status.Phase == v1alpha1.AgentCheckpointFailed {
				t.Fatalf("AgentCheckpoint %s failed: %s", name, got.Status.Message)
			}
			return got.Status.Phase == v1alpha1.AgentCheckpointSucceeded, fmt.Errorf("phase %q %s", got.Status.Phase, got.Status.Message)
		})
		t.Logf("%s: %s (checkpoint %s, %d bytes, %d new)", name, got.Status.Message, got.Status.CheckpointID, got.Status.TotalBytes, got.Status.NewBytes)
		return &got
	}
	ck := run("ck", v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Agent: "demo-chat",
		Source: &v1alpha1.ContainerRef{Pod: "agent"}, Retention: &v1alpha1.CheckpointRetention{KeepLast: 2}})
	if ck.Status.TotalBytes == 0 {
		t.Errorf("checkpoint status has no size: %+v", ck.Status)
	}
	run("restore", v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Agent: "demo-chat",
		Target: &v1alpha1.ContainerRef{Pod: "warm"}})

	var restored map[string]float64
	Eventually(t, 30*time.Second, "restored agent serving at the warm pod IP", func() (bool, error) {
		restored, err = demoCounters(warm.Status.PodIP)
		return err == nil, err
	})
	for k, v := range served {
		if restored[k] != v {
			t.Errorf("restored agent %s = %v, want %v (the served conversation)", k, restored[k], v)
		}
	}
	if err := chat(warm.Status.PodIP, "turn 4: what was the number?"); err != nil {
		t.Fatalf("restored agent does not serve: %v", err)
	}
	after, err := demoCounters(warm.Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	if after["vllm:generation_tokens_total"] <= served["vllm:generation_tokens_total"] {
		t.Errorf("restored agent's counters did not continue: %v after %v", after, served)
	}
	t.Logf("served %v; restored %v; after one more turn %v", served, restored, after)
}

// writeSigningKey writes a random manifest signing key (what the chart's Secret holds) and
// returns its path.
func writeSigningKey(t *testing.T) string {
	t.Helper()
	key := make([]byte, 48)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "signing-key")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// removeRestored deletes containers restored into the warm pod's host container.
func removeRestored(t *testing.T, e *container.Engine, hostCRIID string) {
	_, id, _ := strings.Cut(hostCRIID, "://")
	ctx := context.Background()
	cs, err := e.Client.Containers(ctx, fmt.Sprintf("labels.%q==%s", container.LabelHost, id))
	if err != nil {
		t.Logf("listing restored containers: %v", err)
		return
	}
	for _, c := range cs {
		if err := e.Remove(ctx, c.ID()); err != nil {
			t.Logf("removing restored container %s: %v", c.ID(), err)
		}
	}
}
