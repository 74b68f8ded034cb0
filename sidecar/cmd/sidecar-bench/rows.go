package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	sidecarv1 "github.com/neuronetes/neuronetes/sidecar/api/v1"
)

// Baseline row names, which the floors of the other rows name.
const (
	rawGet      = "raw go-redis GET"
	rawSet      = "raw go-redis SET"
	echoGetTCP  = "echo process GET, TCP"
	echoGetUnix = "echo process GET, unix socket"
	echoPutTCP  = "echo process PUT, TCP"
	echoPutUnix = "echo process PUT, unix socket"
	echoGetNet  = "echo process GET, TCP, net/http client"
	echoPutNet  = "echo process PUT, TCP, net/http client"
	inProcHit   = "store.Get in process, near-cache hit"
)

// leanClient returns a lean HTTP/1.1 client (fasthttp: no goroutine per
// connection), dialing unixPath when it is not empty.
func leanClient(unixPath string) *fasthttp.Client {
	c := &fasthttp.Client{}
	if unixPath != "" {
		c.Dial = func(string) (net.Conn, error) { return net.Dial("unix", unixPath) }
	}
	return c
}

func leanDo(c *fasthttp.Client, method, url string, body []byte) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	req.Header.SetMethod(method)
	if body != nil {
		req.SetBodyRaw(body)
	}
	if err := c.Do(req, resp); err != nil {
		return err
	}
	if resp.StatusCode() != 200 {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode(), resp.Body())
	}
	return nil
}

var netClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

func netDo(method, url string, body []byte) error {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	resp, err := netClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: %d", method, url, resp.StatusCode)
	}
	return nil
}

// rows seeds the sessions and returns the rows: baselines first, then the
// judged sidecar rows, then the levers and other views for comparison.
func (e *sessionEnv) rows() ([]row, error) {
	ctx, doc := e.ctx, e.doc
	tcp := leanClient("")
	unix := map[string]*fasthttp.Client{"echo": leanClient(e.echo.sock)}
	for role, p := range e.procs {
		unix[role] = leanClient(p.sock)
		if err := leanDo(tcp, "PUT", p.url+"/v1/sessions/s16k", doc); err != nil {
			return nil, err
		}
	}
	if err := e.raw.Set(ctx, "raw16k", doc, 24*time.Hour).Err(); err != nil {
		return nil, err
	}
	if _, err := e.hot.Put(ctx, "s16k", doc, -1, 0); err != nil {
		return nil, err
	}
	for _, st := range e.inproc {
		if _, err := st.Put(ctx, "s16k", doc, -1, 0); err != nil {
			return nil, err
		}
	}
	get := func(c *fasthttp.Client, base string) func() error {
		return func() error { return leanDo(c, "GET", base+"/v1/sessions/s16k", nil) }
	}
	put := func(c *fasthttp.Client, base, id string) func() error {
		return func() error { return leanDo(c, "PUT", base+"/v1/sessions/"+id, doc) }
	}
	miss, hit := e.procs["miss"], e.procs["hit"]
	const sock = "http://sidecar" // the host of a unix-socket URL is not dialed
	rows := []row{
		{name: rawGet, op: func() error { return e.raw.Get(ctx, "raw16k").Err() }},
		{name: echoGetTCP, op: get(tcp, e.echo.url)},
		{name: echoGetUnix, op: get(unix["echo"], sock)},
		{name: "sidecar near-cache hit GET, TCP", op: get(tcp, hit.url), floor: []string{rawGet, echoGetTCP}, limit: 1.1},
		{name: "sidecar near-cache hit GET, unix socket", op: get(unix["hit"], sock), floor: []string{rawGet, echoGetUnix}, limit: 1.1},
		{name: "sidecar cache-miss GET, TCP", op: get(tcp, miss.url), floor: []string{rawGet, echoGetTCP}, limit: 1.3},
		{name: "sidecar cache-miss GET, unix socket", op: get(unix["miss"], sock), floor: []string{rawGet, echoGetUnix}, limit: 1.3},
		{name: rawSet, op: func() error { return e.raw.Set(ctx, "raw16k", doc, 24*time.Hour).Err() }},
		{name: echoPutTCP, op: put(tcp, e.echo.url, "w")},
		{name: echoPutUnix, op: put(unix["echo"], sock, "w")},
		{name: "sidecar PUT, TCP", op: put(tcp, miss.url, "w-tcp"), floor: []string{rawSet, echoPutTCP}, limit: 1.5},
		{name: "sidecar PUT, unix socket", op: put(unix["miss"], sock, "w-unix"), floor: []string{rawSet, echoPutUnix}, limit: 1.5},
		// Levers of PUT, each a sidecar process with one --compression.
		{name: "  PUT, TCP, --compression=s2", op: put(tcp, e.procs["s2"].url, "w"), floor: []string{rawSet, echoPutTCP}},
		{name: "  PUT, TCP, --compression=zstd", op: put(tcp, e.procs["zstd"].url, "w"), floor: []string{rawSet, echoPutTCP}},
		{name: "  PUT, TCP, --compression=none", op: put(tcp, e.procs["none"].url, "w"), floor: []string{rawSet, echoPutTCP}},
		// The same with Go's net/http client on both sides of the ratio.
		{name: echoGetNet, op: func() error { return netDo("GET", e.echo.url+"/v1/sessions/s16k", nil) }},
		{name: "  cache-miss GET, TCP, net/http client", op: func() error { return netDo("GET", miss.url+"/v1/sessions/s16k", nil) }, floor: []string{rawGet, echoGetNet}},
		{name: echoPutNet, op: func() error { return netDo("PUT", e.echo.url+"/v1/sessions/w", doc) }},
		{name: "  PUT, TCP, net/http client", op: func() error { return netDo("PUT", miss.url+"/v1/sessions/w-net", doc) }, floor: []string{rawSet, echoPutNet}},
		// gRPC (the generated client) against the same process; its floor is the HTTP echo's.
		{name: "  gRPC Get, cache miss", op: func() error {
			_, err := e.gc.Get(ctx, &sidecarv1.GetRequest{ConversationId: "s16k"})
			return err
		}, floor: []string{rawGet, echoGetTCP}},
		{name: "  gRPC Put", op: func() error {
			_, err := e.gc.Put(ctx, &sidecarv1.PutRequest{ConversationId: "w-grpc", Data: doc})
			return err
		}, floor: []string{rawSet, echoPutTCP}},
		{name: inProcHit, op: func() error { _, err := e.hot.Get(ctx, "s16k"); return err }},
	}
	// The sidecar's own work without the hop, per codec: with the echo
	// process's answer, the floor of this design (design floor rows).
	for _, c := range []string{"s2", "zstd", "none"} {
		st := e.inproc[c]
		rows = append(rows,
			row{name: "store.Get in process, cache miss, " + c, op: func() error { _, err := st.Get(ctx, "s16k"); return err }},
			row{name: "store.Put in process, " + c, op: func() error { _, err := st.Put(ctx, "w", doc, -1, 0); return err }})
	}
	return rows, nil
}

// printSessions prints the table and judges the rows with a limit at p50
// and p99 against the sum of their floor rows' percentiles, and the
// in-process near-cache hit's p99 against 20 µs.
func printSessions(rows []row, res []dist, size, rounds, per int) {
	at := map[string]dist{}
	for i, r := range rows {
		at[r.name] = res[i]
	}
	fmt.Printf("session ops, %d-byte JSON session, one client, %d x %d interleaved ops each; sidecar and echo server as their own processes (GOMAXPROCS=2), redis-server on loopback, lean client (fasthttp) unless noted\n", size, rounds, per)
	fmt.Printf("  %-44s %9s %9s %10s %10s %7s %7s %s\n", "op", "p50 µs", "p99 µs", "floor p50", "floor p99", "p50 x", "p99 x", "target")
	for i, r := range rows {
		p50, p99 := res[i].pct(0.5), res[i].pct(0.99)
		if len(r.floor) == 0 {
			fmt.Printf("  %-44s %s %s\n", r.name, us(p50), us(p99))
			continue
		}
		var f50, f99 time.Duration
		for _, f := range r.floor {
			f50 += at[f].pct(0.5)
			f99 += at[f].pct(0.99)
		}
		x50, x99 := float64(p50)/float64(f50), float64(p99)/float64(f99)
		target := ""
		if r.limit > 0 {
			target = fmt.Sprintf("<= %.1fx", r.limit)
			judge(judgment{name: r.name + " p50 / floor", value: x50, limit: r.limit, unit: "x"})
			judge(judgment{name: r.name + " p99 / floor", value: x99, limit: r.limit, unit: "x"})
		}
		fmt.Printf("  %-44s %s %s %10s %10s %7.2f %7.2f %s\n", r.name, us(p50), us(p99), us(f50), us(f99), x50, x99, target)
	}
	printDesignFloor(at)
	hit := at[inProcHit].pct(0.99)
	judge(judgment{name: "in-process near-cache hit p99", value: float64(hit.Nanoseconds()) / 1e3, limit: 20, unit: " µs"})
	fmt.Printf("  floor = the sum of the raw go-redis call and the echo process's answer to the same request, each at that percentile, in this run\n")
	fmt.Printf("  targets: near-cache hit <= 1.1x, cache-miss GET <= 1.3x, PUT <= 1.5x of the floor at p50 and p99; near-cache hit in process p99 <= 20 µs (%s µs)\n",
		strings.TrimSpace(us(hit)))
}

// printDesignFloor prints, at p50, what this design cannot go below: the
// echo process's answer (the hop) plus the sidecar's own work measured in
// process (store.Get/Put: the Redis round trip, validation, codec), as
// ratios to the target's floor (raw call plus echo).
func printDesignFloor(at map[string]dist) {
	p50 := func(n string) float64 { return float64(at[n].pct(0.5)) }
	getFloor, putFloor := p50(rawGet)+p50(echoGetTCP), p50(rawSet)+p50(echoPutTCP)
	fmt.Printf("  design floor at p50 (echo TCP + the store call in process) / target floor:")
	for _, c := range []string{"s2", "zstd", "none"} {
		fmt.Printf(" %s: GET miss %.2fx, PUT %.2fx;", c, (p50(echoGetTCP)+p50("store.Get in process, cache miss, "+c))/getFloor,
			(p50(echoPutTCP)+p50("store.Put in process, "+c))/putFloor)
	}
	fmt.Println()
}
