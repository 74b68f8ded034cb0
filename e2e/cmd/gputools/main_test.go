package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStandIn builds the stand-in and drives it as the driver does: one daemon per pipe
// directory, a second start refused, defaults sent to it, quit stops it, and every call recorded.
func TestStandIn(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if err := os.Link(bin, filepath.Join(dir, "nvidia-smi")); err != nil {
		t.Fatal(err)
	}
	pipe, logDir := filepath.Join(dir, "pipe"), filepath.Join(dir, "log")
	for _, d := range []string{pipe, logDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+logDir, "CUDA_VISIBLE_DEVICES=GPU-a")
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("get_server_list\n"); err == nil || !strings.Contains(out, "Cannot find MPS control daemon") {
		t.Fatalf("client without daemon: %v %s", err, out)
	}
	if out, err := run("", "-d"); err != nil {
		t.Fatalf("start: %v %s", err, out)
	}
	if out, err := run("", "-d"); err == nil || !strings.Contains(out, "already running") {
		t.Errorf("second daemon: %v %s", err, out)
	}
	for _, c := range []string{"get_server_list\n", "set_default_active_thread_percentage 50\n", "quit\n"} {
		if out, err := run(c); err != nil {
			t.Fatalf("%q: %v %s", c, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(pipe, "control")); !os.IsNotExist(err) {
		t.Errorf("control pipe left after quit: %v", err)
	}
	smi := exec.Command(filepath.Join(dir, "nvidia-smi"), "compute-policy", "-i", "GPU-a", "--set-timeslice", "3")
	if out, err := smi.CombinedOutput(); err != nil {
		t.Fatalf("nvidia-smi: %v %s", err, out)
	}
	f, err := os.Open(filepath.Join(dir, "calls.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join(strings.Fields(c.Tool+" "+c.Event+" "+strings.Join(c.Args, " ")+" "+c.Stdin), " "))
	}
	want := []string{
		"nvidia-cuda-mps-control get_server_list",
		"nvidia-cuda-mps-control -d",
		"mps-daemon started",
		"nvidia-cuda-mps-control -d",
		"nvidia-cuda-mps-control get_server_list",
		"nvidia-cuda-mps-control set_default_active_thread_percentage 50",
		"mps-daemon command set_default_active_thread_percentage 50",
		"nvidia-cuda-mps-control quit",
		"mps-daemon command quit",
		"mps-daemon exited",
		"nvidia-smi compute-policy -i GPU-a --set-timeslice 3",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
