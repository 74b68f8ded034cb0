package cluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupRoot is where the cgroup v1 hierarchies (and a v2 one, if any) live.
const cgroupRoot = "/sys/fs/cgroup"

// podCgroupName is the cgroup that containerd's CRI plugin creates for the
// kubelet's containers when the kubelet runs without per-QoS cgroups.
const podCgroupName = "k8s.io"

func unmount(path string) error {
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	return nil
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below dir.
func unmountUnder(dir string) []error {
	var errs []error
	for _, mp := range mountsUnder(dir) {
		if err := unmount(mp); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// removeAllUnmounting detaches the mounts below dir and removes it.
func removeAllUnmounting(dir string) error {
	unmountUnder(dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// podCgroups returns every k8s.io cgroup directory, one per hierarchy.
func podCgroups() []string {
	ents, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		d := filepath.Join(cgroupRoot, e.Name(), podCgroupName)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	if st, err := os.Stat(filepath.Join(cgroupRoot, podCgroupName)); err == nil && st.IsDir() {
		out = append(out, filepath.Join(cgroupRoot, podCgroupName))
	}
	return out
}

// killCgroupProcs SIGKILLs every process in the cgroup trees and waits for
// them to leave.
func killCgroupProcs(dirs []string) {
	for attempt := 0; attempt < 50; attempt++ {
		found := false
		for _, d := range dirs {
			_ = filepath.WalkDir(d, func(path string, de os.DirEntry, err error) error {
				if err != nil || de.IsDir() || de.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(path)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
						found = true
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if !found {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroupTree removes a cgroup directory tree, deepest first. cgroupfs
// directories are removed with rmdir only.
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, de os.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var last error
	for _, d := range dirs {
		// Up to 5 s: the processes of a killed run's containers were
		// reparented and may still be exiting, or reappear in the cgroup.
		for i := 0; i < 100; i++ {
			if err := syscall.Rmdir(d); err == nil || err == syscall.ENOENT {
				last = nil
				break
			} else {
				last = fmt.Errorf("removing cgroup %s: %w", d, err)
			}
			killCgroupProcs([]string{d})
			time.Sleep(50 * time.Millisecond)
		}
	}
	return last
}
