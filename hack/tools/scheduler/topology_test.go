package main

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/scheduler/scoring"
)

// snapshotHandle is a framework handle that serves one snapshot (the rest is unused here).
type snapshotHandle struct {
	fwk.Handle
	snap fwk.SharedLister
}

func (h snapshotHandle) SnapshotSharedLister() fwk.SharedLister { return h.snap }

// TestNetworkTopologyPeers: through the plugin's factory and the scheduler's own snapshot (pod
// group states built by kube-scheduler's cache), a gang pod's peers are the bound pods of its
// PodGroup, not itself, not another group's, not unbound ones; the node in the peers' rack scores
// above the one in their block and the one elsewhere, and a single pod scores 50 everywhere.
func TestNetworkTopologyPeers(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	node := func(name, block, rack string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"b": block, "r": rack, v1.LabelHostname: name}}}
	}
	pod := func(name, group, nodeName string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
			Spec: v1.PodSpec{NodeName: nodeName}}
		if group != "" {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		return p
	}
	nodes := []*v1.Node{node("n1", "b1", "r1"), node("n2", "b1", "r1"), node("n3", "b1", "r2"), node("n4", "b2", "r3")}
	self := pod("g-2", "g", "")
	pods := []*v1.Pod{pod("g-0", "g", "n1"), pod("g-1", "g", ""), pod("h-0", "h", "n4"), pod("s", "", "n4")}
	pgs := []*schedv1beta1.PodGroup{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}, {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}}
	snap := cache.NewTestSnapshotWithPodGroups(pods, nodes, pgs)
	h := snapshotHandle{snap: snap}

	peers := gangPeers(h)(self)
	if len(peers) != 1 || peers[0][v1.LabelHostname] != "n1" {
		t.Fatalf("peers %v, want the node of g-0 only", peers)
	}
	pl, err := newNetworkTopology(context.Background(), nil, h)
	if err != nil {
		t.Fatal(err)
	}
	scores := func(p *v1.Pod) []int64 {
		var out []int64
		for _, n := range nodes[1:] {
			ni, err := snap.NodeInfos().Get(n.Name)
			if err != nil {
				t.Fatal(err)
			}
			s, st := pl.(fwk.ScorePlugin).Score(context.Background(), nil, p, ni)
			if !st.IsSuccess() {
				t.Fatal(st)
			}
			out = append(out, s)
		}
		return out
	}
	// Default levels: only kubernetes.io/hostname of these is among them, so n2..n4 all differ from
	// n1 at the one level they carry.
	if got := scores(self); !slices.Equal(got, []int64{0, 0, 0}) {
		t.Errorf("default levels: scores %v", got)
	}
	pl, err = newNetworkTopology(context.Background(), &runtime.Unknown{Raw: []byte(`{"levels":["b","r","kubernetes.io/hostname"]}`), ContentType: runtime.ContentTypeJSON}, h)
	if err != nil {
		t.Fatal(err)
	}
	if got := scores(self); !slices.Equal(got, []int64{66, 33, 0}) {
		t.Errorf("block, rack, host: scores %v, want [66 33 0] for the peers' rack, block, elsewhere", got)
	}
	if got := scores(pod("x", "", "")); !slices.Equal(got, []int64{scoring.TopologyNeutral, scoring.TopologyNeutral, scoring.TopologyNeutral}) {
		t.Errorf("single pod: scores %v, want neutral", got)
	}
}
