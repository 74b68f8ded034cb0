package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/internal/serving"
	sidecarv1 "github.com/neuronetes/neuronetes/sidecar/api/v1"
	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
	"github.com/neuronetes/neuronetes/sidecar/metrics"
	"github.com/neuronetes/neuronetes/sidecar/server"
	"github.com/neuronetes/neuronetes/sidecar/store"
	"github.com/neuronetes/neuronetes/sidecar/vector"
)

// vectorFile is the shard's file name inside VectorDir.
const vectorFile = "vectors.nnvx"

// Run starts the sidecar and blocks until ctx ends, then shuts down
// gracefully (saving the vector shard when persistence is on).
func Run(ctx context.Context, c Config) error {
	log := klog.FromContext(ctx).WithValues("tenant", c.Namespace)
	if err := c.Validate(); err != nil {
		return err
	}
	ring, err := keys.Load(c.KeysDir)
	if err != nil {
		// Keys may be mounted later (optional Secret): start degraded, with
		// session and remote-embedding calls answering 503 "no encryption
		// keys configured", and pick the keys up on the next reload.
		log.Error(err, "no usable key ring; session storage unavailable until keys are mounted", "keysDir", c.KeysDir)
		ring = keys.Empty()
	}
	codec, err := frame.New(ring, frame.Options{Tenant: c.Namespace, Compression: frame.Compression(c.Compression),
		UseDict: c.ZstdDict, MaxPlaintext: c.MaxSession + 1<<16, AcceptUnversioned: c.AcceptV1Frames})
	if err != nil {
		return err
	}
	ropts, err := c.RedisOptions()
	if err != nil {
		return err
	}
	rdb := redis.NewUniversalClient(ropts)
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(c.AgentClass)
	if err := m.Register(reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	st, err := store.New(rdb, codec, store.Options{DefaultTTL: c.DefaultTTL, MaxTTL: c.MaxTTL, MaxSize: c.MaxSession,
		RefreshOnRead: c.RefreshOnRead, NearCacheBytes: c.NearCacheBytes, NearCacheMaxAge: c.NearCacheMaxAge, Observer: m})
	if err != nil {
		return err
	}
	idx, err := loadIndex(ctx, c, codec)
	if err != nil {
		return err
	}
	m.VectorEntries.Set(float64(idx.Len()))
	m.SetKeysLoaded(ring.Active() != "")
	var remote vector.Remote
	if c.EmbeddingRedis {
		remote = st.Blobs("emb")
	}
	vecs := &server.Vectors{Index: idx, Embeddings: vector.NewEmbeddingCache(c.EmbeddingBytes, remote, c.EmbeddingTTL), Metrics: m}
	srv := server.New(st, vecs, m, reg)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { st.Run(ctx, 250*time.Millisecond) })
	wg.Go(func() { reloadKeys(ctx, c, codec, m) })
	if c.VectorDir != "" {
		wg.Go(func() { saveLoop(ctx, c, idx, codec) })
	}

	serve, shutdown := httpServer(ctx, c, srv)
	errc := make(chan error, 3)
	var listeners []net.Listener
	if c.HTTPAddr != "" {
		l, err := net.Listen("tcp", c.HTTPAddr)
		if err != nil {
			return fmt.Errorf("http-addr: %w", err)
		}
		listeners = append(listeners, l)
	}
	if c.UnixSocket != "" {
		l, err := listenUnix(c.UnixSocket)
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
	}
	for _, l := range listeners {
		log.Info("serving HTTP", "addr", l.Addr().String())
		go func() { errc <- serve(l) }()
	}
	var gs *grpc.Server
	if c.GRPCAddr != "" {
		l, err := net.Listen("tcp", c.GRPCAddr)
		if err != nil {
			return fmt.Errorf("grpc-addr: %w", err)
		}
		gs = grpc.NewServer(serving.GRPC().ServerOptions()...)
		sidecarv1.RegisterSessionsServer(gs, srv.GRPC())
		log.Info("serving gRPC", "addr", l.Addr().String())
		go func() { errc <- gs.Serve(l) }()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
		log.Error(err, "listener failed")
	}
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stop()
	_ = shutdown(shutdownCtx)
	if gs != nil {
		gs.GracefulStop()
	}
	cancel()
	wg.Wait()
	if c.VectorDir != "" {
		if serr := idx.Save(filepath.Join(c.VectorDir, vectorFile), codec); serr != nil {
			log.Error(serr, "saving vector shard")
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// httpServer returns how to serve the HTTP API on a listener and how to shut
// every such listener down, for the configured engine.
func httpServer(ctx context.Context, c Config, srv *server.Server) (serve func(net.Listener) error, shutdown func(context.Context) error) {
	if c.HTTPEngine == "net" {
		hs := serving.Local().Server("", srv.Handler())
		hs.BaseContext = func(net.Listener) context.Context { return ctx }
		return hs.Serve, hs.Shutdown
	}
	fs := srv.FastServer(ctx, c.MaxSession)
	return fs.Serve, fs.ShutdownWithContext
}

// loadIndex opens the persisted vector shard, sealed with the tenant's key.
// A shard written unsealed by an earlier release is re-saved sealed at once.
func loadIndex(ctx context.Context, c Config, codec *frame.Codec) (*vector.Index, error) {
	o := vector.Options{MaxBytes: c.VectorMaxBytes, NProbe: c.VectorNProbe}
	if c.VectorDir == "" {
		return vector.New(o), nil
	}
	if err := os.MkdirAll(c.VectorDir, 0o700); err != nil {
		return nil, fmt.Errorf("vector-dir: %w", err)
	}
	path := filepath.Join(c.VectorDir, vectorFile)
	idx, plaintext, err := vector.Load(path, o, codec)
	switch {
	case err == nil:
		if plaintext {
			err := idx.Save(path, codec)
			klog.FromContext(ctx).Info("vector shard was stored unencrypted; re-saved sealed with the tenant key", "path", path, "err", err)
		}
		return idx, nil
	case errors.Is(err, os.ErrNotExist):
		return vector.New(o), nil
	case errors.Is(err, vector.ErrCorrupt):
		// A torn, damaged or unopenable (no or another key) cache is rebuilt
		// from scratch, not trusted; the file is kept aside.
		klog.FromContext(ctx).Error(err, "vector shard unusable; starting empty", "path", path)
		_ = os.Rename(path, path+".corrupt")
		return vector.New(o), nil
	}
	return nil, err
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("unix-socket dir: %w", err)
	}
	_ = os.Remove(path) // a stale socket from a previous run
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("unix-socket: %w", err)
	}
	// The agent container may run as another user; the socket lives in a
	// pod-private volume, so the pod boundary is the access boundary.
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("unix-socket chmod: %w", err)
	}
	return l, nil
}

// every calls f each period until ctx ends; a period <= 0 never calls it.
func every(ctx context.Context, period time.Duration, f func()) {
	if period <= 0 {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// reloadKeys re-reads the key ring every c.KeysReload and swaps it in when its
// active key or key ids changed; a failed read keeps the current ring.
func reloadKeys(ctx context.Context, c Config, codec *frame.Codec, m *metrics.Metrics) {
	log := klog.FromContext(ctx)
	every(ctx, c.KeysReload, func() {
		r, err := keys.Load(c.KeysDir)
		if err != nil {
			log.Error(err, "reloading keys; keeping the current ring")
			return
		}
		cur := codec.Ring()
		if r.Active() != cur.Active() || !slices.Equal(r.IDs(), cur.IDs()) {
			codec.SetRing(r)
			m.SetKeysLoaded(true)
			log.Info("key ring reloaded", "active", r.Active(), "ids", r.IDs())
		}
	})
}

// saveLoop writes the vector shard, sealed, every c.VectorSaveInterval.
func saveLoop(ctx context.Context, c Config, idx *vector.Index, codec *frame.Codec) {
	log := klog.FromContext(ctx)
	every(ctx, c.VectorSaveInterval, func() {
		if err := idx.Save(filepath.Join(c.VectorDir, vectorFile), codec); err != nil {
			log.Error(err, "saving vector shard")
		}
	})
}
