package scale

import (
	"context"
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// VerifyResult summarizes the allocation checks of one run.
type VerifyResult struct {
	Pods, Unbound       int
	Claims, Unallocated int
	CheckedNodes        int // nodes whose counters were checked against every claim on them
	CheckedClaims       int // claims on those nodes
	Pairs               int // NVLink pair claims checked on those nodes
	Problems            []string
}

// OK reports whether every pod is bound and no check found a problem.
func (v VerifyResult) OK() bool {
	return v.Unbound == 0 && v.Unallocated == 0 && len(v.Problems) == 0
}

// Verify checks a run's namespace: every pod is bound and its claim allocated on the pod's node, no
// device is allocated twice, pair claims got two distinct devices; and, for up to sampleNodes nodes,
// against the slices the scheduler saw: counters are never oversubscribed, pairs are two whole GPUs
// of one NVLink domain, and each claim got the device type (and MIG profile) it asked for.
//
// Published counters are pruned to the ones that can refuse an allocation (model.EssentialCounters),
// so the sampled nodes are also checked against the driver's full device model with layout's
// options (CheckModel): that is what the driver itself checks before it creates MIG instances.
func Verify(ctx context.Context, cs kubernetes.Interface, ns string, layout Layout, gpuProfile string, sampleNodes int) (VerifyResult, error) {
	mig := layout.MIG
	var v VerifyResult
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, fmt.Errorf("listing pods of %s: %w", ns, err)
	}
	claims, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, fmt.Errorf("listing claims of %s: %w", ns, err)
	}
	podNode := map[string]string{}
	for _, p := range pods.Items {
		v.Pods++
		if p.Spec.NodeName == "" {
			v.Unbound++
		}
		podNode[p.Name] = p.Spec.NodeName
	}
	byNode := map[string][]resourceapi.ResourceClaim{}
	v.Problems = append(v.Problems, checkClaims(claims.Items, podNode, byNode, &v)...)

	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	if len(nodes) > sampleNodes {
		nodes = nodes[:sampleNodes]
	}
	for _, node := range nodes {
		sl, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return v, fmt.Errorf("listing slices of node %s: %w", node, err)
		}
		v.CheckedNodes++
		v.CheckedClaims += len(byNode[node])
		for _, c := range byNode[node] {
			if c.Labels["kind"] == string(KindPair) {
				v.Pairs++
			}
		}
		v.Problems = append(v.Problems, CheckNode(node, sl.Items, byNode[node], mig)...)
		gpus, err := Inventory(ctx, gpuProfile, node)
		if err != nil {
			return v, err
		}
		v.Problems = append(v.Problems, CheckModel(node, gpus, layout.Options, byNode[node])...)
	}
	return v, nil
}

// checkClaims does the checks that need no slices and groups allocated claims by node.
func checkClaims(claims []resourceapi.ResourceClaim, podNode map[string]string, byNode map[string][]resourceapi.ResourceClaim, v *VerifyResult) []string {
	var problems []string
	used := map[string]string{} // pool/device -> claim
	for _, c := range claims {
		v.Claims++
		if c.Status.Allocation == nil {
			v.Unallocated++
			continue
		}
		want := 1
		if c.Labels["kind"] == string(KindPair) {
			want = 2
		}
		results := c.Status.Allocation.Devices.Results
		if len(results) != want {
			problems = append(problems, fmt.Sprintf("claim %s: %d devices allocated, want %d", c.Name, len(results), want))
		}
		node := podNode[c.Name]
		for _, r := range results {
			if r.Pool != node {
				problems = append(problems, fmt.Sprintf("claim %s: device %s/%s is not on the pod's node %q", c.Name, r.Pool, r.Device, node))
			}
			key := r.Pool + "/" + r.Device
			if other, dup := used[key]; dup {
				problems = append(problems, fmt.Sprintf("device %s allocated to claims %s and %s", key, other, c.Name))
			}
			used[key] = c.Name
		}
		if node != "" {
			byNode[node] = append(byNode[node], c)
		}
	}
	return problems
}

// CheckNode checks every claim allocated on one node against that node's slices: the sum of the
// counters consumed by the allocated devices stays within every counter set's capacity, pairs are
// two whole GPUs with the same NVLink domain, and devices have the requested type and profile.
func CheckNode(node string, sl []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim, mig bool) []string {
	devices := map[string]resourceapi.Device{}
	capacity := map[string]map[string]int64{}
	for _, s := range sl {
		if s.Spec.Driver != model.DriverName && s.Spec.Driver != model.CompatDriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			devices[d.Name] = d
		}
		for _, cs := range s.Spec.SharedCounters {
			capacity[cs.Name] = map[string]int64{}
			for k, c := range cs.Counters {
				capacity[cs.Name][k] = c.Value.Value()
			}
		}
	}
	var problems []string
	used := map[string]map[string]int64{}
	for _, c := range claims {
		kind := Kind(c.Labels["kind"])
		var domains []string
		for _, r := range c.Status.Allocation.Devices.Results {
			d, ok := devices[r.Device]
			if !ok {
				problems = append(problems, fmt.Sprintf("node %s claim %s: device %s not in the node's slices", node, c.Name, r.Device))
				continue
			}
			for _, cc := range d.ConsumesCounters {
				if used[cc.CounterSet] == nil {
					used[cc.CounterSet] = map[string]int64{}
				}
				for k, v := range cc.Counters {
					used[cc.CounterSet][k] += v.Value.Value()
				}
			}
			typ := attrString(d, slices.AttrType)
			wantType, wantProfile := slices.TypeGPU, ""
			if mig && kind.IsMIG() {
				wantType, wantProfile = slices.TypeMIG, migProfile[kind]
			}
			if typ != wantType || (wantProfile != "" && attrString(d, slices.AttrProfile) != wantProfile) {
				problems = append(problems, fmt.Sprintf("node %s claim %s (%s): device %s is type %q profile %q", node, c.Name, kind, d.Name, typ, attrString(d, slices.AttrProfile)))
			}
			domains = append(domains, attrString(d, slices.AttrNVLinkDomain))
		}
		if kind == KindPair {
			res := c.Status.Allocation.Devices.Results
			if len(res) != 2 || res[0].Device == res[1].Device || len(domains) != 2 || domains[0] == "" || domains[0] != domains[1] {
				problems = append(problems, fmt.Sprintf("node %s claim %s: not an NVLink pair: %v domains %v", node, c.Name, res, domains))
			}
		}
	}
	for set, counters := range used {
		for k, n := range counters {
			if capv, ok := capacity[set][k]; !ok || n > capv {
				problems = append(problems, fmt.Sprintf("node %s counter set %s: counter %s used %d, capacity %d", node, set, k, n, capacity[set][k]))
			}
		}
	}
	return problems
}

// CheckModel checks the claims allocated on one node against the driver's full device model: every
// device resolves (slices.Resolve, as at prepare time), a whole GPU is not shared with anything, and
// the MIG devices of each GPU can all be created together, checked one after the other by the
// driver's own model.CheckPlacement (placements, overlaps, instance limits and every counter of
// the model, including those the slices do not publish).
func CheckModel(node string, gpus []model.GPUInfo, opts slices.Options, claims []resourceapi.ResourceClaim) []string {
	var problems []string
	type use struct {
		claim string
		ref   slices.Ref
	}
	perGPU := map[int][]use{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			ref, err := slices.Resolve(gpus, opts, r.Device)
			if err != nil {
				problems = append(problems, fmt.Sprintf("node %s claim %s: %v", node, c.Name, err))
				continue
			}
			perGPU[ref.GPU.Index] = append(perGPU[ref.GPU.Index], use{claim: c.Name, ref: ref})
		}
	}
	for idx, uses := range perGPU {
		var existing []model.MIGInstance
		for _, u := range uses {
			if u.ref.Kind == slices.KindGPU {
				if len(uses) > 1 {
					problems = append(problems, fmt.Sprintf("node %s GPU %d: whole GPU (claim %s) shared with %d other allocations", node, idx, u.claim, len(uses)-1))
				}
				continue
			}
			g := u.ref.GPU
			if err := g.CheckPlacement(existing, u.ref.Profile.ID, u.ref.Placement); err != nil {
				problems = append(problems, fmt.Sprintf("node %s claim %s: %v", node, u.claim, err))
				continue
			}
			existing = append(existing, model.MIGInstance{ProfileID: u.ref.Profile.ID, GIID: len(existing), Placement: u.ref.Placement})
		}
	}
	return problems
}

func attrString(d resourceapi.Device, name string) string {
	a, ok := d.Attributes[resourceapi.QualifiedName(name)]
	if !ok {
		a, ok = d.Attributes[resourceapi.QualifiedName(model.DriverName+"/"+name)]
	}
	if !ok || a.StringValue == nil {
		return ""
	}
	return *a.StringValue
}
