// Command scale-bench runs the scheduler scale benchmark (issue 9) on the local cluster: kwok GPU
// nodes carrying the DRA driver's own ResourceSlices, pods with pre-created claims of four kinds,
// and the real kube-scheduler measured by its metrics. It prints one table per layout and node
// count, the ratios against the whole-GPU baseline and the targets, and deletes everything it
// created, also when interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/scale"
)

type options struct {
	root         string
	nodes        []int
	pods         int
	layouts      []string
	gpuProfile   string
	phaseTimeout time.Duration
	verifyNodes  int
	strict       bool
	// gangs runs the gang phase (scale.RunGangs) instead of the layouts.
	gangs          bool
	gangSingles    int
	gangOvercommit float64
	gangSettle     time.Duration
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("scale-bench", flag.ContinueOnError)
	var o options
	var nodes, layouts string
	fs.StringVar(&o.root, "root", ".", "repository root (the local cluster's state is in ROOT/.local)")
	fs.StringVar(&nodes, "nodes", "150", "comma-separated kwok node counts, run in increasing order (e.g. 500,1000)")
	fs.IntVar(&o.pods, "pods", 1000, "pods per run (10% NVLink pairs, 20% whole GPU, 20% MIG 3g, 50% MIG 1g)")
	fs.StringVar(&layouts, "layouts", "whole,mig-selected,mig-demand,nvidia-dynamic", "layouts to run; the first is the baseline: whole, mig-selected, mig-demand, mig-mixed, mig-all, nvidia-dynamic (NVIDIA's DRA driver's slices)")
	fs.StringVar(&o.gpuProfile, "gpu-profile", "dgxh100", "the driver's NVML mock profile of every node")
	fs.DurationVar(&o.phaseTimeout, "phase-timeout", 5*time.Minute, "longest wait for one kind's pods to be bound")
	fs.IntVar(&o.verifyNodes, "verify-nodes", 50, "nodes whose counters are checked against every claim on them")
	fs.BoolVar(&o.strict, "strict", true, "exit 1 when the target (the mig-demand layout's MIG-claim algorithm p99 ratio) is missed; verification failures always do")
	fs.BoolVar(&o.gangs, "gangs", false, "run the gang benchmark (issue 33) instead of the layouts: gangs wanting -gang-overcommit x the GPUs, judged for partial placements and stranded GPUs")
	fs.IntVar(&o.gangSingles, "gang-singles", 100, "with -gangs: single pods placed first as the latency baseline")
	fs.Float64Var(&o.gangOvercommit, "gang-overcommit", 1.25, "with -gangs: the gangs' GPUs over the cluster's (above 1: contention)")
	fs.DurationVar(&o.gangSettle, "gang-settle", 20*time.Second, "with -gangs: no new binding for this long ends the gang phase")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, s := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return o, fmt.Errorf("-nodes: %q is not a positive count", s)
		}
		o.nodes = append(o.nodes, n)
	}
	o.layouts = strings.Split(layouts, ",")
	if o.layouts[0] != scale.LayoutWhole {
		return o, fmt.Errorf("-layouts: the first layout is the baseline and must be %q, got %q", scale.LayoutWhole, o.layouts[0])
	}
	for _, l := range o.layouts {
		if _, err := scale.LayoutByName(l); err != nil {
			return o, fmt.Errorf("-layouts: %w", err)
		}
	}
	for _, n := range o.nodes {
		if o.gangs {
			break
		}
		if err := scale.DefaultMix(o.pods).CheckFits(n, 8); err != nil {
			return o, fmt.Errorf("-nodes %d: %w", n, err)
		}
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.gangs {
		os.Exit(mainGangs(ctx, o))
	}
	code, verdicts, err := run(ctx, o, os.Stdout, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale-bench:", err)
		if code == 0 {
			code = 1
		}
	}
	// The verdicts come last, after the cleanup's output.
	judged, ok := false, true
	for _, v := range verdicts {
		fmt.Println(v)
		judged = judged || v.Judged
		ok = ok && (!v.Judged || v.OK)
	}
	switch {
	case err != nil:
		fmt.Println("scale bench: VERDICT: FAIL: the run did not complete")
	case !judged:
		fmt.Println("scale bench: VERDICT: not judged: add mig-demand to -layouts")
	case !ok && o.strict && code == 0:
		code = 1
	}
	os.Exit(code)
}

// run brings the cluster up, prepares the device classes and the scheduler's metrics, and runs
// the layouts at each node count, or, when gangLines is not nil, the gang phase, whose verdict
// lines it appends there.
func run(ctx context.Context, o options, out io.Writer, gangLines *[]string) (code int, verdicts []scale.Verdict, err error) {
	logger := klog.FromContext(ctx)
	root, err := filepath.Abs(o.root)
	if err != nil {
		return 1, verdicts, fmt.Errorf("-root: %w", err)
	}
	p := cluster.NewPaths(root)
	// kwok-node-0 is the cluster's shared kwok node; Up creates it (and starts kwok) when missing.
	// Remember whether it existed so that the benchmark removes only what it added.
	kwok0Existed := false
	if c, err := cluster.Attach(root); err == nil {
		if cs, err := c.Clientset(); err == nil {
			_, err := cs.CoreV1().Nodes().Get(ctx, cluster.KwokNodeName(0), metav1.GetOptions{})
			kwok0Existed = err == nil
		}
	}
	c, err := cluster.Up(ctx, cluster.Options{Root: root, KwokNodes: 1, Logf: func(f string, a ...any) { logger.Info(fmt.Sprintf(f, a...)) }})
	if err != nil {
		return 1, verdicts, fmt.Errorf("local cluster: %w", err)
	}
	cfg, err := c.RestConfig()
	if err != nil {
		return 1, verdicts, err
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 1, verdicts, fmt.Errorf("client: %w", err)
	}
	runID := fmt.Sprintf("r%d", time.Now().Unix())
	// Leftovers of an earlier, killed run go first; this run's objects go last, on any exit.
	if err := scale.Cleanup(ctx, cs, ""); err != nil {
		return 1, verdicts, fmt.Errorf("cleaning up earlier runs: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		if err := scale.Cleanup(cctx, cs, runID); err != nil {
			fmt.Fprintln(os.Stderr, "scale-bench: cleanup:", err)
		}
		if !kwok0Existed {
			err := cs.CoreV1().Nodes().Delete(cctx, cluster.KwokNodeName(0), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				fmt.Fprintln(os.Stderr, "scale-bench: cleanup:", err)
			}
		}
		fmt.Fprintf(out, "\nscale bench: cleaned up run %s in %s\n", runID, time.Since(start).Round(time.Second))
	}()

	fileClasses, err := readDeviceClasses(filepath.Join(root, "deploy", "deviceclasses"))
	if err != nil {
		return 1, verdicts, err
	}
	// Every class is checked against every device kind the driver publishes (the naive layout has
	// them all) before it is used.
	gpus, err := scale.Inventory(ctx, o.gpuProfile, "class-check")
	if err != nil {
		return 1, verdicts, err
	}
	devices, err := scale.LayoutDevices(gpus, scale.LayoutMIGAll, runID)
	if err != nil {
		return 1, verdicts, err
	}
	classes, src, warnings, err := scale.EnsureDeviceClasses(ctx, cs, fileClasses, devices, runID)
	if err != nil {
		return 1, verdicts, err
	}
	for _, w := range warnings {
		fmt.Fprintln(out, "scale bench: WARNING:", w)
	}
	if slices.Contains(o.layouts, scale.LayoutNVIDIA) {
		if err := ensureNVIDIAClasses(ctx, cs, root, gpus, runID); err != nil {
			return 1, verdicts, err
		}
	}
	scraper, err := scale.NewScraper(fmt.Sprintf("https://127.0.0.1:%d/metrics", cluster.SchedulerPort),
		filepath.Join(p.PKI, "admin.crt"), filepath.Join(p.PKI, "admin.key"))
	if err != nil {
		return 1, verdicts, err
	}
	pids := map[string]int{}
	for _, name := range []string{"kube-apiserver", "kube-scheduler"} {
		pid, err := scale.PidFromFile(filepath.Join(p.Run, name+".pid"))
		if err != nil {
			return 1, verdicts, err
		}
		pids[name] = pid
	}
	if gangLines != nil {
		code, err := runGangs(ctx, o, out, cs, scraper, runID, classes, gangLines)
		return code, nil, err
	}
	mix := scale.DefaultMix(o.pods)
	fmt.Fprintf(out, "scale bench: run %s, gpu profile %s (8 GPUs/node), pods %v, device classes %v\n", runID, o.gpuProfile, mix, src)

	code = 0
	for _, n := range o.nodes {
		start := time.Now()
		nodes, err := scale.CreateNodes(ctx, cs, runID, scale.NodePrefix, 0, n, 5*time.Minute)
		if err != nil {
			return 1, verdicts, err
		}
		fmt.Fprintf(out, "\nscale bench: %d kwok nodes Ready in %s\n", n, time.Since(start).Round(time.Millisecond))
		var results []scale.RunResult
		for _, name := range o.layouts {
			layout, _ := scale.LayoutByName(name)
			ns := fmt.Sprintf("scale-%s-%s-%d", runID, name, n)
			res, runErr := scale.Run(ctx, scale.Config{
				Client: cs, Scraper: scraper, Pids: pids, RunID: runID, Namespace: ns, Nodes: nodes, Layout: layout,
				GPUProfile: o.gpuProfile, Mix: mix, Image: cluster.PauseImage, Classes: classes, PhaseTimeout: o.phaseTimeout, VerifyNodes: o.verifyNodes,
			})
			scale.WriteRun(out, res)
			if runErr != nil {
				return 1, verdicts, fmt.Errorf("layout %s at %d nodes: %w", name, n, runErr)
			}
			if !res.Verify.OK() {
				code = 1
			}
			results = append(results, res)
			if err := scale.DeleteNamespace(ctx, cs, ns); err != nil {
				return 1, verdicts, err
			}
			if err := scale.DeleteSlices(ctx, cs, scale.LabelRun+"="+runID); err != nil {
				return 1, verdicts, err
			}
		}
		verdicts = append(verdicts, scale.WriteComparison(out, results[0], results), scale.WriteNVIDIAComparison(out, results))
	}
	if ctx.Err() != nil {
		return 1, verdicts, errors.New("interrupted")
	}
	return code, verdicts, nil
}

// readDeviceClasses parses every DeviceClass in the driver's manifests (multi-document YAML).
func readDeviceClasses(dir string) ([]*resourceapi.DeviceClass, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	var out []*resourceapi.DeviceClass
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, fmt.Errorf("device classes: %w", err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(fh, 4096)
		for {
			var dc resourceapi.DeviceClass
			err := dec.Decode(&dc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fh.Close()
				return nil, fmt.Errorf("device classes in %s: %w", f, err)
			}
			if dc.Kind == "DeviceClass" && dc.Name != "" {
				out = append(out, &dc)
			}
		}
		fh.Close()
	}
	return out, nil
}

// ensureNVIDIAClasses creates NVIDIA's DeviceClasses (deploy/deviceclasses/compat) for the
// nvidia-dynamic layout, checked against the devices that layout publishes.
func ensureNVIDIAClasses(ctx context.Context, cs kubernetes.Interface, root string, gpus []model.GPUInfo, runID string) error {
	files, err := readDeviceClasses(filepath.Join(root, "deploy", "deviceclasses", "compat"))
	if err != nil {
		return err
	}
	devices, err := scale.LayoutDevices(gpus, scale.LayoutNVIDIA, runID)
	if err != nil {
		return err
	}
	return scale.EnsureNVIDIAClasses(ctx, cs, files, devices, runID)
}
