// Command demo is `make run`: it brings the local real cluster up (or reuses
// it), builds and imports the project's images, deploys every NeuroNetes
// component, runs a short demo scenario and prints a summary. It leaves the
// cluster running; `make cluster-down` stops it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/neuronetes/neuronetes/e2e/cluster"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	d := &demo{root: root, start: time.Now()}
	if err := d.run(ctx); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "\nmake run failed: %v\n", err)
	os.Exit(1)
}

func logf(format string, args ...any) { fmt.Printf("[run] "+format+"\n", args...) }

func (d *demo) run(ctx context.Context) error {
	logf("starting the local real cluster (state in %s)", filepath.Join(d.root, ".local"))
	c, err := cluster.Up(ctx, cluster.Options{Root: d.root, Logf: logf})
	if err != nil {
		return err
	}
	if err := d.connect(c); err != nil {
		return err
	}
	for _, s := range d.steps() {
		start := time.Now()
		logf("== %s", s.name)
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		logf("   done in %s", time.Since(start).Round(100*time.Millisecond))
	}
	return d.summary(ctx)
}
