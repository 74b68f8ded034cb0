package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// waitWeightsCmd waits until every FILE exists (the node agent links the weights into the pod's
// ready directory once they are cached, verified and warm; agent.WeightsWaitContainer runs it as an
// init container), or with -dir until every DIR holds a file, and prints "bytes secondsWaited" (bytes
// of all the files).
func waitWeightsCmd(args []string) error {
	fs := flag.NewFlagSet("wait-weights", flag.ContinueOnError)
	interval := fs.Duration("interval", 100*time.Millisecond, "how often to look")
	timeout := fs.Duration("timeout", 0, "give up after this long; 0 waits until the pod's deadline")
	dir := fs.Bool("dir", false, "the arguments are ready directories: wait until each holds a file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("wait-weights: want FILE... (or -dir DIR...)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	start := time.Now()
	var total int64
	for _, p := range fs.Args() {
		var size int64
		var err error
		if *dir {
			size, err = waitDir(ctx, p, *interval)
		} else {
			size, err = waitFile(ctx, p, *interval)
		}
		if err != nil {
			return err
		}
		total += size
	}
	fmt.Printf("%d %.3f\n", total, time.Since(start).Seconds())
	return nil
}

// waitDir polls until dir holds a regular file and returns its size.
func waitDir(ctx context.Context, dir string, interval time.Duration) (int64, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		des, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("wait in %s: %w", dir, err)
		}
		for _, de := range des {
			if fi, err := os.Stat(filepath.Join(dir, de.Name())); err == nil && fi.Mode().IsRegular() {
				return fi.Size(), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait in %s: %w", dir, ctx.Err())
		case <-t.C:
		}
	}
}

// waitFile polls until path is a regular file and returns its size.
func waitFile(ctx context.Context, path string, interval time.Duration) (int64, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fi, err := os.Stat(path)
		if err == nil && fi.Mode().IsRegular() {
			return fi.Size(), nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("wait for %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
}
