// Command sidecar is the NeuroNetes agent sidecar: per-conversation session
// memory over Redis (compressed, encrypted, TTL) and a node-local vector
// cache, served on localhost over HTTP/JSON, a unix socket and gRPC.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/sidecar/app"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(probe(os.Args[2:]))
	}
	var cfg app.Config
	fs := flag.NewFlagSet("sidecar", flag.ExitOnError)
	klog.InitFlags(fs)
	cfg.Bind(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("sidecar"))
	if err := app.Run(ctx, cfg); err != nil {
		klog.FromContext(ctx).Error(err, "sidecar failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
