package scale

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// LabelRun is put on every object the benchmark creates; its value is the run id.
const LabelRun = "neuronetes.io/scale-bench"

// LabelTest is added to the objects of runs whose id starts with TestRunPrefix, so that a benchmark
// starting while a test runs leaves the test's objects to the test's own cleanup.
const LabelTest = "neuronetes.io/scale-bench-test"

// TestRunPrefix starts the run ids of tests.
const TestRunPrefix = "test-"

// StaleSelector selects the objects of every benchmark run except tests'.
const StaleSelector = LabelRun + ",!" + LabelTest

// runLabels returns the labels of a run's objects plus extra key/value pairs.
func runLabels(runID string, extra ...string) map[string]string {
	l := map[string]string{LabelRun: runID}
	if strings.HasPrefix(runID, TestRunPrefix) {
		l[LabelTest] = "true"
	}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

// Kind is a kind of pod the benchmark creates, by what its claim requests.
type Kind string

// The four pod kinds, in the order their phases run: the largest requests first so that every pod
// that should fit does fit whatever placements the scheduler chooses.
const (
	KindPair  Kind = "nvlink-pair" // two whole GPUs sharing an NVLink domain (matchAttribute)
	KindWhole Kind = "whole-gpu"   // one whole GPU
	KindMIG3g Kind = "mig-3g"      // one 3g.40gb MIG device (a whole GPU in the baseline)
	KindMIG1g Kind = "mig-1g"      // one 1g.10gb MIG device (a whole GPU in the baseline)
)

// Kinds lists every kind in phase order.
var Kinds = []Kind{KindPair, KindWhole, KindMIG3g, KindMIG1g}

// DeviceClass names the driver publishes (see controller/agentpool and deploy/deviceclasses).
const (
	ClassGPU   = model.DriverName
	ClassMIG1g = "mig-1g.10gb.neuronetes.io"
	ClassMIG3g = "mig-3g.40gb.neuronetes.io"
)

// migProfile maps MIG kinds to the H100 profile they request.
var migProfile = map[Kind]string{KindMIG1g: "1g.10gb", KindMIG3g: "3g.40gb"}

// UsedProfiles returns the MIG profiles the benchmark's claims select: what the "mig-selected"
// layout publishes.
func UsedProfiles() []string { return []string{migProfile[KindMIG1g], migProfile[KindMIG3g]} }

// IsMIG reports whether pods of kind k request a MIG device when the layout publishes MIG.
func (k Kind) IsMIG() bool { _, ok := migProfile[k]; return ok }

// GPUs returns how many whole GPUs one pod of kind k takes when MIG kinds are mapped to whole GPUs.
func (k Kind) GPUs() int {
	if k == KindPair {
		return 2
	}
	return 1
}

// Mix is how many pods of each kind a run creates.
type Mix map[Kind]int

// DefaultMix splits total pods 10% pairs, 20% whole GPUs, 20% MIG 3g and 50% MIG 1g (at least one
// of each).
func DefaultMix(total int) Mix {
	m := Mix{KindPair: max(total/10, 1), KindWhole: max(total/5, 1), KindMIG3g: max(total/5, 1)}
	m[KindMIG1g] = max(total-m[KindPair]-m[KindWhole]-m[KindMIG3g], 1)
	return m
}

// Total returns the number of pods.
func (m Mix) Total() int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// BaselineGPUs returns the GPUs the baseline run needs (MIG kinds mapped to whole GPUs). The MIG
// runs need no more, so a node count that fits the baseline fits every layout.
func (m Mix) BaselineGPUs() int {
	n := 0
	for k, c := range m {
		n += c * k.GPUs()
	}
	return n
}

// CheckFits returns an error naming the shortfall when nodes*gpusPerNode cannot hold the mix.
func (m Mix) CheckFits(nodes, gpusPerNode int) error {
	if need, have := m.BaselineGPUs(), nodes*gpusPerNode; need > have {
		return fmt.Errorf("pods: %d pods need %d GPUs in the whole-GPU baseline, %d nodes have %d: raise -nodes to %d or lower -pods",
			m.Total(), need, nodes, have, (need+gpusPerNode-1)/gpusPerNode)
	}
	return nil
}

// ClaimSpec returns the claim of one pod of kind k. With mig false, MIG kinds request one whole GPU.
func ClaimSpec(k Kind, mig bool) resourceapi.ResourceClaimSpec {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: ClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	var constraints []resourceapi.DeviceConstraint
	switch {
	case k == KindPair:
		req.Count = 2
		constraints = []resourceapi.DeviceConstraint{{
			Requests:       []string{"gpu"},
			MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(model.DriverName + "/" + slices.AttrNVLinkDomain)),
		}}
	case k == KindMIG1g && mig:
		req.DeviceClassName = ClassMIG1g
	case k == KindMIG3g && mig:
		req.DeviceClassName = ClassMIG3g
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests:    []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}},
		Constraints: constraints,
	}}
}

// Claim returns the pre-created claim of one pod. classes maps the standard class names to the
// names to use (see EnsureDeviceClasses); names it lacks are used as they are.
func Claim(name, runID string, k Kind, mig bool, classes map[string]string) *resourceapi.ResourceClaim {
	spec := ClaimSpec(k, mig)
	for i := range spec.Devices.Requests {
		if r := spec.Devices.Requests[i].Exactly; r != nil && classes[r.DeviceClassName] != "" {
			r.DeviceClassName = classes[r.DeviceClassName]
		}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: runLabels(runID, "kind", string(k))},
		Spec:       spec,
	}
}

// Pod returns a pod that uses the claim of the same name, may only land on this run's nodes and
// tolerates the kwok taint (kwok marks it Running; nothing is executed).
func Pod(name, runID string, k Kind, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: runLabels(runID, "kind", string(k))},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{LabelRun: runID},
			Tolerations: []corev1.Toleration{
				{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists},
			},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}},
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
}

// FallbackDeviceClasses returns the DeviceClasses the benchmark needs, for when neither the cluster
// nor deploy/deviceclasses has them. Their selectors match what the driver publishes.
func FallbackDeviceClasses() []*resourceapi.DeviceClass {
	attr := fmt.Sprintf("device.attributes[%q]", model.DriverName)
	sel := func(expr string) []resourceapi.DeviceSelector {
		return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
	}
	mk := func(name, expr string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{Selectors: sel(expr)}}
	}
	base := fmt.Sprintf("device.driver == %q && ", model.DriverName)
	return []*resourceapi.DeviceClass{
		mk(ClassGPU, base+attr+".type == 'gpu'"),
		mk(ClassMIG1g, base+attr+".type == 'mig' && "+attr+".profile == '1g.10gb'"),
		mk(ClassMIG3g, base+attr+".type == 'mig' && "+attr+".profile == '3g.40gb'"),
	}
}
