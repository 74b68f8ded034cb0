package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/nodeagent/agent"
	"github.com/neuronetes/neuronetes/nodeagent/nodeapi"
)

// throttled serves data at about rate bytes per second (a remote source's per-stream throughput).
func throttled(data []byte, rate int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		const chunk = 256 << 10
		tick := time.Duration(float64(time.Second) * chunk / float64(rate))
		for off := 0; off < len(data); off += chunk {
			if _, err := w.Write(data[off:min(off+chunk, len(data))]); err != nil {
				return
			}
			time.Sleep(tick)
		}
	}
}

// TestBindingStartsWeightsFetch: on the real node, with the node agent's only fetch slot held by the
// prewarm of another Model (its source never answers during the test), a pod that uses a cold Model
// is scheduled to the node. Binding starts the Model's fetch at once, ahead of the prewarm, and the
// pod's Events come in order: Scheduled, WeightsFetchStarted (node agent), WeightsReady (node agent),
// then the agent container's Started; the pod's wait-weights init container waited for the fetch, and
// the demo agent reads the weights. Once with the init container in the pod's spec, once added by the
// sidecar webhook (controller --weights-wait-image).
func TestBindingStartsWeightsFetch(t *testing.T) {
	e := requireEnv(t)
	const size = 32 << 20
	data, digest := randomWeights(t, size)
	data2, digest2 := randomWeights(t, size)
	held, heldDigest := randomWeights(t, 1<<20)
	warmDigests := []string{digest, digest2, heldDigest}
	na := startNodeAgent(t, e, &warmDigests, "--max-concurrent-downloads=1", "--download-stall-timeout=10m")

	release, entered := make(chan struct{}), make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/held/model.bin", func(w http.ResponseWriter, r *http.Request) {
		// Headers and a first byte at once (the agent's response-header timeout is 10 s), then
		// nothing until the test ends (the stall timeout is raised above).
		w.Header().Set("Content-Length", strconv.Itoa(len(held)))
		_, _ = w.Write(held[:1])
		w.(http.Flusher).Flush()
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write(held[1:])
	})
	mux.HandleFunc("/llama/model.bin", throttled(data, 8<<20)) // ~4 s
	mux.HandleFunc("/mistral/model.bin", throttled(data2, 8<<20))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)

	model := func(name, path, dg string, sz int) string {
		return fmt.Sprintf(`
apiVersion: neuronetes.io/v1alpha1
kind: Model
metadata: {name: %s}
spec:
  source: {uri: "%s%s"}
  digest: "%s"
  format: raw
  sizeBytes: %d
  mountPath: /models
`, name, srv.URL, path, dg, sz)
	}
	e.Apply(t, na.ns, model("held", "/held/model.bin", heldDigest, len(held)))
	select {
	case <-entered:
	case <-time.After(2 * time.Minute):
		t.Fatal("the node agent never asked for the held Model")
	}
	e.Apply(t, na.ns, model("llama", "/llama/model.bin", digest, size))
	time.Sleep(2 * time.Second) // the Model's prewarm queues behind the held one
	hexd := strings.TrimPrefix(digest, "sha256:")
	if st := entryState(t, na, hexd); st.Phase == agent.PhaseReady || st.BytesCached > 0 {
		t.Fatalf("the Model was fetched before any pod was bound: %+v", st)
	}

	nodeagentImg, demo := e.Image(t, "nodeagent", "./cmd/nodeagent"), e.Image(t, "demo-agent", "./cmd/demo-agent")
	// 1. The pod carries the wait container itself (agent.WeightsWaitContainer).
	pod, mount := boundPod(t, e, na, "bound", "llama", digest, demo)
	pod.Spec.InitContainers = []corev1.Container{agent.WeightsWaitContainer(nodeagentImg, weightsModel("llama", digest), mount)}
	applyPod(t, e, na.ns, pod)
	checkBoundPod(t, e, na, "bound", size)

	// 2. The sidecar webhook adds it (--weights-wait-image) to an opted-in pod that mounts the ready
	// directory of another cold Model, queued behind the held prewarm too.
	e.Apply(t, na.ns, model("mistral", "/mistral/model.bin", digest2, size))
	startController(t, e, na.ns, demo, "--listen=127.0.0.1:7070 --model=sidecar-standin", "--weights-wait-image="+nodeagentImg)
	if st := entryState(t, na, strings.TrimPrefix(digest2, "sha256:")); st.Phase == agent.PhaseReady || st.BytesCached > 0 {
		t.Fatalf("the second Model was fetched before any pod was bound: %+v", st)
	}
	pod, _ = boundPod(t, e, na, "injected", "mistral", digest2, demo)
	pod.Labels = map[string]string{v1alpha1.InjectSidecarLabel: "true"}
	applyPod(t, e, na.ns, pod)
	got := checkBoundPod(t, e, na, "injected", size)
	if n := len(got.Spec.InitContainers); n < 2 || got.Spec.InitContainers[n-1].Name != agent.WeightsWaitContainerName || got.Spec.InitContainers[0].Name != "neuronetes-sidecar" {
		t.Errorf("injected init containers %v, want the sidecar first and %s last", containerNames(got.Spec.InitContainers), agent.WeightsWaitContainerName)
	}

	if st := entryState(t, na, strings.TrimPrefix(heldDigest, "sha256:")); st.Phase == agent.PhaseReady {
		t.Errorf("the held prewarm finished first: %+v", st)
	}
}

func weightsModel(name, digest string) *v1alpha1.Model {
	return &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ModelSpec{Digest: digest, Format: "raw", MountPath: "/models"}}
}

// boundPod is a demo agent pod of Model model, required onto the test's node by node affinity (so
// the scheduler binds it and records Scheduled), reading its weights through agent.WeightsVolume.
func boundPod(t *testing.T, e *Env, na *nodeAgentEnv, name, model, digest, demo string) (*corev1.Pod, corev1.VolumeMount) {
	t.Helper()
	vol, mount, err := agent.WeightsVolume(na.cacheDir, weightsModel(model, digest), "weights")
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{agent.PodModelAnnotation: model}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{e.NodeName}}}}},
			}}},
			Containers: []corev1.Container{{Name: "agent", Image: demo, ImagePullPolicy: corev1.PullNever,
				Args: []string{"--weights=" + filepath.Join(mount.MountPath, agent.WeightsFileName("raw"))}, VolumeMounts: []corev1.VolumeMount{mount}}},
			Volumes: []corev1.Volume{vol},
		},
	}, mount
}

func applyPod(t *testing.T, e *Env, ns string, pod *corev1.Pod) {
	t.Helper()
	manifest, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	e.Apply(t, ns, string(manifest))
}

func containerNames(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// checkBoundPod waits for the pod to run and checks its Events: WeightsFetchStarted within 1 s of
// Scheduled, then WeightsReady after the ~4 s fetch, then the agent container's Started; the wait
// container waited for the fetch; the demo agent read its weights; the entry is pinned and warm.
func checkBoundPod(t *testing.T, e *Env, na *nodeAgentEnv, name string, size int64) *corev1.Pod {
	t.Helper()
	running := e.WaitPodRunning(t, na.ns, name, 3*time.Minute)
	evs := podEvents(t, e, na.ns, name)
	t.Logf("pod %s events:\n%s", name, evs)
	order := map[string]int{}
	for i, ev := range evs {
		if _, ok := order[ev.reason+ev.fieldPath]; !ok {
			order[ev.reason+ev.fieldPath] = i
		}
	}
	at := func(reason, fieldPath string) time.Time {
		t.Helper()
		for _, ev := range evs {
			if ev.reason == reason && (fieldPath == "" || ev.fieldPath == fieldPath) {
				return ev.at
			}
		}
		t.Fatalf("no %s event (%s) on pod %s:\n%s", reason, fieldPath, name, evs)
		return time.Time{}
	}
	scheduled, started := at("Scheduled", ""), at(agent.ReasonWeightsFetchStarted, "")
	ready, agentStarted := at(agent.ReasonWeightsReady, ""), at("Started", "spec.containers{agent}")
	// The scheduler records Scheduled once its bind call returned, while the bind reaches the node
	// agent through its watch: the two race by milliseconds. The fetch must start at the bind.
	if d := started.Sub(scheduled); d < -time.Second || d > time.Second {
		t.Errorf("pod %s: WeightsFetchStarted %s after Scheduled, want within 1 s of the bind", name, d)
	}
	if ready.Sub(started) < 2*time.Second {
		t.Errorf("pod %s: WeightsReady %s after WeightsFetchStarted, want the ~4 s fetch between them", name, ready.Sub(started))
	}
	if b, c, d := order[agent.ReasonWeightsFetchStarted], order[agent.ReasonWeightsReady], order["Startedspec.containers{agent}"]; !(b < c && c < d) || agentStarted.Before(ready) {
		t.Errorf("pod %s: Events out of order: want WeightsFetchStarted, WeightsReady, then the agent container's Started", name)
	}
	for _, cs := range running.Status.ContainerStatuses {
		if cs.Name == "agent" && cs.State.Running != nil && cs.State.Running.StartedAt.Time.Before(ready.Truncate(time.Second)) { // startedAt has whole seconds
			t.Errorf("pod %s: the agent container's startedAt %s is before WeightsReady %s", name, cs.State.Running.StartedAt, ready)
		}
	}
	logs, _ := e.KubectlErr("logs", "-n", na.ns, name, "-c", agent.WeightsWaitContainerName)
	var n int64
	var waited float64
	if _, err := fmt.Sscanf(logs, "%d %f", &n, &waited); err != nil || n != size || waited < 2 {
		t.Errorf("pod %s: wait-weights printed %q: want %d bytes after waiting the fetch (>= 2 s)", name, logs, size)
	}
	Eventually(t, 30*time.Second, "demo agent read its weights", func() (bool, error) {
		logs, err := e.KubectlErr("logs", "-n", na.ns, name, "-c", "agent")
		return strings.Contains(logs, `"Weights loaded"`) && strings.Contains(logs, fmt.Sprintf(" bytes=%d ", size)), fmt.Errorf("logs: %q (%v)", logs, err)
	})
	var hexd string
	for _, v := range running.Spec.Volumes {
		if v.HostPath != nil && agent.IsReadyDir(v.HostPath.Path) {
			hexd = filepath.Base(v.HostPath.Path)
		}
	}
	if st := entryState(t, na, hexd); !st.Pinned || !st.Warm {
		t.Errorf("pod %s: its entry %+v, want pinned and warm", name, st)
	}
	t.Logf("pod %s: Scheduled to WeightsFetchStarted %s, to WeightsReady %s, to the agent Started %s; wait-weights waited %.2f s",
		name, started.Sub(scheduled), ready.Sub(scheduled), agentStarted.Sub(scheduled), waited)
	return running
}

func entryState(t *testing.T, na *nodeAgentEnv, hexd string) agent.State {
	t.Helper()
	st, err := nodeapi.NewClient(na.socket).Status(context.Background())
	if err != nil {
		t.Fatalf("node API status: %v", err)
	}
	for _, s := range st.Entries {
		if s.Hex == hexd {
			return s
		}
	}
	return agent.State{Hex: hexd, Phase: agent.PhasePending}
}

type podEvent struct {
	at                         time.Time
	reason, fieldPath, message string
}

type podEventList []podEvent

func (l podEventList) String() string {
	var b strings.Builder
	for _, ev := range l {
		fmt.Fprintf(&b, "  %s %-20s %-40s %s\n", ev.at.Format("15:04:05.000"), ev.reason, ev.fieldPath, ev.message)
	}
	return b.String()
}

// podEvents lists a pod's core Events, oldest first. Recorders name an Event <object>.<creation time
// in hex nanoseconds> (client-go's record and events packages), which orders and times Events to the
// nanosecond where their timestamps have whole seconds; eventTime, else firstTimestamp, otherwise.
func podEvents(t *testing.T, e *Env, ns, pod string) podEventList {
	t.Helper()
	list, err := e.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	var out podEventList
	for _, ev := range list.Items {
		at := ev.FirstTimestamp.Time
		if !ev.EventTime.IsZero() {
			at = ev.EventTime.Time
		}
		if i := strings.LastIndexByte(ev.Name, '.'); i > 0 {
			if ns, err := strconv.ParseInt(ev.Name[i+1:], 16, 64); err == nil && ns > 0 {
				at = time.Unix(0, ns)
			}
		}
		out = append(out, podEvent{at: at, reason: ev.Reason, fieldPath: ev.InvolvedObject.FieldPath, message: ev.Message})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}
