package cluster

import (
	"context"
	"fmt"
	"os/exec"
)

func execOutput(ctx context.Context, bin string, args ...string) ([]byte, error) {
	b, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return b, fmt.Errorf("%s %v: %w: %s", bin, args, err, b)
	}
	return b, nil
}
