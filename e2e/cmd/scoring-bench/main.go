// Command scoring-bench measures issue 33's scoring target on the local cluster: the same workload
// placed by the default scheduler and by neuronetes-scheduler's "neuronetes" profile on the same
// kwok nodes (zones, spot labels, price annotations, warm-model labels), one after the other in
// one run; it prints cost per placed replica-hour, share on warm nodes, same-pool collisions, zone
// skew and spot allocation for both (and, in the gangs scenario, the gangs' locality on the
// nodes' racks and blocks), then the verdict last, and exits 1 on a miss.
// Run through hack/bench.d/64-scoring.sh (it builds neuronetes-scheduler first).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/scale"
	"github.com/neuronetes/neuronetes/e2e/scoring"
)

// judged is what the verdict requires: scoring.Verdict, and for scenarios with gangs
// scoring.LocalityVerdict.
const judged = "cost lower, warm share higher, spread kept; with gangs: more gangs in one rack, fewer racks per gang"

type options struct {
	root, config, scenarios string
	timeout                 time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.root, "root", ".", "repository root")
	flag.StringVar(&o.config, "config", "deploy/scheduler/neuronetes-scheduler.yaml", "neuronetes-scheduler's KubeSchedulerConfiguration (relative to -root)")
	flag.StringVar(&o.scenarios, "scenarios", "fleet,burst,gangs", "comma-separated workloads of e2e/scoring ("+strings.Join(scoring.ScenarioNames, ", ")+"), each judged")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "wait for one batch's replicas to be bound")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var scs []scoring.Scenario
	for _, name := range strings.Split(o.scenarios, ",") {
		sc, err := scoring.ScenarioByName(name)
		if err != nil {
			fmt.Println("scoring bench: VERDICT: FAIL: -scenarios:", err)
			os.Exit(1)
		}
		scs = append(scs, sc)
	}
	reports, err := run(ctx, o, scs, os.Stdout)
	if err != nil {
		fmt.Println("scoring bench: VERDICT: FAIL: the run did not complete:", err)
		os.Exit(1)
	}
	pass := true
	for i, sc := range scs {
		ok, reasons := scoring.Verdict(reports[i][0], reports[i][1])
		for _, r := range reasons {
			fmt.Printf("scoring bench: %s: miss: %s\n", sc.Name, r)
		}
		pass = pass && ok
	}
	if !pass {
		fmt.Println("scoring bench: VERDICT: FAIL: neuronetes profile vs default scheduler in", o.scenarios+": "+judged)
		os.Exit(1)
	}
	fmt.Println("scoring bench: VERDICT: PASS: neuronetes profile vs default scheduler in", o.scenarios+": "+judged)
}

// run places each scenario with the default scheduler and then the neuronetes profile on the
// scenario's kwok nodes and returns the two reports per scenario.
func run(ctx context.Context, o options, scs []scoring.Scenario, out io.Writer) (reports [][2]scoring.Report, err error) {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return nil, err
	}
	kwok0Existed := false
	if c, err := cluster.Attach(root); err == nil {
		if cs, err := c.Clientset(); err == nil {
			_, err := cs.CoreV1().Nodes().Get(ctx, cluster.KwokNodeName(0), metav1.GetOptions{})
			kwok0Existed = err == nil
		}
	}
	c, err := cluster.Up(ctx, cluster.Options{Root: root, KwokNodes: 1})
	if err != nil {
		return nil, fmt.Errorf("local cluster: %w", err)
	}
	cfg, err := c.RestConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	runID := fmt.Sprintf("s%d", time.Now().Unix())
	if err := scale.Cleanup(ctx, cs, ""); err != nil {
		return nil, fmt.Errorf("cleaning up earlier runs: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := scale.Cleanup(cctx, cs, runID); err != nil {
			fmt.Fprintln(os.Stderr, "scoring-bench: cleanup:", err)
		}
		if !kwok0Existed {
			if err := cs.CoreV1().Nodes().Delete(cctx, cluster.KwokNodeName(0), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				fmt.Fprintln(os.Stderr, "scoring-bench: cleanup:", err)
			}
		}
		fmt.Fprintf(out, "scoring bench: cleaned up run %s\n", runID)
	}()
	stopSched, err := startScheduler(ctx, root, o.config, c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	defer stopSched()
	for _, sc := range scs {
		r, err := runScenario(ctx, cs, runID, sc, o.timeout, out)
		if err != nil {
			return nil, err
		}
		reports = append(reports, r)
	}
	return reports, nil
}

// runScenario creates the scenario's kwok nodes, places its workload with the default scheduler
// and then the neuronetes profile, prints both reports, and deletes the nodes.
func runScenario(ctx context.Context, cs kubernetes.Interface, runID string, sc scoring.Scenario, timeout time.Duration, out io.Writer) (r [2]scoring.Report, err error) {
	nodes := sc.Layout()
	if err := createNodes(ctx, cs, runID, nodes); err != nil {
		return r, fmt.Errorf("%s: kwok nodes: %w", sc.Name, err)
	}
	defer func() {
		if derr := deleteNodes(context.WithoutCancel(ctx), cs, nodes); derr != nil && err == nil {
			err = fmt.Errorf("%s: deleting kwok nodes: %w", sc.Name, derr)
		}
	}()
	fmt.Fprintf(out, "== scenario %s (run %s): %s\n", sc.Name, runID, sc.About)
	for i, s := range []string{"default-scheduler", "neuronetes"} {
		start := time.Now()
		ps, err := place(ctx, cs, runID, s, sc, timeout)
		if err != nil {
			return r, fmt.Errorf("%s: %w", sc.Name, err)
		}
		if r[i], err = scoring.Measure(s, sc.Wanted(), nodes, ps); err != nil {
			return r, fmt.Errorf("%s: %w", sc.Name, err)
		}
		fmt.Fprintf(out, "scoring bench: %s placed %d replicas in %s\n", s, len(ps), time.Since(start).Round(time.Millisecond))
	}
	scoring.Write(out, r[0], r[1])
	return r, nil
}

// startScheduler runs neuronetes-scheduler (.local/bin, from hack/build-tools.sh) with the
// profile of configPath pointed at the cluster (kubeconfig, no leader election, no serving port)
// and returns a function that stops it.
func startScheduler(ctx context.Context, root, configPath, kubeconfig string) (func(), error) {
	raw, err := os.ReadFile(filepath.Join(root, configPath))
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", configPath, err)
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": 500, "burst": 1000}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	dir := filepath.Join(root, ".local", "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out, _ := yaml.Marshal(cfg)
	cfgFile := filepath.Join(dir, "scoring-scheduler.yaml")
	if err := os.WriteFile(cfgFile, out, 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "neuronetes-scheduler.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(root, ".local", "bin", "neuronetes-scheduler"), "--config="+cfgFile, "--secure-port=0", "--v=2",
		"--feature-gates="+cluster.FeatureGates) // the cluster's kube-scheduler runs with the same (Workload API, gangs)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting neuronetes-scheduler (bash hack/build-tools.sh neuronetes-scheduler): %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		logFile.Close()
		return nil, fmt.Errorf("neuronetes-scheduler exited at once (%v); see %s", err, logFile.Name())
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
	}, nil
}
