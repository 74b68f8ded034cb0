package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// defaultDiskBudget keeps a fifth of the cache's filesystem free for everything else on the node.
const defaultDiskBudget = "80%"

// diskBudgetBytes reads --disk-budget: a quantity, "0" (unlimited) or a percentage of the size
// of the filesystem holding dir (created if missing).
func diskBudgetBytes(v, dir string) (int64, error) {
	pct, ok := strings.CutSuffix(strings.TrimSpace(v), "%")
	if !ok {
		return quantity("disk-budget", v)
	}
	p, err := strconv.ParseFloat(pct, 64)
	if err != nil || p <= 0 || p > 100 {
		return 0, fmt.Errorf("--disk-budget %q: want a percentage in (0, 100]", v)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("--disk-budget %q: %w", v, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("--disk-budget %q: statfs %s: %w", v, dir, err)
	}
	return int64(float64(st.Blocks) * float64(st.Bsize) * p / 100), nil
}

// parseFileRoots reads --file-source-roots: absolute directories.
func parseFileRoots(v string) ([]string, error) {
	var out []string
	for _, r := range egress.SplitList(v) {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("--file-source-roots: %q is not an absolute path", r)
		}
		out = append(out, filepath.Clean(r))
	}
	return out, nil
}

// endpointHost is the host of an S3 endpoint ("host:port" or "http(s)://host:port"), "" for none.
func endpointHost(ep string) string {
	if ep == "" {
		return ""
	}
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
