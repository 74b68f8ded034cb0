package scoring

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	blockKey = "cloud.provider.com/topology-block"
	rackKey  = "cloud.provider.com/topology-rack"
)

// at is a node's labels in block b, rack r (empty: unlabelled), host h.
func at(b, r, h string) map[string]string {
	l := map[string]string{}
	if b != "" {
		l[blockKey] = b
	}
	if r != "" {
		l[rackKey] = r
	}
	if h != "" {
		l[corev1.LabelHostname] = h
	}
	return l
}

// TestClosenessAndTopologyScore: the levels shared from the outermost, hierarchical, skipping
// levels neither node carries; the score's mean over peers; neutral without peers.
func TestClosenessAndTopologyScore(t *testing.T) {
	three := []string{blockKey, rackKey, corev1.LabelHostname}
	for _, tc := range []struct {
		name       string
		levels     []string
		node       map[string]string
		peers      []map[string]string
		wantShared int
		wantOf     int
		wantScore  int64
	}{
		{"same node", three, at("b1", "r1", "n1"), []map[string]string{at("b1", "r1", "n1")}, 3, 3, 100},
		{"same rack", three, at("b1", "r1", "n2"), []map[string]string{at("b1", "r1", "n1")}, 2, 3, 66},
		{"same block", three, at("b1", "r2", "n2"), []map[string]string{at("b1", "r1", "n1")}, 1, 3, 33},
		{"other block", three, at("b2", "r1", "n2"), []map[string]string{at("b1", "r1", "n1")}, 0, 3, 0},
		{"rack name reused in another block is not the same rack", three, at("b2", "r1", "n1"), []map[string]string{at("b1", "r1", "n1")}, 0, 3, 0},
		{"no block labels anywhere: rack is the outermost", three, at("", "r1", "n2"), []map[string]string{at("", "r1", "n1")}, 1, 2, 50},
		{"node without the rack label the peer has", three, at("b1", "", "n2"), []map[string]string{at("b1", "r1", "n1")}, 1, 3, 33},
		{"two peers: mean", three, at("b1", "r1", "n2"), []map[string]string{at("b1", "r1", "n1"), at("b2", "r3", "n3")}, 2, 3, 33},
		{"no peers: neutral", three, at("b1", "r1", "n2"), nil, 0, 0, TopologyNeutral},
		{"peer node carries no level: ignored, neutral", []string{blockKey, rackKey}, at("b1", "r1", "n2"), []map[string]string{at("", "", "n1")}, 0, 0, TopologyNeutral},
		{"default levels, GKE labels", DefaultTopologyLevels,
			map[string]string{"cloud.google.com/gce-topology-block": "B", "cloud.google.com/gce-topology-subblock": "S", corev1.LabelHostname: "x"},
			[]map[string]string{{"cloud.google.com/gce-topology-block": "B", "cloud.google.com/gce-topology-subblock": "S", "cloud.google.com/gce-topology-host": "H", corev1.LabelHostname: "y"}},
			2, 4, 50},
		{"default levels, EKS labels, other layer-3 node", DefaultTopologyLevels,
			map[string]string{"topology.k8s.aws/network-node-layer-1": "a", "topology.k8s.aws/network-node-layer-2": "b", "topology.k8s.aws/network-node-layer-3": "c", corev1.LabelHostname: "x"},
			[]map[string]string{{"topology.k8s.aws/network-node-layer-1": "a", "topology.k8s.aws/network-node-layer-2": "b", "topology.k8s.aws/network-node-layer-3": "d", corev1.LabelHostname: "y"}},
			2, 4, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.peers) > 0 {
				s, of := Closeness(tc.levels, tc.node, tc.peers[0])
				if s != tc.wantShared || of != tc.wantOf {
					t.Errorf("Closeness = %d of %d, want %d of %d", s, of, tc.wantShared, tc.wantOf)
				}
			}
			if got := TopologyScore(tc.levels, tc.node, tc.peers); got != tc.wantScore {
				t.Errorf("TopologyScore = %d, want %d", got, tc.wantScore)
			}
		})
	}
}

// TestParseTopologyArgs: defaults when absent; an unknown field, an empty list, an empty,
// malformed or repeated key is refused naming it.
func TestParseTopologyArgs(t *testing.T) {
	for _, tc := range []struct {
		name, raw  string
		wantLevels []string
		wantErr    string
	}{
		{"absent", ``, DefaultTopologyLevels, ""},
		{"null", `null`, DefaultTopologyLevels, ""},
		{"empty object", `{}`, DefaultTopologyLevels, ""},
		{"levels", `{"levels":["b","r","kubernetes.io/hostname"]}`, []string{"b", "r", "kubernetes.io/hostname"}, ""},
		{"unknown field", `{"level":["b"]}`, nil, `NeuroNetesNetworkTopology args: json: unknown field "level"`},
		{"empty list", `{"levels":[]}`, nil, `NeuroNetesNetworkTopology args levels: empty list`},
		{"empty key", `{"levels":["b",""]}`, nil, `NeuroNetesNetworkTopology args levels[1]: empty label key`},
		{"malformed key", `{"levels":["rack name"]}`, nil, `NeuroNetesNetworkTopology args levels[0]: "rack name" is not a label key`},
		{"repeated key", `{"levels":["b","r","b"]}`, nil, `NeuroNetesNetworkTopology args levels[2]: "b" is listed twice`},
		{"wrong type", `{"levels":"b"}`, nil, `NeuroNetesNetworkTopology args: json: cannot unmarshal string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseTopologyArgs([]byte(tc.raw))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr == "" && strings.Join(a.Levels, ",") != strings.Join(tc.wantLevels, ","):
				t.Fatalf("levels %v, want %v", a.Levels, tc.wantLevels)
			}
		})
	}
}

// TestNetworkTopologyPlugin: the CustomSchedulerPlugin admits every node, scores by the peers
// Peers returns for the pod, and is neutral without a Peers source; GangName reads the pod's group.
func TestNetworkTopologyPlugin(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: corev1.PodSpec{SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To("g0")}}}
	levels := []string{blockKey, rackKey}
	peers := func(p *corev1.Pod) []map[string]string {
		if g, ok := GangName(p); ok && g == "g0" {
			return []map[string]string{at("b1", "r1", "")}
		}
		return nil
	}
	near := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: at("b1", "r1", "n2")}}
	far := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: at("b2", "r9", "n3")}}
	ctx := context.Background()
	p := NetworkTopology{Levels: levels, Peers: peers}
	if p.Name() != NetworkTopologyName || !p.Filter(ctx, pod, far) {
		t.Fatalf("name %q or filter refused", p.Name())
	}
	if n, f := p.Score(ctx, pod, near), p.Score(ctx, pod, far); n != MaxScore || f != MinScore {
		t.Errorf("scores near %d far %d, want %d %d", n, f, MaxScore, MinScore)
	}
	single := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}}
	if _, ok := GangName(single); ok {
		t.Errorf("GangName of a pod without a group: ok")
	}
	if s := p.Score(ctx, single, near); s != TopologyNeutral {
		t.Errorf("single replica score %d, want neutral %d", s, TopologyNeutral)
	}
	if s := (NetworkTopology{Levels: levels}).Score(ctx, pod, near); s != TopologyNeutral {
		t.Errorf("without Peers: %d, want neutral", s)
	}
}

// TestOutsideGang: the pod's own gang (same group, same namespace) is left out; other gangs,
// other namespaces and single pods stay; a single pod keeps everything.
func TestOutsideGang(t *testing.T) {
	pod := func(ns, name, group string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if group != "" {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		return p
	}
	pods := []*corev1.Pod{pod("a", "g0-1", "g0"), pod("a", "g1-0", "g1"), pod("b", "g0-0", "g0"), pod("a", "s", "")}
	names := func(ps []*corev1.Pod) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(OutsideGang(pod("a", "g0-0", "g0"), pods)); got != "a/g1-0,b/g0-0,a/s" {
		t.Errorf("gang pod: %s", got)
	}
	if got := names(OutsideGang(pod("a", "x", ""), pods)); got != names(pods) {
		t.Errorf("single pod: %s", got)
	}
}
