// Package plugin is the DRA kubelet plugin: it wires the NVML backend, the state object, health and
// metrics to k8s.io/dynamic-resource-allocation/kubeletplugin, publishes the node's ResourceSlices
// and republishes them whenever device health or the inventory changes.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/cdi"
	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/demand"
	"github.com/neuronetes/neuronetes/driver/health"
	"github.com/neuronetes/neuronetes/driver/metrics"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/sharing"
	"github.com/neuronetes/neuronetes/driver/slices"
	"github.com/neuronetes/neuronetes/driver/state"
)

// Options configure the plugin.
type Options struct {
	NodeName string
	// DriverName is the DRA driver name and attribute domain; empty is model.DriverName. NVIDIA
	// compatibility mode uses model.CompatDriverName (with Slices.Compat).
	DriverName string
	// Kube is the client for publishing slices and reading claims.
	Kube kubernetes.Interface
	// Backend is the opened NVML backend.
	Backend *nvml.Backend
	// PluginDir holds the DRA socket, the checkpoint and (mocks) the simulated hardware state.
	PluginDir string
	// CheckpointDir, when set, holds the checkpoint instead of PluginDir (benchmarks put it on the
	// disk under test while the socket path stays short).
	CheckpointDir string
	// RegistrarDir is the kubelet's plugin registration directory.
	RegistrarDir string
	// CDIDir receives the per-claim CDI specs.
	CDIDir string
	// Slices are the layout options.
	Slices slices.Options
	// PodUID enables rolling updates (two plugin instances registered at once) when set.
	PodUID string
	// CheckpointSyncDir also fsyncs the checkpoint's directory when the checkpoint file is created
	// or enlarged (see checkpoint.Store; ordinary saves write in place).
	CheckpointSyncDir bool
	// CheckpointInPlace saves the checkpoint by overwriting a slot in place with one fdatasync
	// instead of temp file, fsync and rename (checkpoint.Store.InPlace).
	CheckpointInPlace bool
	// InfoTTL is how long informational XID taints last.
	InfoTTL time.Duration
	// Metrics receives the driver's metrics; nil creates a private set.
	Metrics *metrics.Metrics
	// Event reports Kubernetes events about the node (may be nil).
	Event func(eventType, reason, message string)
	// Sharing applies time slices and runs MPS daemons (nil: configs are validated, not applied).
	Sharing *sharing.Tools
	// RefreshInterval is how often the inventory is re-read (it is also re-read after every health
	// event); zero disables the periodic re-read.
	RefreshInterval time.Duration
	// ProbeMin and ProbeMax bound the delay between probes of a lost GPU (health.Monitor).
	ProbeMin, ProbeMax time.Duration
	// Demand, when set, publishes dynamic MIG devices only for the profiles the cluster's
	// requests select (driver/demand), kept current from the API; Slices.Profiles is then
	// replaced by that demand.
	Demand *DemandOptions
}

// DemandOptions configure the demand-shaped layout.
type DemandOptions struct {
	// Dynamic reads AgentPools and AgentClasses (nil: only claims and templates count).
	Dynamic dynamic.Interface
	// Debounce is the pause after an API change before the demand is recomputed.
	Debounce time.Duration
}

func (o Options) driverName() string {
	if o.DriverName == "" {
		return model.DriverName
	}
	return o.DriverName
}

// Driver is a running kubelet plugin.
type Driver struct {
	opts    Options
	State   *state.State
	Health  *health.Monitor
	Metrics *metrics.Metrics
	helper  *kubeletplugin.Helper
	pubMu   sync.Mutex
	cancel  context.CancelFunc
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// Start recovers the state, starts the kubelet plugin and publishes the node's slices.
func Start(ctx context.Context, opts Options) (*Driver, error) {
	logger := klog.FromContext(ctx)
	for _, dir := range []string{opts.PluginDir, opts.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("plugin directory %s: %w", dir, err)
		}
	}
	ckptDir := opts.PluginDir
	if opts.CheckpointDir != "" {
		ckptDir = opts.CheckpointDir
	}
	if opts.Slices.Compat {
		if err := CheckNoForeignSlices(ctx, opts.Kube, opts.driverName()); err != nil {
			return nil, err
		}
	}
	if opts.Demand != nil {
		opts.Slices.Profiles, opts.Slices.ExactProfiles = nil, true
	}
	w, err := cdi.NewWriterFor(opts.CDIDir, "k8s."+opts.driverName())
	if err != nil {
		return nil, err
	}
	m := opts.Metrics
	if m == nil {
		m = metrics.New()
	}
	st, err := state.New(ctx, state.Config{
		DriverName: opts.driverName(),
		NodeName:   opts.NodeName,
		Backend:    opts.Backend,
		CDI:        w,
		Store:      &checkpoint.Store{Path: filepath.Join(ckptDir, "checkpoint.json"), BootID: checkpoint.BootID(), SyncDir: opts.CheckpointSyncDir, InPlace: opts.CheckpointInPlace},
		Slices:     opts.Slices,
		Sharing:    opts.Sharing,
		Event:      opts.Event,
	})
	if err != nil {
		return nil, fmt.Errorf("driver state: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	d := &Driver{opts: opts, State: st, Metrics: m, cancel: cancel}
	d.Health = health.NewMonitor(func() {
		if err := st.SetHealth(d.Health.Records()); err != nil {
			logger.Error(err, "Recording GPU health in the checkpoint failed")
		}
		if err := d.publish(ctx); err != nil {
			logger.Error(err, "Republishing after a health change failed")
		}
	})
	d.Health.InfoTTL = opts.InfoTTL
	d.Health.Domain = opts.driverName()
	d.Health.Probe = opts.Backend.Probe
	d.Health.ProbeMin, d.Health.ProbeMax = opts.ProbeMin, opts.ProbeMax
	d.Health.OnEvent = func(ev nvml.Event, fatal bool) {
		m.HealthEvents.WithLabelValues(string(ev.Kind), fmt.Sprint(ev.XID), fmt.Sprint(fatal)).Inc()
	}
	// Taints recorded before a restart come back before anything is published.
	d.Health.Restore(st.Health())
	go d.Health.Run(ctx, opts.Backend.Events(ctx))

	kopts := []kubeletplugin.Option{
		kubeletplugin.DriverName(opts.driverName()),
		kubeletplugin.NodeName(opts.NodeName),
		kubeletplugin.KubeClient(opts.Kube),
		kubeletplugin.PluginDataDirectoryPath(opts.PluginDir),
		kubeletplugin.RegistrarDirectoryPath(opts.RegistrarDir),
	}
	if opts.PodUID != "" {
		kopts = append(kopts, kubeletplugin.RollingUpdate(types.UID(opts.PodUID)))
	}
	helper, err := kubeletplugin.Start(ctx, d, kopts...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start kubelet plugin: %w", err)
	}
	d.helper = helper
	d.updateClaimMetrics()
	if opts.Demand != nil {
		if err := d.startDemand(ctx); err != nil {
			d.Stop()
			return nil, err
		}
	}
	if err := d.publish(ctx); err != nil {
		d.Stop()
		return nil, err
	}
	if unknown := opts.Slices.UnknownProfiles(st.GPUs()); len(unknown) > 0 {
		msg := fmt.Sprintf("--mig-profiles: %s offered by no GPU of this node; nothing is published for them", strings.Join(unknown, ","))
		logger.Info("Warning: "+msg, "profiles", unknown)
		if opts.Event != nil {
			opts.Event("Warning", "UnknownMIGProfile", msg)
		}
	}
	go d.refreshLoop(ctx)
	logger.Info("Driver started", "node", opts.NodeName, "driver", opts.driverName(), "backend", opts.Backend.Name, "migMode", opts.Slices.MIG, "compat", opts.Slices.Compat, "gpus", len(st.GPUs()))
	return d, nil
}

// startDemand sets the dynamic MIG profiles to the cluster's demand and keeps them current,
// republishing on every change.
func (d *Driver) startDemand(ctx context.Context) error {
	opts := d.opts
	full := opts.Slices
	full.Profiles, full.ExactProfiles, full.Taints = nil, false, nil
	w := &demand.Watcher{
		Kube: opts.Kube, Dynamic: opts.Demand.Dynamic, Driver: opts.driverName(), Node: opts.NodeName, Debounce: opts.Demand.Debounce,
		Layout: func() []resourceapi.Device {
			var devs []resourceapi.Device
			for _, p := range slices.Build(opts.NodeName, d.State.GPUs(), full).Pools {
				for _, s := range p.Slices {
					devs = append(devs, s.Devices...)
				}
			}
			return devs
		},
		OnChange: func(p []string) {
			if d.State.SetProfiles(p) {
				if err := d.publish(ctx); err != nil {
					klog.FromContext(ctx).Error(err, "Republishing after a demand change failed")
				}
			}
		},
	}
	initial, err := w.Start(ctx)
	if err != nil {
		return err
	}
	d.State.SetProfiles(initial)
	klog.FromContext(ctx).Info("Publishing MIG devices for the profiles in demand", "profiles", initial)
	return nil
}

// refreshLoop re-reads the inventory every RefreshInterval and after every health change, and
// republishes when it changed; on the interval it also restarts MPS daemons that do not answer.
func (d *Driver) refreshLoop(ctx context.Context) {
	changed, cancel := d.Health.Subscribe()
	defer cancel()
	var tick <-chan time.Time
	if d.opts.RefreshInterval > 0 {
		t := time.NewTicker(d.opts.RefreshInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick:
			d.State.EnsureMPS(ctx)
		}
		d.Refresh(ctx)
	}
}

// Refresh re-reads the inventory and republishes the slices when it changed.
func (d *Driver) Refresh(ctx context.Context) {
	logger := klog.FromContext(ctx)
	changed, err := d.State.Refresh(ctx)
	if err != nil {
		logger.Error(err, "Re-reading the inventory failed")
		return
	}
	if !changed {
		return
	}
	if err := d.publish(ctx); err != nil {
		logger.Error(err, "Republishing after an inventory change failed")
	}
}

// Stop unregisters the plugin and stops background work.
func (d *Driver) Stop() {
	if d.helper != nil {
		d.helper.Stop()
	}
	d.cancel()
}

// publish republishes the slices with the current health taints.
func (d *Driver) publish(ctx context.Context) error {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	taints := d.Health.Taints()
	res := d.State.Resources(taints)
	if err := slices.Validate(res); err != nil {
		return fmt.Errorf("refusing to publish invalid slices: %w", err)
	}
	counts := map[string]float64{slices.TypeGPU: 0, slices.TypeMIG: 0}
	for _, p := range res.Pools {
		for _, s := range p.Slices {
			for _, dev := range s.Devices {
				if t := dev.Attributes[slices.AttrType].StringValue; t != nil {
					counts[*t]++
				}
			}
		}
	}
	for k, v := range counts {
		d.Metrics.DevicesAdvertised.WithLabelValues(k).Set(v)
	}
	d.Metrics.TaintedGPUs.Set(float64(len(taints)))
	if d.helper == nil {
		return nil
	}
	if err := d.helper.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("publish resources: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Published resources", "devices", counts, "taintedGPUs", len(taints))
	return nil
}

// Resources returns what the driver publishes now.
func (d *Driver) Resources() resourceslice.DriverResources {
	return d.State.Resources(d.Health.Taints())
}

func (d *Driver) updateClaimMetrics() {
	claims := d.State.Claims()
	migs := 0
	for _, c := range claims {
		for _, dev := range c.Devices {
			if dev.Dynamic && dev.MIG != nil {
				migs++
			}
		}
	}
	d.Metrics.PreparedClaims.Set(float64(len(claims)))
	d.Metrics.MIGInstances.Set(float64(migs))
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		start := time.Now()
		devs, err := d.State.Prepare(ctx, c)
		result := "ok"
		if err != nil {
			result = "error"
			klog.FromContext(ctx).Error(err, "Prepare failed", "claim", klog.KObj(c))
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
		} else {
			pr := kubeletplugin.PrepareResult{}
			for _, dv := range devs {
				pr.Devices = append(pr.Devices, kubeletplugin.Device{Requests: dv.Requests, PoolName: dv.PoolName, DeviceName: dv.DeviceName, CDIDeviceIDs: dv.CDIDeviceIDs})
			}
			out[c.UID] = pr
		}
		d.Metrics.PrepareSeconds.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}
	d.updateClaimMetrics()
	return out, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		start := time.Now()
		err := d.State.Unprepare(ctx, c.UID)
		result := "ok"
		if err != nil {
			result = "error"
		}
		out[c.UID] = err
		d.Metrics.UnprepareSeconds.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}
	d.updateClaimMetrics()
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: recoverable errors are logged; others (e.g.
// invalid or dropped slice fields) are logged as errors too, since restarting would not fix them.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.opts.Event != nil {
		d.opts.Event("Warning", "DriverError", fmt.Sprintf("%s: %v", msg, err))
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin (KEP-4680): a full report at once, then
// after every change and at least every 20 s (the kubelet's timeout is 30 s).
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	changed, cancel := d.Health.Subscribe()
	defer cancel()
	tick := time.NewTicker(20 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- d.healthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

func (d *Driver) healthReport() kubeletplugin.DeviceHealthReport {
	var rep kubeletplugin.DeviceHealthReport
	now := time.Now()
	for pool, p := range d.Resources().Pools {
		for _, s := range p.Slices {
			for _, dev := range s.Devices {
				uuid := ""
				if a := dev.Attributes[slices.AttrParentUUID].StringValue; a != nil {
					uuid = *a
				} else if a := dev.Attributes[slices.AttrUUID].StringValue; a != nil {
					uuid = *a
				}
				ok, msg := d.Health.Healthy(uuid)
				h := kubeletplugin.HealthStatusHealthy
				if !ok {
					h = kubeletplugin.HealthStatusUnhealthy
				}
				rep.Devices = append(rep.Devices, kubeletplugin.DeviceHealth{
					PoolName: pool, DeviceName: dev.Name, Health: h, LastUpdated: now, HealthCheckTimeout: 30 * time.Second, Message: msg,
				})
			}
		}
	}
	return rep
}
