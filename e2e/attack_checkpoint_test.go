package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/nodeagent/snapshot"
)

// storeEngine is the node agent's snapshot.Engine with CRIU left out: Checkpoint stores a small
// image naming the pod, Restore fetches and verifies a stored one (what the containerd engine
// does before CRIU sees anything). Keys, ids and refusals come from the real reconciler and
// store, which is what these tests attack.
type storeEngine struct {
	st   *store.Store
	work string

	mu       sync.Mutex
	restored []string // "<pod namespace>: <key>/<id>"
}

func (s *storeEngine) Checkpoint(ctx context.Context, c snapshot.Container, k store.Key, id string, _ bool, p store.ProgressFunc) (*store.Manifest, error) {
	dir, err := os.MkdirTemp(s.work, "ck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("memory of "+c.Namespace+"/"+c.Pod), 0o600); err != nil {
		return nil, err
	}
	return s.st.Put(ctx, k, id, dir, map[string]string{"namespace": c.Namespace, "pod": c.Pod}, p)
}

func (s *storeEngine) Restore(ctx context.Context, c snapshot.Container, k store.Key, id string, p store.ProgressFunc) error {
	dir, err := os.MkdirTemp(s.work, "rs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := s.st.Get(ctx, k, id, dir, p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restored = append(s.restored, fmt.Sprintf("%s: %s/%s", c.Namespace, k, id))
	return nil
}

func (s *storeEngine) Latest(ctx context.Context, k store.Key) (*store.Manifest, error) {
	return s.st.Latest(ctx, k)
}

func (s *storeEngine) Prune(ctx context.Context, k store.Key, r store.Retention) (store.PruneResult, error) {
	return s.st.Prune(ctx, k, r, time.Now())
}

// checkpointTenants is a victim and an attacker namespace, each with a running pod, the
// restore-source admission policy of the chart, and the node agent's AgentCheckpoint handling
// in-process over a signed store.
type checkpointTenants struct {
	c                client.Client
	eng              *storeEngine
	victim, attacker string
}

const attackPod = `
apiVersion: v1
kind: Pod
metadata: {name: agent}
spec:
  nodeName: %s
  automountServiceAccountToken: false
  containers: [{name: agent, image: %s, imagePullPolicy: Never}]
`

func setupCheckpointTenants(t *testing.T) *checkpointTenants {
	e := requireEnv(t)
	ctx := context.Background()
	for _, crd := range []string{"agentcheckpoints", "agentclasses"} {
		e.Kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(e.Root, "deploy", "crds", "neuronetes.io_"+crd+".yaml"))
		e.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd+".neuronetes.io", "--timeout=60s")
	}
	policy, err := os.ReadFile(filepath.Join(e.Root, "deploy", "helm", "neuronetes", "files", "admission", "checkpoint-restore-source.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.Apply(t, "", string(policy))

	scheme := ctrlScheme(t)
	c := crClient(t, e.Config)
	tn := &checkpointTenants{c: c, victim: e.Namespace(t, "ckpt-victim"), attacker: e.Namespace(t, "ckpt-attacker")}
	// The policy is enforced once the apiserver has loaded it: probe with a dry run.
	Eventually(t, 30*time.Second, "restore-source admission policy enforced", func() (bool, error) {
		probe := tn.restore("probe", tn.attacker, tn.victim+".probe")
		err := c.Create(ctx, probe, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "spec.checkpointID"), fmt.Errorf("dry-run create of a foreign restore: %v", err)
	})
	for _, ns := range []string{tn.victim, tn.attacker} {
		e.Apply(t, ns, fmt.Sprintf(attackPod, e.NodeName, "neuronetes.local/pause:dev"))
	}

	d, err := store.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := store.LoadSigner(writeSigningKey(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(d, store.Options{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	tn.eng = &storeEngine{st: st, work: t.TempDir()}
	mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(scheme))
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.Setup(mgr, snapshot.Options{NodeName: e.NodeName, Engine: tn.eng}); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = mgr.Start(mctx) }()
	for _, ns := range []string{tn.victim, tn.attacker} {
		e.WaitPodRunning(t, ns, "agent", 2*time.Minute)
	}
	return tn
}

// restore is a Restore AgentCheckpoint of agent "chat" into the namespace's pod.
func (tn *checkpointTenants) restore(name, ns, id string) *v1alpha1.AgentCheckpoint {
	return &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.AgentCheckpointSpec{
		Operation: v1alpha1.RestoreOperation, Agent: "chat", CheckpointID: id, Target: &v1alpha1.ContainerRef{Pod: "agent"}}}
}

// run creates ac and waits until it is Succeeded or Failed.
func (tn *checkpointTenants) run(t *testing.T, ac *v1alpha1.AgentCheckpoint) *v1alpha1.AgentCheckpoint {
	t.Helper()
	ctx := context.Background()
	if err := tn.c.Create(ctx, ac); err != nil {
		t.Fatalf("create AgentCheckpoint %s/%s: %v", ac.Namespace, ac.Name, err)
	}
	var got v1alpha1.AgentCheckpoint
	Eventually(t, 45*time.Second, "AgentCheckpoint "+ac.Namespace+"/"+ac.Name+" finished", func() (bool, error) {
		if err := tn.c.Get(ctx, types.NamespacedName{Namespace: ac.Namespace, Name: ac.Name}, &got); err != nil {
			return false, err
		}
		ph := got.Status.Phase
		return ph == v1alpha1.AgentCheckpointSucceeded || ph == v1alpha1.AgentCheckpointFailed, fmt.Errorf("phase %q %s", ph, got.Status.Message)
	})
	t.Logf("%s/%s: %s %s (checkpoint %s)", ac.Namespace, ac.Name, got.Status.Phase, got.Status.Message, got.Status.CheckpointID)
	return &got
}

// victimCheckpoint has the victim checkpoint its pod under agent "chat" and returns the
// stored manifest.
func (tn *checkpointTenants) victimCheckpoint(t *testing.T) *store.Manifest {
	t.Helper()
	ck := tn.run(t, &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: tn.victim, Name: "ck"}, Spec: v1alpha1.AgentCheckpointSpec{
		Operation: v1alpha1.CheckpointOperation, Agent: "chat", Source: &v1alpha1.ContainerRef{Pod: "agent"}}})
	if ck.Status.Phase != v1alpha1.AgentCheckpointSucceeded {
		t.Fatalf("victim's checkpoint: %s", ck.Status.Message)
	}
	m, err := tn.eng.Latest(context.Background(), store.Key{Namespace: tn.victim, Agent: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// victimUnchanged fails unless the victim's latest "chat" checkpoint is still want, verifies
// and restores, and nothing of the victim's was restored into the attacker's namespace.
func (tn *checkpointTenants) victimUnchanged(t *testing.T, want *store.Manifest) {
	t.Helper()
	ctx := context.Background()
	got, err := tn.eng.Latest(ctx, store.Key{Namespace: tn.victim, Agent: "chat"})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("victim's latest checkpoint = %+v, %v; want the victim's own %s", got, err, want.ID)
	}
	if _, err := tn.eng.st.Get(ctx, want.Key, want.ID, t.TempDir(), nil); err != nil {
		t.Errorf("victim's checkpoint no longer restores: %v", err)
	}
	tn.eng.mu.Lock()
	defer tn.eng.mu.Unlock()
	for _, r := range tn.eng.restored {
		if strings.HasPrefix(r, tn.attacker+":") && strings.Contains(r, tn.victim) {
			t.Errorf("the node agent restored the victim's checkpoint into the attacker's pod: %s", r)
		}
	}
}

// TestAttackRestoreFromForeignNamespace: a tenant names another namespace's checkpoint as its
// restore source, in an AgentCheckpoint and in an AgentClass template. Admission refuses both,
// naming the field; a restore that admission lets through (the agent name alone) finds only the
// attacker's own namespace's checkpoints; the victim's checkpoint is unchanged.
func TestAttackRestoreFromForeignNamespace(t *testing.T) {
	tn := setupCheckpointTenants(t)
	ctx := context.Background()
	victim := tn.victimCheckpoint(t)

	err := tn.c.Create(ctx, tn.restore("steal", tn.attacker, victim.ID))
	if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.checkpointID") {
		t.Errorf("restore of the victim's checkpoint %s admitted or refused without naming spec.checkpointID: %v", victim.ID, err)
	} else {
		t.Logf("refused: %v", err)
	}
	class := &v1alpha1.AgentClass{ObjectMeta: metav1.ObjectMeta{Namespace: tn.attacker, Name: "thief"}}
	class.Spec.Template = podTemplateWithAnnotation(v1alpha1.RestoreFromAnnotation, "chat/"+victim.ID)
	err = tn.c.Create(ctx, class)
	if err == nil || !strings.Contains(err.Error(), v1alpha1.RestoreFromAnnotation) {
		t.Errorf("AgentClass restoring from the victim's checkpoint admitted or refused without naming the annotation: %v", err)
	} else {
		t.Logf("refused: %v", err)
	}

	// Admitted: the attacker's "chat" is the attacker's own (empty) key.
	got := tn.run(t, tn.restore("same-agent-name", tn.attacker, ""))
	if got.Status.Phase != v1alpha1.AgentCheckpointFailed || !strings.Contains(got.Status.Message, "NoCheckpoint") {
		t.Errorf("restore of agent chat in the attacker's namespace: %s %q, want Failed NoCheckpoint", got.Status.Phase, got.Status.Message)
	}
	tn.victimUnchanged(t, victim)
}

// TestAttackPublishOverForeignLatest: a tenant checkpoints its own pod under the victim's agent
// name, to become the victim's "latest". The image lands under the attacker's namespace; the
// victim's latest and the victim's next restore are still the victim's own.
func TestAttackPublishOverForeignLatest(t *testing.T) {
	tn := setupCheckpointTenants(t)
	victim := tn.victimCheckpoint(t)

	pub := tn.run(t, &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: tn.attacker, Name: "publish"}, Spec: v1alpha1.AgentCheckpointSpec{
		Operation: v1alpha1.CheckpointOperation, Agent: "chat", Source: &v1alpha1.ContainerRef{Pod: "agent"}}})
	if pub.Status.Phase != v1alpha1.AgentCheckpointSucceeded {
		t.Fatalf("attacker's own checkpoint failed: %s", pub.Status.Message)
	}
	tn.victimUnchanged(t, victim)
	rs := tn.run(t, tn.restore("restore", tn.victim, ""))
	if rs.Status.Phase != v1alpha1.AgentCheckpointSucceeded || rs.Status.CheckpointID != victim.ID {
		t.Errorf("victim's restore of its latest: %s, checkpoint %q; want Succeeded with %s (not the attacker's %s)",
			rs.Status.Phase, rs.Status.CheckpointID, victim.ID, pub.Status.CheckpointID)
	}
	if _, err := tn.eng.st.Get(context.Background(), store.Key{Namespace: tn.victim, Agent: "chat"}, pub.Status.CheckpointID, t.TempDir(), nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("attacker's checkpoint %s under the victim's key: %v, want ErrNotFound", pub.Status.CheckpointID, err)
	}
}

// snapshotManagerOptions configure a manager that runs the node agent's AgentCheckpoint
// reconciler in the test process. Each test starts its own, under the same controller name
// (agentcheckpoint-<node>), so name validation is off.
func snapshotManagerOptions(scheme *runtime.Scheme) ctrl.Options {
	skip := true
	return ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: &skip}}
}

// podTemplateWithAnnotation is a minimal agent pod template carrying one annotation.
func podTemplateWithAnnotation(k, v string) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k: v}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "neuronetes.local/pause:dev"}}},
	}
}
