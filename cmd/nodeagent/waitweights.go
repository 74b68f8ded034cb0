package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// waitWeightsCmd waits until FILE exists (the node agent links the weights into the pod's ready
// directory once they are cached, verified and warm; agent.WeightsWaitContainer runs it as an init
// container) and prints "bytes secondsWaited".
func waitWeightsCmd(args []string) error {
	fs := flag.NewFlagSet("wait-weights", flag.ContinueOnError)
	interval := fs.Duration("interval", 100*time.Millisecond, "how often to look for FILE")
	timeout := fs.Duration("timeout", 0, "give up after this long; 0 waits until the pod's deadline")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("wait-weights: want one FILE")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	start := time.Now()
	size, err := waitFile(ctx, fs.Arg(0), *interval)
	if err != nil {
		return err
	}
	fmt.Printf("%d %.3f\n", size, time.Since(start).Seconds())
	return nil
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
