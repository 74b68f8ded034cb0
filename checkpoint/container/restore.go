package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/checkpoint"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// RestoreOptions tune a container restore.
type RestoreOptions struct {
	// Name is the new container's ID; empty derives one from the checkpoint.
	Name string
	// LogPath receives the restored container's stdout/stderr; empty: <WorkDir>/<name>.log
	// (RestoredLog), removed with the container. Either way the process's stdio are the shim's
	// pipes, which a later checkpoint of the restored container can carry (/dev/null of the
	// node's mount namespace, as cio.NullIO would give, makes CRIU refuse the dump: "Can't
	// lookup mount ... path=/dev/null").
	LogPath  string
	Progress store.ProgressFunc
	// MappedCheck selects how the files the container mapped privately from
	// its bind mounts are checked before anything is created.
	MappedCheck checkpoint.MappedCheck
	// LazyPages restores without the memory pages: the task runs once CRIU has rebuilt its
	// mappings, and a `criu lazy-pages` daemon serves each page on first touch (userfaultfd) and
	// copies the rest in the background from the staged (verified) images, which stay until it
	// is done. Engine.LazyPages turns it on for every restore.
	LazyPages bool
}

// Restore fetches (and verifies) checkpoint k/ckID, then creates a new
// container from the checkpoint's image inside the namespaces of the
// running container hostID, and restores the task into it. It returns the
// new container's ID. On failure nothing is left running: the new task and
// container are deleted.
func (e *Engine) Restore(ctx context.Context, hostID string, k store.Key, ckID string, o RestoreOptions) (string, error) {
	ctx = nsCtx(ctx)
	logger := klog.FromContext(ctx).WithValues("host", hostID, "key", k.String(), "id", ckID)
	start := time.Now()
	// imgRoot holds container.json and images/ (CRIU reads them), work gets CRIU's logs and the
	// lazy-pages socket: the same staging directory after a fetch, or a local cache entry of this
	// node's own dump (read in place) and a fresh work directory.
	imgRoot, work, release, prefetched, err := e.stage(ctx, k, ckID, o.Progress)
	if err != nil {
		return "", err
	}
	restoreStep(ctx, StepStaged)
	var lazy *lazyRestore
	defer func() {
		if lazy == nil { // a running lazy restore cleans up once its pages are served
			os.RemoveAll(work)
			release()
		}
	}()
	var meta Meta
	b, err := os.ReadFile(filepath.Join(imgRoot, metaFile))
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint %s/%s %s: %w", k, ckID, metaFile, err)
	}
	host, err := e.Client.LoadContainer(ctx, hostID)
	if err != nil {
		return "", fmt.Errorf("load host container %s: %w", hostID, err)
	}
	hostSpec, err := host.Spec(ctx)
	if err != nil {
		return "", fmt.Errorf("host container %s spec: %w", hostID, err)
	}
	name := o.Name
	if name == "" {
		name = fmt.Sprintf("restored-%s-%d", hostID[:min(12, len(hostID))], time.Now().UnixNano())
	}
	spec, err := restoreSpec(meta, hostSpec, name)
	if err != nil {
		return "", fmt.Errorf("checkpoint %s/%s: %w", k, ckID, err)
	}
	if err := checkpoint.CheckMappedFilesIn(imgRoot, o.MappedCheck, bindResolver(spec.Mounts)); err != nil {
		return "", fmt.Errorf("checkpoint %s/%s: %w", k, ckID, err)
	}
	if meta.Workspace != nil {
		if err := restoreWorkspace(imgRoot, meta.Workspace, hostSpec); err != nil {
			return "", fmt.Errorf("checkpoint %s/%s: %w", k, ckID, err)
		}
	}
	restoreStep(ctx, StepPrepared)
	fetched := time.Now()
	labels := map[string]string{LabelRestoredFrom: k.String() + "/" + ckID, LabelHost: hostID}
	wantLazy := o.LazyPages || e.LazyPages
	task, lz, err := e.restoreTask(ctx, spec, meta, labels, name, imgRoot, work, o.LogPath, wantLazy, release)
	if err != nil && wantLazy && ctx.Err() == nil {
		// A lazy restore this node cannot do (userfaultfd refused, the page daemon failed):
		// the same verified images restore eagerly into a container of another name.
		logger.Error(err, "Lazy restore failed; restoring eagerly", "container", name)
		name += "-eager"
		if spec, err = restoreSpec(meta, hostSpec, name); err == nil {
			task, lz, err = e.restoreTask(ctx, spec, meta, labels, name, imgRoot, work, o.LogPath, false, release)
		}
	}
	if err != nil {
		return "", err
	}
	lazy = lz
	logger.Info("Restored container", "container", name, "pid", task.Pid(), "duration", time.Since(start),
		"fetch", fetched.Sub(start), "staged", prefetched, "criuRestore", time.Since(fetched), "lazyPages", lazy != nil)
	return name, nil
}

// restoreSpec is the checkpointed container's spec adapted to host container hostSpec
// (adaptSpec) for a restored container called name.
func restoreSpec(meta Meta, hostSpec *specs.Spec, name string) (*specs.Spec, error) {
	var spec specs.Spec
	if err := json.Unmarshal(meta.Spec, &spec); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if err := adaptSpec(&spec, hostSpec, name); err != nil {
		return nil, err
	}
	return &spec, nil
}

// stage makes checkpoint k/ckID's images available: a local cache entry of this node's own dump
// whose files the signed manifest lists (read in place, with a fresh work directory), else the
// images of a Prefetch, else a fetch (every chunk verified) into a new staging directory, which
// is also the work directory. how says which ("cache", "prefetch", "fetch"); release ends the
// hold on a cache entry.
func (e *Engine) stage(ctx context.Context, k store.Key, ckID string, p store.ProgressFunc) (imgRoot, work string, release func(), how string, err error) {
	release = func() {}
	if e.LocalCacheDir != "" {
		// The signed manifest (and the key and id it names) is checked before the cache is
		// looked at; the entry must list exactly its files.
		m, merr := e.Store.Manifest(ctx, k, ckID)
		if merr != nil {
			return "", "", nil, "", fmt.Errorf("checkpoint %s/%s: %w", k, ckID, merr)
		}
		if dir, rel, ok := e.cacheLookup(k, ckID, m); ok {
			if work, err = os.MkdirTemp(e.WorkDir, "ctr-restore-"); err != nil {
				rel()
				return "", "", nil, "", fmt.Errorf("work dir: %w", err)
			}
			return dir, work, rel, "cache", nil
		}
	}
	// A Prefetch of this checkpoint (started while the host container was starting) has
	// fetched and verified it already, or is doing so.
	dir, prefetched, err := e.takePrefetch(ctx, k, ckID)
	if err != nil {
		return "", "", nil, "", fmt.Errorf("prefetched checkpoint %s/%s: %w", k, ckID, err)
	}
	if prefetched {
		return dir, dir, release, "prefetch", nil
	}
	if dir, err = os.MkdirTemp(e.WorkDir, "ctr-restore-"); err != nil {
		return "", "", nil, "", fmt.Errorf("work dir: %w", err)
	}
	if _, err := e.Store.Get(ctx, k, ckID, dir, p); err != nil {
		os.RemoveAll(dir)
		return "", "", nil, "", fmt.Errorf("fetch checkpoint %s/%s: %w", k, ckID, err)
	}
	return dir, dir, release, "fetch", nil
}

// restoreTask creates container name with spec and restores its task from the images under
// imgRoot with CRIU's work directory work; lazily (startLazy) when lazy, and then the page daemon
// owns work and release (Engine.started). On failure nothing of it is left (container, task, page
// daemon); the images, work and the hold stay the caller's.
func (e *Engine) restoreTask(ctx context.Context, spec *specs.Spec, meta Meta, labels map[string]string, name, imgRoot, work, logPath string, lazy bool, release func()) (containerd.Task, *lazyRestore, error) {
	var lz *lazyRestore
	if lazy {
		var err error
		if lz, err = e.startLazy(spec, name, imgRoot, work); err != nil {
			return nil, nil, err
		}
		restoreStep(ctx, StepLazyDaemon)
	}
	fail := func(cause error) (containerd.Task, *lazyRestore, error) {
		if lz != nil {
			lz.abort()
		}
		return nil, nil, cause
	}
	runtimeOpts := &options.Options{}
	if e.RuncBinary != "" {
		runtimeOpts.BinaryName = e.RuncBinary
	}
	copts := []containerd.NewContainerOpts{
		containerd.WithRuntime("io.containerd.runc.v2", runtimeOpts),
		containerd.WithContainerLabels(labels),
	}
	if meta.Image != "" {
		img, err := e.Client.GetImage(ctx, meta.Image)
		if err != nil {
			return fail(fmt.Errorf("image %q of the checkpoint is not on this node: %w", meta.Image, err))
		}
		copts = append(copts, containerd.WithImage(img), containerd.WithSnapshotter(meta.Snapshotter),
			containerd.WithNewSnapshot(name+"-rootfs", img))
	} else if !filepath.IsAbs(spec.Root.Path) {
		return fail(fmt.Errorf("checkpoint has neither an image nor an absolute rootfs path"))
	}
	// A container without image keeps the spec's absolute rootfs path.
	copts = append(copts, containerd.WithSpec(spec))
	cont, err := e.Client.NewContainer(ctx, name, copts...)
	if err != nil {
		return fail(fmt.Errorf("create restored container %s: %w", name, err))
	}
	restoreStep(ctx, StepContainer)
	cleanup := func(cause error) (containerd.Task, *lazyRestore, error) {
		return fail(errors.Join(cause, e.Remove(ctx, name)))
	}
	if logPath == "" {
		logPath = e.RestoredLog(name)
	}
	images := filepath.Join(imgRoot, "images")
	task, err := cont.NewTask(ctx, cio.LogFile(logPath), containerd.WithRestoreImagePath(images), containerd.WithRestoreWorkPath(work))
	if err != nil {
		return cleanup(fmt.Errorf("create restore task: %w%s", err, criuLog(work, "restore.log")))
	}
	restoreStep(ctx, StepCRIURestore)
	if err := task.Start(ctx); err != nil {
		return cleanup(fmt.Errorf("restore task: %w%s", err, criuLog(work, "restore.log")))
	}
	if lz != nil {
		lz.release = release
		e.started(ctx, name, lz)
	}
	restoreStep(ctx, StepResumed)
	return task, lz, nil
}

// adaptSpec points the source container's spec at the host container: its
// network, IPC and UTS namespaces, its cgroup parent, and its bind mounts of
// every destination it also mounts (per-pod files such as /etc/hosts, and the
// pod's volumes); a bind mount the host lacks keeps its source if it exists.
func adaptSpec(spec, host *specs.Spec, name string) error {
	if spec.Linux == nil || host.Linux == nil {
		return fmt.Errorf("spec without linux section")
	}
	hostNS := map[specs.LinuxNamespaceType]string{}
	for _, ns := range host.Linux.Namespaces {
		hostNS[ns.Type] = ns.Path
	}
	if hostNS[specs.NetworkNamespace] == "" {
		return ErrNoHost
	}
	for i, ns := range spec.Linux.Namespaces {
		switch ns.Type {
		case specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace:
			spec.Linux.Namespaces[i].Path = hostNS[ns.Type]
		}
	}
	if host.Linux.CgroupsPath != "" {
		spec.Linux.CgroupsPath = path.Join(path.Dir(host.Linux.CgroupsPath), name)
	}
	// The runc shim serves every container whose spec names the same group in one process
	// (containerd-shim-runc-v2's group annotations): the source pod's sandbox ID would put the
	// restored task into the source pod's shim, which is being stopped with that pod after a
	// suspension. Without them the restored container gets a shim of its own.
	for _, a := range shimGroupAnnotations {
		delete(spec.Annotations, a)
	}
	hostMounts := map[string]specs.Mount{}
	for _, m := range host.Mounts {
		hostMounts[m.Destination] = m
	}
	for i, m := range spec.Mounts {
		if m.Type != "bind" && !hasOpt(m.Options, "bind") && !hasOpt(m.Options, "rbind") {
			continue
		}
		// The host container's own mount of a destination wins: the restored process joins the
		// host's pod, and the source pod's per-pod files may still exist now yet be removed by
		// its kubelet before the runtime opens them (a suspended session's deleted pod).
		if hm, ok := hostMounts[m.Destination]; ok {
			spec.Mounts[i].Source = hm.Source
			continue
		}
		if _, err := os.Stat(m.Source); err != nil {
			return fmt.Errorf("restore needs bind mount %s (source %s is gone) and the host container has none", m.Destination, m.Source)
		}
	}
	return nil
}

// shimGroupAnnotations are the annotations by which containerd-shim-runc-v2 runs a container
// in the shim of its group (the first one set names the group).
var shimGroupAnnotations = []string{"io.containerd.runc.v2.group", "io.kubernetes.cri.sandbox-id"}

func hasOpt(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// Remove kills and deletes a restored container and its snapshot.
func (e *Engine) Remove(ctx context.Context, id string) error {
	ctx = nsCtx(ctx)
	c, err := e.Client.LoadContainer(ctx, id)
	if err != nil {
		return fmt.Errorf("load %s: %w", id, err)
	}
	if t, err := c.Task(ctx, nil); err == nil {
		if _, err := t.Delete(ctx, containerd.WithProcessKill); err != nil {
			return fmt.Errorf("delete task of %s: %w", id, err)
		}
	}
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	for _, f := range []string{e.RestoredLog(id), e.criuConfig(id)} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove %s of %s: %w", filepath.Base(f), id, err)
		}
	}
	return nil
}

// GC removes restored containers whose host container is gone or no longer
// running (the warm pod was deleted), and returns their IDs.
func (e *Engine) GC(ctx context.Context) ([]string, error) {
	ctx = nsCtx(ctx)
	cs, err := e.Client.Containers(ctx, fmt.Sprintf("labels.%q", LabelHost))
	if err != nil {
		return nil, fmt.Errorf("list restored containers: %w", err)
	}
	var removed []string
	var errs []error
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err != nil {
			continue
		}
		if e.hostRunning(ctx, labels[LabelHost]) {
			continue
		}
		if err := e.Remove(ctx, c.ID()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, c.ID())
	}
	return removed, errors.Join(errs...)
}

func (e *Engine) hostRunning(ctx context.Context, id string) bool {
	h, err := e.Client.LoadContainer(ctx, id)
	if err != nil {
		return false
	}
	t, err := h.Task(ctx, nil)
	if err != nil {
		return false
	}
	st, err := t.Status(ctx)
	return err == nil && st.Status == containerd.Running
}

// RestoredInto returns the running container restored next to host container hostID (labelled
// LabelHost), if there is one. A checkpoint of a warm pod's (or resumed session's) first
// container must dump it rather than the host's pause process.
func (e *Engine) RestoredInto(ctx context.Context, hostID string) (string, bool, error) {
	ctx = nsCtx(ctx)
	cs, err := e.Client.Containers(ctx, fmt.Sprintf("labels.%q==%s", LabelHost, hostID))
	if err != nil {
		return "", false, fmt.Errorf("list containers restored into %s: %w", hostID, err)
	}
	for _, c := range cs {
		t, err := c.Task(ctx, nil)
		if err != nil {
			continue
		}
		if st, err := t.Status(ctx); err == nil && st.Status == containerd.Running {
			return c.ID(), true, nil
		}
	}
	return "", false, nil
}

// RestoredLog is the default stdout/stderr file of restored container id (RestoreOptions.LogPath).
func (e *Engine) RestoredLog(id string) string { return filepath.Join(e.WorkDir, id+".log") }
