package criu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
)

// rootPid returns the PID of the dumped tree's root from pstree.img. Without
// a PID namespace in the dump, CRIU restores every task with its dumped PID,
// so this is the restored root's PID; knowing it up front lets a restore run
// without notify round trips.
func rootPid(imageDir string) (int, error) {
	p := filepath.Join(imageDir, "pstree.img")
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("root pid: %w", err)
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, true).Decode(&pstree.PstreeEntry{})
	if err != nil {
		return 0, fmt.Errorf("decode %s: %w", p, err)
	}
	if len(img.Entries) == 0 {
		return 0, fmt.Errorf("decode %s: no entries", p)
	}
	e, ok := img.Entries[0].Message.(*pstree.PstreeEntry)
	if !ok || e.GetPid() == 0 {
		return 0, fmt.Errorf("decode %s: first entry %T has no pid", p, img.Entries[0].Message)
	}
	return int(e.GetPid()), nil
}

// parentOf returns the parent PID of pid from /proc/<pid>/stat.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...; comm may contain spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.Atoi(f[1])
}
