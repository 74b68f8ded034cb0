package scale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/neuronetes/neuronetes/driver/model"
)

// kwokAnnotation makes kwok manage a node (the local cluster's kwok selects on it).
const kwokAnnotation = "kwok.x-k8s.io/node"

// NodePrefix is the name prefix of the benchmark's nodes; it keeps them apart from the cluster's
// shared kwok-node-N nodes. Tests use their own prefix.
const NodePrefix = "nn-scale-"

// parallel runs fn(i) for i in [0,n) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for w := 0; w < min(workers, max(n, 1)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// CreateNodes creates nodes [from, to) for run runID (kept when they already exist) and waits until
// kwok reports every one Ready.
func CreateNodes(ctx context.Context, cs kubernetes.Interface, runID, prefix string, from, to int, timeout time.Duration) ([]*corev1.Node, error) {
	nodes := make([]*corev1.Node, to-from)
	err := parallel(ctx, to-from, 32, func(ctx context.Context, j int) error {
		name := fmt.Sprintf("%s%d", prefix, from+j)
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Labels:      runLabels(runID, "type", "kwok", "kubernetes.io/hostname", name, "kubernetes.io/os", "linux", "kubernetes.io/arch", "amd64"),
				Annotations: map[string]string{kwokAnnotation: "fake"},
			},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: kwokAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("224"), corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("250")},
				Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("224"), corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("250")},
			},
		}
		got, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		nodes[j] = got
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelRun + "=" + runID})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		ready := 0
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= to, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %d kwok nodes to be Ready (is kwok running?): %w", to, err)
	}
	return nodes, nil
}

// PublishSlices creates the slices of every node and returns how many objects, devices and counter
// sets were created for one node (all nodes have the same layout).
func PublishSlices(ctx context.Context, cs kubernetes.Interface, nodes []*corev1.Node, gpuProfile string, layout Layout, runID string) (perNode [3]int, err error) {
	var mu sync.Mutex
	err = parallel(ctx, len(nodes), 16, func(ctx context.Context, i int) error {
		gpus, err := Inventory(ctx, gpuProfile, nodes[i].Name)
		if err != nil {
			return err
		}
		objs, err := NodeSlices(nodes[i], gpus, layout, runID)
		if err != nil {
			return err
		}
		if i == 0 {
			d, c := DeviceCount(objs)
			mu.Lock()
			perNode = [3]int{len(objs), d, c}
			mu.Unlock()
		}
		for _, o := range objs {
			if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, o, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("slice %s: %w", o.Name, err)
			}
		}
		return nil
	})
	return perNode, err
}

// DeleteSlices deletes this run's slices and waits until none is left.
func DeleteSlices(ctx context.Context, cs kubernetes.Interface, selector string) error {
	api := cs.ResourceV1().ResourceSlices()
	if err := api.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		return fmt.Errorf("deleting slices %s: %w", selector, err)
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := api.List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1})
		return err == nil && len(l.Items) == 0, nil
	})
}

// DeleteNamespace force-deletes the pods of ns one by one (a DeleteCollection of a thousand pods
// outlives the apiserver's request timeout on this machine), deletes the namespace and waits
// (bounded) until it is gone, which includes the claims, whose finalizers the controller-manager
// releases once their pods are gone.
func DeleteNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("listing pods of %s: %w", ns, err)
	}
	if pods != nil {
		err = parallel(ctx, len(pods.Items), 16, func(ctx context.Context, i int) error {
			err := cs.CoreV1().Pods(ns).Delete(ctx, pods.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting pod %s/%s: %w", ns, pods.Items[i].Name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s still there: %w", ns, err)
	}
	return nil
}

// Cleanup removes everything labelled with LabelRun (with runID empty: every earlier benchmark run,
// StaleSelector, but not a test running now): namespaces (with
// their pods and claims), slices, nodes and the DeviceClasses the benchmark added. It keeps going
// after errors and returns them all.
func Cleanup(ctx context.Context, cs kubernetes.Interface, runID string) error {
	logger := klog.FromContext(ctx)
	sel := StaleSelector
	if runID != "" {
		sel = LabelRun + "=" + runID
	}
	var errs []error
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing namespaces: %w", err))
	} else {
		for _, ns := range nss.Items {
			logger.V(1).Info("Deleting namespace", "namespace", ns.Name)
			errs = append(errs, DeleteNamespace(ctx, cs, ns.Name))
		}
	}
	errs = append(errs, DeleteSlices(ctx, cs, sel))
	if err := cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		errs = append(errs, fmt.Errorf("deleting nodes %s: %w", sel, err))
	}
	if err := cs.ResourceV1().DeviceClasses().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		errs = append(errs, fmt.Errorf("deleting device classes %s: %w", sel, err))
	}
	return errors.Join(errs...)
}

// FallbackPrefix starts the names of the benchmark's own classes, used when the driver's class of
// the same purpose is broken (see CheckDeviceClass).
const FallbackPrefix = "scale-bench."

// EnsureDeviceClasses makes sure the classes the claims use exist and work on the driver's devices
// (CheckDeviceClass). In order of preference: the class already in the cluster, the class from the
// driver's manifests (fromFiles, parsed by the caller; created), the fallback of the same name
// (created when neither has it). When the cluster's or the files' class is broken, the benchmark
// creates its own class FallbackPrefix+name with the fallback selector and reports why in
// warnings. Classes it creates get the run label so Cleanup deletes them; classes that existed
// before are never touched. It returns, for each needed class, the class name claims must use and
// where it came from ("cluster", "deploy", "fallback", "fallback: <name> broken").
func EnsureDeviceClasses(ctx context.Context, cs kubernetes.Interface, fromFiles []*resourceapi.DeviceClass, devices []resourceapi.Device, runID string) (use, src map[string]string, warnings []string, err error) {
	use, src = map[string]string{}, map[string]string{}
	files := map[string]*resourceapi.DeviceClass{}
	for _, dc := range fromFiles {
		files[dc.Name] = dc
	}
	api := cs.ResourceV1().DeviceClasses()
	create := func(dc *resourceapi.DeviceClass) error {
		dc = dc.DeepCopy()
		if dc.Labels == nil {
			dc.Labels = map[string]string{}
		}
		for k, v := range runLabels(runID) {
			dc.Labels[k] = v
		}
		dc.ResourceVersion = ""
		if _, err := api.Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("device class %s: %w", dc.Name, err)
		}
		return nil
	}
	for _, fb := range FallbackDeviceClasses() {
		name := fb.Name
		var broken error
		existing, err := api.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			if broken = CheckDeviceClass(ctx, existing, model.DriverName, devices); broken == nil {
				use[name], src[name] = name, "cluster"
				continue
			}
			broken = fmt.Errorf("the cluster's %w", broken)
		case !apierrors.IsNotFound(err):
			return nil, nil, warnings, fmt.Errorf("device class %s: %w", name, err)
		case files[name] != nil:
			if broken = CheckDeviceClass(ctx, files[name], model.DriverName, devices); broken == nil {
				if err := create(files[name]); err != nil {
					return nil, nil, warnings, err
				}
				use[name], src[name] = name, "deploy"
				continue
			}
			broken = fmt.Errorf("deploy/deviceclasses: %w", broken)
		default:
			if err := create(fb); err != nil {
				return nil, nil, warnings, err
			}
			use[name], src[name] = name, "fallback"
			continue
		}
		own := fb.DeepCopy()
		own.Name = FallbackPrefix + name
		if err := create(own); err != nil {
			return nil, nil, warnings, err
		}
		use[name], src[name] = own.Name, "fallback: "+name+" broken"
		warnings = append(warnings, fmt.Sprintf("%v; using %s with the benchmark's selector", broken, own.Name))
	}
	return use, src, warnings, nil
}
