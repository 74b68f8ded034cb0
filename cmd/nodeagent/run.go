package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/egress"
	"github.com/neuronetes/neuronetes/internal/serving/ctrlserving"
	"github.com/neuronetes/neuronetes/nodeagent/agent"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
	"github.com/neuronetes/neuronetes/nodeagent/nodeapi"
	"github.com/neuronetes/neuronetes/nodeagent/warm"
)

// backend joins the agent and the reconciler's Model lookup for the node API.
type backend struct {
	*agent.Agent
	rec *agent.Reconciler
}

func (b backend) ResolveModel(ctx context.Context, ns, name string) (agent.Request, error) {
	return b.rec.ResolveModel(ctx, ns, name)
}

func quantity(name, v string) (int64, error) {
	if v == "" || v == "0" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %w", name, v, err)
	}
	return q.Value(), nil
}

func run(args []string) error {
	fs := flag.CommandLine // controller-runtime registers --kubeconfig here
	klog.InitFlags(fs)
	var (
		nodeName     = fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (env NODE_NAME)")
		cacheDir     = fs.String("cache-dir", "/var/lib/neuronetes/models", "host directory of the weights cache")
		hostCacheDir = fs.String("host-cache-dir", "", "the cache directory as the host (and pods' hostPath volumes) name it; defaults to --cache-dir")
		socket       = fs.String("socket", "/var/run/neuronetes/nodeagent.sock", "unix socket of the node API")
		diskBudget   = fs.String("disk-budget", defaultDiskBudget, "most bytes the cache may hold on disk: a quantity (e.g. 200Gi), a percentage of the cache directory's filesystem (e.g. 80%), or 0 = unlimited")
		memBudget    = fs.String("memory-budget", "0", "most bytes of cached weights kept in the page cache; 0 = unlimited")
		mlockBudget  = fs.String("mlock-budget", "0", "most bytes of warm weights locked in memory with mlock; 0 = no mlock")
		maxDownloads = fs.Int("max-concurrent-downloads", 2, "fetches running at once on this node")
		warmMethod   = fs.String("warm-method", string(warm.MethodPopulate), "page-cache warm method: populate (MADV_POPULATE_READ) or pread")
		warmParallel = fs.Int("warm-parallel", 4, "page-cache warm workers")
		s3Endpoint   = fs.String("s3-endpoint", os.Getenv("NEURONETES_S3_ENDPOINT"), "default S3 endpoint for s3:// models (a Secret's \"endpoint\" key overrides it)")
		metricsAddr  = fs.String("metrics-bind-address", ":9465", "Prometheus metrics address; 0 disables")
		probeAddr    = fs.String("health-probe-bind-address", ":9466", "healthz/readyz address; 0 disables")
		watchNS      = fs.String("watch-namespace", "", "watch Models and AgentClasses only in this namespace (tests); empty = all")
		resync       = fs.Duration("resync", 30*time.Second, "idle resync: re-measure residency, keep labels and status true")
		fileRoots    = fs.String("file-source-roots", "", "comma-separated directories that file:// and bare-path Model sources may read below (symbolic links may not lead out); empty refuses file sources")
		stall        = fs.Duration("download-stall-timeout", cache.DefaultStallTimeout, "fail a download whose source sends no bytes for this long")
		egressFlags  egress.Flags
		sources      sourceFlags
	)
	egressFlags.Register(fs)
	sources.register(fs)
	snap := registerSnapshotFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodeName == "" {
		return errors.New("--node-name (or env NODE_NAME) is required")
	}
	disk, err := diskBudgetBytes(*diskBudget, *cacheDir)
	if err != nil {
		return err
	}
	pol, err := egressFlags.Policy()
	if err != nil {
		return err
	}
	if host := endpointHost(*s3Endpoint); host != "" {
		// The admin's own default endpoint is admitted; a Model Secret's endpoint is checked.
		pol.AllowHosts = append(pol.AllowHosts, host)
	}
	roots, err := parseFileRoots(*fileRoots)
	if err != nil {
		return err
	}
	mem, err := quantity("memory-budget", *memBudget)
	if err != nil {
		return err
	}
	lock, err := quantity("mlock-budget", *mlockBudget)
	if err != nil {
		return err
	}
	logger := klog.NewKlogr()
	ctrl.SetLogger(logger)
	ctx := klog.NewContext(ctrl.SetupSignalHandler(), logger)

	m := agent.NewMetrics(metrics.Registry)
	store, err := cache.Open(*cacheDir, cache.Options{DiskBudget: disk, MaxConcurrent: *maxDownloads, Observer: m})
	if err != nil {
		return err
	}
	var locker *warm.Locker
	if lock > 0 {
		locker = &warm.Locker{Budget: lock}
	}
	ag := agent.New(ctx, agent.Config{
		Store: store, Warm: warm.Options{Method: warm.Method(*warmMethod), Parallel: *warmParallel},
		Locker: locker, MemoryBudget: mem, Metrics: m,
		Sources: cache.SourceOptions{FileRoots: roots, Egress: pol, HTTPClient: cache.NewHTTPClient(pol), StallTimeout: *stall},
	})

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes config: %w", err)
	}
	byObject := map[client.Object]ctrlcache.ByObject{&corev1.Pod{}: {Field: agent.PodFieldSelector(*nodeName)}}
	if *watchNS != "" {
		only := map[string]ctrlcache.Config{*watchNS: {}}
		byObject[&v1alpha1.Model{}] = ctrlcache.ByObject{Namespaces: only}
		byObject[&v1alpha1.AgentClass{}] = ctrlcache.ByObject{Namespaces: only}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr, FilterProvider: ctrlserving.MetricsFilter},
		HealthProbeBindAddress: *probeAddr,
		Cache:                  ctrlcache.Options{ByObject: byObject},
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	creds, err := sources.credentials(mgr.GetAPIReader())
	if err != nil {
		return err
	}
	rec := &agent.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Agent: ag, NodeName: *nodeName, HostCacheDir: *hostCacheDir,
		S3Endpoint: *s3Endpoint, IdleResync: *resync, Credentials: creds,
		Recorder: mgr.GetEventRecorderFor("neuronetes-nodeagent"), //nolint:staticcheck // core/v1 Events, as kubectl describe shows them
	}
	if err := rec.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("reconciler: %w", err)
	}
	if err := setupSnapshot(ctx, mgr, snap, *nodeName); err != nil {
		return err
	}
	h := nodeapi.Handler(backend{Agent: ag, rec: rec}, *nodeName, store.Root(), store.UsedBytes)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return nodeapi.Serve(ctx, *socket, h)
	})); err != nil {
		return err
	}
	if *probeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return err
		}
	}
	logger.Info("Starting node agent", "node", *nodeName, "cacheDir", *cacheDir, "socket", *socket,
		"diskBudget", disk, "fileSourceRoots", roots, "egressAllowCIDRs", pol.AllowCIDRs, "egressAllowHosts", pol.AllowHosts, "memoryBudget", mem, "mlockBudget", lock, "entries", len(store.Entries()))
	return mgr.Start(ctx)
}
