package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/neuronetes/neuronetes/gateway/poolview"
	"github.com/neuronetes/neuronetes/scheduler/scoring"
)

// HeadroomArgs are NeuroNetesHeadroom's pluginConfig args.
type HeadroomArgs struct {
	// GatewayURLs are the gateway replicas' admin addresses ("http://10.0.0.7:9090"); headroom
	// reads each one's per-pool view, /pools/<namespace>/<pool>/metrics, for the sessions pinned to
	// each serving pod. An http URL whose host is a name is read at every address the name
	// resolves to, so the gateway's headless admin Service
	// ("http://<release>-gateway-admin.<namespace>.svc:9090") names every ready replica. Empty:
	// headroom counts the pool's replicas on the node only.
	GatewayURLs []string `json:"gatewayURLs,omitempty"`
}

// Gateway reads: a pool's view is reused for loadTTL, and a read waits at most loadTimeout.
const (
	loadTTL     = 5 * time.Second
	loadTimeout = time.Second
)

// headroomPlugin prefers nodes whose replicas of the pod's pool carry the least load: each counts
// 1 plus the sessions the gateway pinned to it (scoring.HeadroomRaw).
type headroomPlugin struct {
	urls   []string
	http   *http.Client
	now    func() time.Time
	lookup func(ctx context.Context, host string) ([]string, error) // a name's addresses

	mu    sync.Mutex
	views map[string]poolView // by "<namespace>/<pool>"
}

type poolView struct {
	load *scoring.PoolLoad
	at   time.Time
}

func newHeadroom(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	var args HeadroomArgs
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
			return nil, fmt.Errorf("%s args: %w", HeadroomName, err)
		}
	}
	for i, u := range args.GatewayURLs {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("%s args gatewayURLs[%d]: %q: want http(s)://host:port", HeadroomName, i, u)
		}
	}
	return &headroomPlugin{urls: args.GatewayURLs, http: &http.Client{Timeout: loadTimeout}, now: time.Now,
		lookup: net.DefaultResolver.LookupHost, views: map[string]poolView{}}, nil
}

func (*headroomPlugin) Name() string { return HeadroomName }

const headroomStateKey fwk.StateKey = HeadroomName

type headroomState struct{ load *scoring.PoolLoad }

func (s headroomState) Clone() fwk.StateData { return s }

// PreScore reads the gateway's view of the pod's pool (cached for loadTTL) into the cycle state.
func (h *headroomPlugin) PreScore(ctx context.Context, state fwk.CycleState, p *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	var load *scoring.PoolLoad
	if pool := scoring.Pool(p); pool != "" && len(h.urls) > 0 {
		load = h.load(ctx, p.Namespace, pool)
	}
	state.Write(headroomStateKey, headroomState{load: load})
	return nil
}

// load returns the pool's view merged over the gateway replicas that answered, nil when none did
// (logged; headroom then counts replicas only).
func (h *headroomPlugin) load(ctx context.Context, ns, pool string) *scoring.PoolLoad {
	key := ns + "/" + pool
	h.mu.Lock()
	v, ok := h.views[key]
	h.mu.Unlock()
	if ok && h.now().Sub(v.at) < loadTTL {
		return v.load
	}
	l, read := &scoring.PoolLoad{}, 0
	for _, u := range h.replicas(ctx) {
		if err := h.read(ctx, l, strings.TrimSuffix(u, "/")+poolview.Path(url.PathEscape(ns), url.PathEscape(pool))); err != nil {
			klog.FromContext(ctx).V(2).Info("Reading the gateway's pool view", "plugin", HeadroomName, "pool", key, "err", err)
			continue
		}
		read++
	}
	if read == 0 {
		l = nil
	}
	h.mu.Lock()
	h.views[key] = poolView{load: l, at: h.now()}
	h.mu.Unlock()
	return l
}

// replicas returns the URLs to read: each http URL whose host is a name once per address the name
// resolves to (sorted), every other URL as it is, and one whose name does not resolve too (its
// read then fails and is logged).
func (h *headroomPlugin) replicas(ctx context.Context) []string {
	var out []string
	for _, u := range h.urls {
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "http" || net.ParseIP(p.Hostname()) != nil {
			out = append(out, u)
			continue
		}
		addrs, err := h.lookup(ctx, p.Hostname())
		if err != nil || len(addrs) == 0 {
			out = append(out, u)
			continue
		}
		slices.Sort(addrs)
		port := p.Port()
		if port == "" {
			port = "80"
		}
		for _, a := range addrs {
			q := *p
			q.Host = net.JoinHostPort(a, port)
			out = append(out, q.String())
		}
	}
	return out
}

func (h *headroomPlugin) read(ctx context.Context, l *scoring.PoolLoad, u string) error {
	fams, err := poolview.Scrape(ctx, h.http, u)
	if err != nil {
		return err
	}
	l.Add(fams)
	return nil
}

func (*headroomPlugin) Score(_ context.Context, state fwk.CycleState, p *v1.Pod, n fwk.NodeInfo) (int64, *fwk.Status) {
	var load *scoring.PoolLoad
	if d, err := state.Read(headroomStateKey); err == nil {
		load = d.(headroomState).load
	}
	return scoring.HeadroomRaw(p.Namespace, scoring.Pool(p), scoring.OutsideGang(p, pods(n)), load), nil
}

func (h *headroomPlugin) ScoreExtensions() fwk.ScoreExtensions { return h }

func (*headroomPlugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	normalize(scores, scoring.NormalizeLowerBetter)
	return nil
}
