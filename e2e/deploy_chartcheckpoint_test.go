package e2e

// TestDeployLocal's subtest SessionSuspendResumeChart: a session is suspended and resumed by the
// chart's own node agent (nodeagent.checkpoint.enabled in deploy/helm/values/local.yaml): no
// in-process node agent runs, so the session reaches Suspended and Running again only if the
// DaemonSet's agent dumps it through the local cluster's containerd and restores it.

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/container"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

// Paths of the e2e release's node agent checkpointing on the node (installRelease's values):
// its store and its CRIU staging directory, removed after the release.
const (
	deployCheckpointStore = "/var/lib/neuronetes-e2e/checkpoints"
	deployCheckpointWork  = "/dev/shm/neuronetes-e2e-checkpoint"
)

// chartSessionClassYAML: an AgentClass of e2e/cmd/session-agent calling its tool at %[2]s, as
// root (CRIU on the development VM dumps only root processes, docs/checkpoint.md), and its session.
const chartSessionClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: ck-chart}
spec:
  template:
    spec:
      terminationGracePeriodSeconds: 1
      securityContext: {runAsNonRoot: false}
      containers:
      - name: agent
        image: %[1]s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--tool-url=http://%[2]s/v1/tools/facts"]
        env: [{name: GODEBUG, value: multipathtcp=0}]
        securityContext: {runAsUser: 0}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentSession
metadata: {name: ck-chart-s}
spec:
  classRef: {name: ck-chart}
`

// chartRestoreCleaner returns an engine on the local cluster's containerd that only removes what
// the chart's node agent restored into a namespace's pods (removeRestoredIn) before they go; it
// checkpoints nothing.
func chartRestoreCleaner(t *testing.T, sock string) *snapshot.ContainerdEngine {
	t.Helper()
	cl, err := container.Connect(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return &snapshot.ContainerdEngine{C: &container.Engine{Client: cl, WorkDir: deployCheckpointWork}}
}

// deploySessionSuspendResumeChart is TestDeployLocal's subtest SessionSuspendResumeChart. A
// session serves two turns (its tool's answers in memory, a journal in its workspace), is
// suspended and resumed through spec.suspend with no node agent but the chart's; the restored
// process must hold the same memory and journal and serve a third turn. The chart's node agent
// must have logged the dump and the restore of the session's checkpoint, and no file of its store
// on the node may be readable by others than root (the session's data at rest).
func deploySessionSuspendResumeChart(t *testing.T, e *Env, r *deployRelease) {
	sock := requireContainerCRIU(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := r.exampleNS
	e.Kubectl(t, "label", "namespace", ns, "--overwrite", "pod-security.kubernetes.io/enforce=baseline")
	t.Cleanup(func() {
		_, _ = e.KubectlErr("label", "namespace", ns, "--overwrite", "pod-security.kubernetes.io/enforce=restricted")
	})
	c := crClient(t, e.Config)
	engine := chartRestoreCleaner(t, sock)

	netcheckImg := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	proxyLabels := fmt.Sprintf("app.kubernetes.io/name: neuronetes, app.kubernetes.io/instance: %s, app.kubernetes.io/component: dispatcher", r.name)
	e.Apply(t, r.namespace, netcheckServer("ck-chart-toolproxy", proxyLabels, netcheckImg, ":8091", false))
	proxy := net.JoinHostPort(e.WaitPodRunning(t, r.namespace, "ck-chart-toolproxy", 2*time.Minute).Status.PodIP, "8091")
	img := e.Image(t, "session-agent", "./e2e/cmd/session-agent")
	e.Apply(t, ns, fmt.Sprintf(chartSessionClassYAML, img, proxy))
	t.Cleanup(func() { removeRestoredIn(t, c, engine, ns) })
	t.Cleanup(func() {
		if t.Failed() {
			logSessionObjects(t, c, ns)
			logs, _ := e.KubectlErr("-n", r.namespace, "logs", "ds/"+r.name+"-neuronetes-nodeagent", "--tail=60")
			t.Logf("chart node agent log:\n%s", logs)
		}
	})
	first := waitSessionPhase(ctx, t, c, ns, "ck-chart-s", v1alpha1.SessionRunning, 2*time.Minute).Status.PodName
	ip := podIPOf(t, c, ns, first)
	Eventually(t, 30*time.Second, "session agent of "+first+" answers /readyz", func() (bool, error) { return agentReady(ip) })
	for i := 1; i <= 2; i++ {
		out, err := sessionAgentTurn(ip, fmt.Sprintf("turn %d", i))
		if err != nil || !strings.Contains(out, fmt.Sprintf("turn %d; I remember %d tool answers", i, i)) {
			t.Fatalf("turn %d in %s: %v %s", i, first, err, out)
		}
	}
	var before sessionAgentState
	if err := sessionAgentGet(ip, "/state", &before); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	setSessionSuspend(ctx, t, c, ns, "ck-chart-s", true)
	ck := waitSessionPhase(ctx, t, c, ns, "ck-chart-s", v1alpha1.SessionSuspended, 2*time.Minute).Status.LastCheckpoint
	t.Logf("[e2e] suspended %s by the chart's node agent in %s: checkpoint %s", first, time.Since(start).Round(time.Millisecond), ck)
	start = time.Now()
	setSessionSuspend(ctx, t, c, ns, "ck-chart-s", false)
	s := waitSessionPhase(ctx, t, c, ns, "ck-chart-s", v1alpha1.SessionRunning, 2*time.Minute)
	t.Logf("[e2e] resumed into %s in %s", s.Status.PodName, time.Since(start).Round(time.Millisecond))
	if s.Status.PodName == first {
		t.Fatalf("resumed in the suspended pod %s", first)
	}
	ip2 := podIPOf(t, c, ns, s.Status.PodName)
	var after sessionAgentState
	if err := sessionAgentGet(ip2, "/state", &after); err != nil {
		t.Fatal(err)
	}
	if after.Turns != 2 || after.MemorySHA256 != before.MemorySHA256 || after.Journal != before.Journal {
		t.Fatalf("restored state %+v, want %+v", after, before)
	}
	if out, err := sessionAgentTurn(ip2, "turn 3"); err != nil || !strings.Contains(out, "turn 3; I remember 3 tool answers") {
		t.Fatalf("turn 3 in the restored process: %v %s", err, out)
	}

	// The DaemonSet's agent did both: its log names the checkpoint it stored and restored.
	logs := e.Kubectl(t, "-n", r.namespace, "logs", "ds/"+r.name+"-neuronetes-nodeagent", "--tail=-1")
	for _, want := range []string{"Checkpointed container", "Restored container"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the chart's node agent never logged %q:\n%s", want, logs)
		}
	}
	// Victim data at rest: the session's memory is in the store's files on the node; none may be
	// readable or writable by group or others (the directories, 0755, name keys only).
	n := 0
	err := filepath.WalkDir(deployCheckpointStore, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			return fmt.Errorf("%s is %v: readable or writable beyond root", p, info.Mode().Perm())
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatalf("checkpoint store on the node: %v", err)
	}
	if n < 2 {
		t.Fatalf("checkpoint store %s holds %d files: the chart's node agent stored nothing there", deployCheckpointStore, n)
	}
	t.Logf("[e2e] %d files in the chart node agent's store, none open to group or others", n)
}

// removeDeployCheckpointDirs removes the e2e release's checkpoint store and staging directory from
// the node (installRelease runs it after the uninstall).
func removeDeployCheckpointDirs(t *testing.T) {
	for _, d := range []string{deployCheckpointStore, deployCheckpointWork} {
		if err := os.RemoveAll(d); err != nil {
			t.Logf("removing %s: %v", d, err)
		}
	}
}
