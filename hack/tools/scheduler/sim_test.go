package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/e2e/scoring"
)

// simulate places a benchmark scenario (e2e/scoring: Layout nodes, ReplicaPod replicas in
// batches, each batch bound before the next is created) with the real kube-scheduler framework on
// a fake clientset: the default profile "default-scheduler" or the shipped "neuronetes" profile,
// on a fresh copy of the nodes. Bindings are recorded by a reactor and written back to the pod.
func simulate(t *testing.T, schedName string, sc scoring.Scenario, nodes []scoring.Node) []scoring.Placement {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	defer cancel()
	client := fake.NewClientset()
	var mu sync.Mutex
	bound := map[string]string{}
	client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(clienttesting.CreateAction).GetObject().(*v1.Binding)
		obj, err := client.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*v1.Pod).DeepCopy()
		p.Spec.NodeName = b.Target.Name
		if err := client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), p, b.Namespace); err != nil {
			return true, nil, err
		}
		mu.Lock()
		bound[b.Name] = b.Target.Name
		mu.Unlock()
		return true, b, nil
	})
	for _, n := range nodes {
		no := scoring.NodeObject(n, nil)
		no.UID = types.UID(no.Name)
		if _, err := client.CoreV1().Nodes().Create(ctx, no, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	def, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	nn, err := options.LoadConfigFromFile(klog.Background(), "../../../deploy/scheduler/neuronetes-scheduler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := overrideWeights(nn.Profiles[0].Plugins, os.Getenv("SCORING_SIM_WEIGHTS")); err != nil {
		t.Fatal(err)
	}
	profiles := append([]config.KubeSchedulerProfile{def.Profiles[0]}, nn.Profiles...)
	reg := frameworkruntime.Registry{CostName: newCost, ModelCacheName: newModelCache, HeadroomName: newHeadroom, ZoneSpreadName: newZoneSpread,
		NetworkTopologyName: newNetworkTopology}
	inf := informers.NewSharedInformerFactory(client, 0)
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), 0)
	bc := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := scheduler.New(ctx, client, inf, dyn, profile.NewRecorderFactory(bc),
		scheduler.WithProfiles(profiles...), scheduler.WithFrameworkOutOfTreeRegistry(reg), scheduler.WithPercentageOfNodesToScore(ptr.To[int32](100)))
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	go sched.Run(ctx)
	var out []scoring.Placement
	want := 0
	for i, batch := range sc.Batches {
		for _, rep := range batch {
			pods := []*v1.Pod{scoring.ReplicaPod("bench", schedName, "pause", nil, nil, rep.Pool, rep.Index)}
			if rep.Size > 1 {
				pg := scoring.GangPodGroup("bench", nil, rep.Pool, rep.Index, rep.Size)
				if _, err := client.SchedulingV1beta1().PodGroups("bench").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				pods = scoring.GangPods("bench", schedName, "pause", nil, nil, rep.Pool, rep.Index, rep.Size)
			}
			for _, pod := range pods {
				pod.UID = types.UID(schedName + "/" + pod.Name) // the apiserver sets it; the fake does not
				if _, err := client.CoreV1().Pods("bench").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			want += rep.Pods()
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return len(bound) >= want, nil
		})
		if err != nil {
			t.Fatalf("%s: batch %d: %d of %d bound: %v", schedName, i, len(bound), want, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for pod, node := range bound {
		pool, gang := scoring.ParsePodName(pod)
		out = append(out, scoring.Placement{Pool: pool, Model: pool, Node: node, Gang: gang, GPUs: scoring.ReplicaGPUs})
	}
	return out
}

// TestScoringSimulation is the scoring benchmark in the scheduler's own framework (no cluster):
// the contended scenarios scoring.Fleet and scoring.Burst (SCORING_SIM_SCENARIO names others,
// comma-separated, from scoring.ScenarioNames), each placed by the default profile and by the
// neuronetes profile, both reports and the scenario's verdict (e2e/scoring.Verdict), then the
// overall verdict last.
func TestScoringSimulation(t *testing.T) {
	// The cluster's gates (e2e/cluster.FeatureGates): the Workload API and gang scheduling, which
	// the gangs scenario's PodGroups need; pods of no PodGroup are scheduled as without them.
	if err := utilfeature.DefaultMutableFeatureGate.Set("GenericWorkload=true,TopologyAwareWorkloadScheduling=true"); err != nil {
		t.Fatal(err)
	}
	// SCORING_SIM_GATES sets scheduler feature gates for the run (e.g. OpportunisticBatching=false).
	if g := os.Getenv("SCORING_SIM_GATES"); g != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(g); err != nil {
			t.Fatal(err)
		}
	}
	names := os.Getenv("SCORING_SIM_SCENARIO")
	if names == "" {
		names = "fleet,burst,gangs"
	}
	var missed []string
	for _, name := range strings.Split(names, ",") {
		sc, err := scoring.ScenarioByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if ok, reasons := simulateScenario(t, sc); !ok {
			missed = append(missed, fmt.Sprintf("%s: %v", sc.Name, reasons))
		}
	}
	if len(missed) > 0 {
		fmt.Printf("verdict: FAIL: %s\n", strings.Join(missed, "; "))
		t.Errorf("verdict: FAIL: %v", missed)
		return
	}
	fmt.Printf("verdict: PASS: neuronetes vs default-scheduler in %s: cost lower, warm share higher, spread kept; gangs: more in one rack, fewer racks per gang\n", names)
}

// simulateScenario places sc with both profiles, prints both reports and the scenario's verdict
// on stdout, and returns the verdict.
func simulateScenario(t *testing.T, sc scoring.Scenario) (bool, []string) {
	t.Helper()
	nodes := sc.Layout()
	var reports []scoring.Report
	for _, s := range []string{"default-scheduler", "neuronetes"} {
		ps := simulate(t, s, sc, nodes)
		if os.Getenv("SCORING_SIM_DUMP") != "" {
			count := map[string]int{}
			for _, p := range ps {
				count[p.Pool+"@"+p.Node]++
			}
			t.Logf("%s placements (pool@node: replicas): %v", s, count)
		}
		r, err := scoring.Measure(s, sc.Wanted(), nodes, ps)
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "== scenario %s: %s\n", sc.Name, sc.About)
	scoring.Write(&sb, reports[0], reports[1])
	ok, reasons := scoring.Verdict(reports[0], reports[1])
	if ok {
		fmt.Fprintf(&sb, "scenario %s: PASS\n", sc.Name)
	} else {
		fmt.Fprintf(&sb, "scenario %s: FAIL: %v\n", sc.Name, reasons)
	}
	fmt.Print(sb.String())
	return ok, reasons
}

// overrideWeights sets Score weights of the profile's multiPoint plugins from
// SCORING_SIM_WEIGHTS ("NeuroNetesNetworkTopology=8,NeuroNetesCost=3"), for weight sweeps.
func overrideWeights(p *config.Plugins, spec string) error {
	if spec == "" {
		return nil
	}
	for _, kv := range strings.Split(spec, ",") {
		name, w, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil {
			return fmt.Errorf("SCORING_SIM_WEIGHTS %q: want Name=weight", kv)
		}
		found := false
		for i := range p.MultiPoint.Enabled {
			if p.MultiPoint.Enabled[i].Name == name {
				p.MultiPoint.Enabled[i].Weight, found = int32(n), true
			}
		}
		if !found {
			return fmt.Errorf("SCORING_SIM_WEIGHTS: %s is not in the profile", name)
		}
	}
	return nil
}
