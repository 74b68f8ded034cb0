// Command driver is the NeuroNetes DRA GPU kubelet plugin (driver name gpu.neuronetes.io, or
// gpu.nvidia.com in NVIDIA compatibility mode). It publishes the node's GPUs, static and dynamic
// MIG devices as ResourceSlices, prepares claims with per-claim CDI specs and a crash-safe
// checkpoint, applies GPU sharing (time slices, MPS daemons) and reports device health.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/metrics"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/plugin"
	"github.com/neuronetes/neuronetes/driver/sharing"
	"github.com/neuronetes/neuronetes/driver/slices"
	"github.com/neuronetes/neuronetes/internal/serving"
)

func main() {
	if err := run(); err != nil {
		klog.Background().Error(err, "Driver failed")
		klog.Flush()
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run() error {
	fs := flag.NewFlagSet("driver", flag.ExitOnError)
	migGPUsDefault := 0
	if v := os.Getenv("NEURONETES_MIG_GPUS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("NEURONETES_MIG_GPUS: %q is not an integer: %w", v, err)
		}
		migGPUsDefault = n
	}
	klog.InitFlags(fs)
	var (
		nodeName     = fs.String("node-name", os.Getenv("NODE_NAME"), "node this plugin runs on (env NODE_NAME)")
		backend      = fs.String("nvml", "", "NVML backend: real or mock:<profile> with profile in "+strings.Join(nvml.MockProfiles(), ",")+" (env "+nvml.EnvBackend+", default real)")
		kubeconfig   = fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig; empty uses the in-cluster config")
		compat       = fs.Bool("compat", os.Getenv("NEURONETES_COMPAT") == "true", "NVIDIA compatibility mode: driver name and attribute domain "+model.CompatDriverName+", NVIDIA's attribute names; refuses to start while another driver publishes "+model.CompatDriverName+" slices (env NEURONETES_COMPAT=true)")
		pluginDir    = fs.String("plugin-dir", "", "plugin data directory (socket, checkpoint, MPS directories); default /var/lib/kubelet/plugins/<driver name>")
		registrarDir = fs.String("registrar-dir", "/var/lib/kubelet/plugins_registry", "kubelet plugin registration directory")
		cdiDir       = fs.String("cdi-dir", "/var/run/cdi", "directory for the per-claim CDI specs")
		migMode      = fs.String("mig-mode", envOr("NEURONETES_MIG_MODE", string(slices.MIGDynamic)), "MIG publishing: dynamic, static or none")
		migProfiles  = fs.String("mig-profiles", os.Getenv("NEURONETES_MIG_PROFILES"), "comma-separated MIG profiles to publish in dynamic mode (empty: all)")
		migDemand    = fs.Bool("mig-demand", os.Getenv("NEURONETES_MIG_DEMAND") == "true", "in dynamic mode, publish MIG devices only for the profiles the cluster's ResourceClaims, ResourceClaimTemplates and AgentPools request (read from the API, kept current); excludes --mig-profiles (env NEURONETES_MIG_DEMAND=true)")
		migGPUs      = fs.Int("mig-gpus", migGPUsDefault, "in dynamic mode, publish MIG devices only on this many MIG-capable GPUs (those with the highest indices); the others are whole GPUs only; 0: all (env NEURONETES_MIG_GPUS)")
		metricsAddr  = fs.String("metrics-addr", "127.0.0.1:9401", "address of the Prometheus /metrics endpoint (empty disables)")
		debugAddr    = fs.String("debug-addr", "", "loopback address (127.0.0.1:<port>, [::1]:<port>) of the debug endpoint (health injection, prepare pause, MIG listing); needs --debug-token-file; empty (the default) disables it")
		debugToken   = fs.String("debug-token-file", "", "file holding the bearer token every debug request must send (at least 16 bytes; re-read on each request); required with --debug-addr")
		podUID       = fs.String("pod-uid", os.Getenv("POD_UID"), "pod UID; enables rolling updates of the plugin (env POD_UID)")
		syncDir      = fs.Bool("checkpoint-sync-dir", false, "also fsync the checkpoint directory after each rename of the checkpoint file (not needed for correctness: state is rolled back after a reboot)")
		inPlace      = fs.Bool("checkpoint-in-place", true, "save the checkpoint by overwriting the older of its two checksummed slots with one fdatasync; false: write a temp file, fsync and rename it on every save (same old-or-new guarantee, about 1.5x slower prepares)")
		infoTTL      = fs.Duration("info-xid-ttl", 5*time.Minute, "how long an informational XID taint lasts")
		refresh      = fs.Duration("refresh-interval", time.Minute, "how often the inventory is re-read (MIG changes, added or removed GPUs); it is also re-read after every health event; 0 disables")
		nvidiaSMI    = fs.String("nvidia-smi", "", "path of nvidia-smi, run to set time slices (inside --tools-root); default /usr/bin/nvidia-smi with the real backend, none with mocks (time slices are then not applied)")
		mpsControl   = fs.String("mps-control", "", "path of nvidia-cuda-mps-control, run to start and stop MPS daemons (inside --tools-root); default /usr/bin/nvidia-cuda-mps-control with the real backend, none with mocks")
		toolsRoot    = fs.String("tools-root", "", "root directory (the host's driver root, mounted into the container) that nvidia-smi and nvidia-cuda-mps-control run in (chroot); default /driver-root with the real backend, none with mocks")
	)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *nodeName == "" {
		return errors.New("--node-name (or NODE_NAME) is required")
	}
	driverName := model.DriverName
	if *compat {
		driverName = model.CompatDriverName
	}
	if *pluginDir == "" {
		*pluginDir = "/var/lib/kubelet/plugins/" + driverName
	}
	mode := slices.MIGMode(*migMode)
	switch mode {
	case slices.MIGDynamic, slices.MIGStatic, slices.MIGNone:
	default:
		return fmt.Errorf("--mig-mode: %q is not dynamic, static or none", *migMode)
	}
	if *migGPUs < 0 {
		return fmt.Errorf("--mig-gpus: %d is negative (0 means all GPUs)", *migGPUs)
	}
	var profiles []string
	for _, p := range strings.Split(*migProfiles, ",") {
		if p = strings.TrimSpace(p); p != "" {
			profiles = append(profiles, p)
		}
	}
	var debugGuard func(http.Handler) http.Handler
	if *debugAddr != "" {
		if err := serving.RequireLoopback(*debugAddr); err != nil {
			return fmt.Errorf("--debug-addr: %w", err)
		}
		g, err := serving.RequireBearer(*debugToken)
		if err != nil {
			return fmt.Errorf("--debug-token-file (required with --debug-addr): %w", err)
		}
		debugGuard = g
	}
	if *migDemand && (len(profiles) > 0 || mode != slices.MIGDynamic) {
		return fmt.Errorf("--mig-demand: needs --mig-mode=dynamic and no --mig-profiles (the demand selects the profiles)")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("driver")
	ctx = klog.NewContext(ctx, logger)

	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	var demandOpts *plugin.DemandOptions
	if *migDemand {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("dynamic client: %w", err)
		}
		demandOpts = &plugin.DemandOptions{Dynamic: dyn}
	}
	spec := nvml.Spec(*backend)
	tools := sharingTools(spec, *nvidiaSMI, *mpsControl, *toolsRoot, filepath.Join(*pluginDir, "mps"))
	b, err := nvml.Open(spec, nvml.Options{StateFile: filepath.Join(*pluginDir, "mock-nvml-state.json"), Seed: *nodeName})
	if err != nil {
		return err
	}
	defer b.Close()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: driverName, Host: *nodeName})

	m := metrics.New()
	d, err := plugin.Start(ctx, plugin.Options{
		NodeName:          *nodeName,
		DriverName:        driverName,
		Kube:              kube,
		Backend:           b,
		PluginDir:         *pluginDir,
		RegistrarDir:      *registrarDir,
		CDIDir:            *cdiDir,
		Slices:            slices.Options{MIG: mode, Profiles: profiles, MIGGPUs: *migGPUs, Compat: *compat},
		Sharing:           tools,
		RefreshInterval:   *refresh,
		Demand:            demandOpts,
		PodUID:            *podUID,
		InfoTTL:           *infoTTL,
		CheckpointSyncDir: *syncDir,
		CheckpointInPlace: *inPlace,
		Metrics:           m,
		Event:             plugin.NodeEvents(ctx, kube, recorder, *nodeName),
	})
	if err != nil {
		return err
	}
	defer d.Stop()

	if *metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		serve(ctx, *metricsAddr, mux)
	}
	if *debugAddr != "" {
		serve(ctx, *debugAddr, debugGuard(d.DebugHandler()))
	}
	<-ctx.Done()
	logger.Info("Shutting down")
	return nil
}

// sharingTools returns the GPU sharing tools: the given paths, or with the real backend the
// defaults under the driver root; mocks have none unless paths are given (recording stand-ins).
func sharingTools(backend, smi, mps, root, mpsRoot string) *sharing.Tools {
	if backend == "real" {
		smi = cmp.Or(smi, "/usr/bin/nvidia-smi")
		mps = cmp.Or(mps, "/usr/bin/nvidia-cuda-mps-control")
		root = cmp.Or(root, "/driver-root")
	}
	return &sharing.Tools{NvidiaSMI: smi, MPSControl: mps, Chroot: root, MPSRoot: mpsRoot}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config (set --kubeconfig outside a pod): %w", err)
	}
	return c, nil
}

// serve serves h on addr until ctx ends. During a rolling update the old pod may still hold the
// port (both share the host network), so binding is retried in the background instead of failing.
func serve(ctx context.Context, addr string, h http.Handler) {
	logger := klog.FromContext(ctx)
	go func() {
		for ctx.Err() == nil {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				logger.Info("Cannot listen yet, retrying", "addr", addr, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Second):
				}
				continue
			}
			srv := serving.Admin().Server("", h)
			go func() {
				<-ctx.Done()
				_ = srv.Close()
			}()
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "HTTP server failed", "addr", addr)
			}
			return
		}
	}()
}
