// Command netcheck is the image of the local cluster's network e2e tests.
//
//	netcheck serve -addr :8080           answer every HTTP request with "hello from $POD_NAME"
//	netcheck probe -name N... -url U... -dial A...
//	                                     resolve each name, GET each URL, open a TCP connection to
//	                                     each host:port (5 s), print one JSON line each
//	netcheck list-pods                   list the pods of its namespace through in-cluster config
//
// probe and list-pods print JSON lines and exit non-zero when any check failed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Result is one line of probe or list-pods output.
type Result struct {
	Check string   `json:"check"` // resolve, get or list-pods
	Input string   `json:"input"`
	Addrs []string `json:"addrs,omitempty"`
	Code  int      `json:"code,omitempty"`
	Body  string   `json:"body,omitempty"`
	Pods  []string `json:"pods,omitempty"`
	Host  string   `json:"host,omitempty"` // KUBERNETES_SERVICE_HOST:PORT the client used
	Error string   `json:"error,omitempty"`
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: netcheck serve|probe|list-pods [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", ":8080", "serve: listen address")
	var names, urls, dials list
	fs.Var(&names, "name", "probe: a name to resolve (repeatable)")
	fs.Var(&urls, "url", "probe: a URL to GET (repeatable)")
	fs.Var(&dials, "dial", "probe: a host:port to open a TCP connection to (repeatable)")
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var results []Result
	switch os.Args[1] {
	case "serve":
		serve(*addr)
		return
	case "probe":
		results = append(probe(ctx, names, urls), dial(ctx, dials)...)
	case "list-pods":
		results = []Result{listPods(ctx)}
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	failed := false
	enc := json.NewEncoder(os.Stdout)
	for _, r := range results {
		_ = enc.Encode(r)
		failed = failed || r.Error != ""
	}
	if failed {
		os.Exit(1)
	}
}

func serve(addr string) {
	name := os.Getenv("POD_NAME")
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "hello from %s", name) })
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// probe resolves through the pod's resolv.conf (the cluster DNS) and GETs
// through whatever the names resolve to.
func probe(ctx context.Context, names, urls []string) []Result {
	var out []Result
	for _, n := range names {
		r := Result{Check: "resolve", Input: n}
		addrs, err := net.DefaultResolver.LookupHost(ctx, n)
		r.Addrs = addrs
		if err != nil {
			r.Error = err.Error()
		}
		out = append(out, r)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, u := range urls {
		r := Result{Check: "get", Input: u}
		if resp, err := client.Get(u); err != nil {
			r.Error = err.Error()
		} else {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			r.Code, r.Body = resp.StatusCode, string(b)
		}
		out = append(out, r)
	}
	return out
}

// dial opens and closes a TCP connection to each address; a connection that a
// NetworkPolicy drops fails with a timeout after 5 s.
func dial(ctx context.Context, addrs []string) []Result {
	var out []Result
	d := net.Dialer{Timeout: 5 * time.Second}
	for _, a := range addrs {
		r := Result{Check: "dial", Input: a}
		if c, err := d.DialContext(ctx, "tcp", a); err != nil {
			r.Error = err.Error()
		} else {
			c.Close()
		}
		out = append(out, r)
	}
	return out
}

// listPods uses the standard in-cluster config: the ServiceAccount token and
// the kubernetes Service from KUBERNETES_SERVICE_HOST/PORT.
func listPods(ctx context.Context) Result {
	r := Result{Check: "list-pods", Host: os.Getenv("KUBERNETES_SERVICE_HOST") + ":" + os.Getenv("KUBERNETES_SERVICE_PORT")}
	ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Input = string(ns)
	cfg, err := rest.InClusterConfig()
	if err != nil {
		r.Error = err.Error()
		return r
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	pods, err := cs.CoreV1().Pods(string(ns)).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	for _, p := range pods.Items {
		r.Pods = append(r.Pods, p.Name)
	}
	return r
}
