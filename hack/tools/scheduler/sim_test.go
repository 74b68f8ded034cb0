package main

import (
	"context"
	"fmt"
	"os"
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

// simulate places the benchmark workload (e2e/scoring: Layout nodes, ReplicaPod pools, one pool
// after the other) with the real kube-scheduler framework on a fake clientset: the default
// profile "default-scheduler" and the shipped "neuronetes" profile, each on a fresh copy of the
// nodes. Bindings are recorded by a reactor and written back to the pod.
func simulate(t *testing.T, schedName string, nodes []scoring.Node, pools, replicas int) []scoring.Placement {
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
	profiles := append([]config.KubeSchedulerProfile{def.Profiles[0]}, nn.Profiles...)
	reg := frameworkruntime.Registry{CostName: newCost, ModelCacheName: newModelCache, HeadroomName: newHeadroom, ZoneSpreadName: newZoneSpread}
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
	for p := range pools {
		for r := range replicas {
			pod := scoring.ReplicaPod("bench", schedName, "pause", nil, nil, p, r)
			pod.UID = types.UID(schedName + "/" + pod.Name) // the apiserver sets it; the fake does not
			if _, err := client.CoreV1().Pods("bench").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		want := (p + 1) * replicas
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return len(bound) >= want, nil
		})
		if err != nil {
			t.Fatalf("%s: pool m%d: %d of %d bound: %v", schedName, p, len(bound), want, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for pod, node := range bound {
		pool := pod[:strings.Index(pod, "-")]
		out = append(out, scoring.Placement{Pool: pool, Model: pool, Node: node, GPUs: scoring.ReplicaGPUs})
	}
	return out
}

// TestScoringSimulation is the scoring benchmark in the scheduler's own framework (no cluster):
// 48 nodes, 3 pools of 40 replicas, the default profile against the neuronetes profile, the
// verdict of e2e/scoring.Verdict.
func TestScoringSimulation(t *testing.T) {
	const nodesN, pools, replicas = 48, 3, 40
	// SCORING_SIM_GATES sets scheduler feature gates for the run (e.g. OpportunisticBatching=false).
	if g := os.Getenv("SCORING_SIM_GATES"); g != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(g); err != nil {
			t.Fatal(err)
		}
	}
	nodes := make([]scoring.Node, nodesN)
	for i := range nodes {
		nodes[i] = scoring.Layout(i, pools)
	}
	var reports []scoring.Report
	for _, s := range []string{"default-scheduler", "neuronetes"} {
		ps := simulate(t, s, nodes, pools, replicas)
		if os.Getenv("SCORING_SIM_DUMP") != "" {
			count := map[string]int{}
			for _, p := range ps {
				count[p.Pool+"@"+p.Node]++
			}
			t.Logf("%s placements (pool@node: replicas): %v", s, count)
		}
		r, err := scoring.Measure(s, pools*replicas, nodes, ps)
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
	}
	var sb strings.Builder
	scoring.Write(&sb, reports[0], reports[1])
	t.Log("\n" + sb.String())
	fmt.Fprint(os.Stdout, sb.String())
	if ok, reasons := scoring.Verdict(reports[0], reports[1]); !ok {
		t.Errorf("verdict: FAIL: %v", reasons)
	}
}
