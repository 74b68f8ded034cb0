package e2e

// The resume benchmark's breakdown: the phases of one resume, from the stamps the watches and the
// timed node agent engine recorded, and the floors measured in the same run (the disk's
// sequential read of the checkpoint with its pages dropped from the page cache, and sha256 over
// the same bytes, which the store's verification must spend), so the bench says where the time
// goes and what is missing for the target.

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuronetes/neuronetes/checkpoint/container"
)

// phase is one step of a resume: from the first stamp containing from to the first containing to.
type phase struct {
	name     string
	from, to string
	d        time.Duration
	ok       bool
}

// resumePhases are the steps of the resume of session name into pod (its created host pod
// name-2, or the warm restore host it claimed), in order; "" as from is the request's send time,
// "" as to is the first token. A claimed host was created and started before the request, so
// its pod phases are not seen; "Resuming -> restore picked up" is then the host's share.
func resumePhases(name, pod string) []phase {
	return append([]phase{
		{name: "gateway holds, writes activity", from: "", to: "session " + name + " activity"},
		{name: "controller sees activity, creates/claims host + Restore", from: "session " + name + " activity", to: "session " + name + " Resuming"},
		{name: "pod created -> scheduled", from: "pod " + pod + " created", to: "pod " + pod + " PodScheduled"},
		{name: "scheduled -> host container running", from: "pod " + pod + " PodScheduled", to: "pod " + pod + " container"},
		{name: "image fetched + verified (prefetch, parallel to pod start)", from: "prefetch into " + pod + " starts", to: "done into " + pod + " (prefetch)"},
		{name: "local cache hit: no fetch (node agent saw the Restore)", from: "no prefetch into " + pod, to: "no prefetch into " + pod},
		{name: "host running -> restore picked up", from: "pod " + pod + " container", to: "restore into " + pod + " starts"},
		{name: "Resuming (host created or claimed) -> restore picked up", from: "session " + name + " Resuming", to: "restore into " + pod + " starts"},
		{name: "restore call -> CRIU restore done (incl. fetch wait)", from: "restore into " + pod + " starts", to: "CRIU restore into " + pod + " done"},
		{name: "restore done -> session Running (pod Ready)", from: "CRIU restore into " + pod + " done", to: "session " + name + " Running"},
		{name: "session Running -> first token (gateway wake, turn)", from: "session " + name + " Running", to: ""},
	}, restoreStepPhases(pod)...)
}

// restoreStepPhases split "restore call -> CRIU restore done" into the container engine's
// restore steps (container.WithRestoreSteps); listed after resumePhases' own, whose indices
// reportBreakdown uses. The lazy-pages daemon's step is not seen in an eager restore (its
// container create then counts from "prepared").
func restoreStepPhases(pod string) []phase {
	step := func(st container.RestoreStep) string { return restoreStepStamp(st, pod) }
	return []phase{
		{name: "  restore: staged (fetch, prefetch wait or cache open)", from: "restore into " + pod + " starts", to: step(container.StepStaged)},
		{name: "  restore: host spec, mapped files, workspace", from: step(container.StepStaged), to: step(container.StepPrepared)},
		{name: "  restore: lazy-pages daemon start", from: step(container.StepPrepared), to: step(container.StepLazyDaemon)},
		{name: "  restore: containerd container + rootfs snapshot", from: step(container.StepLazyDaemon), to: step(container.StepContainer)},
		{name: "  restore: CRIU restore (containerd task create)", from: step(container.StepContainer), to: step(container.StepCRIURestore)},
		{name: "  restore: task start (the process runs)", from: step(container.StepCRIURestore), to: step(container.StepResumed)},
		{name: "  restore: returned to the node agent", from: step(container.StepResumed), to: "CRIU restore into " + pod + " done"},
	}
}

// measure fills each phase's duration from the stamps between send and token.
func (s *stamps) measure(ps []phase, send, token time.Time) []phase {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := func(sub string, def time.Time) (time.Time, bool) {
		if sub == "" {
			return def, true
		}
		for _, e := range s.list {
			if !e.at.Before(send) && e.at.Before(token.Add(50*time.Millisecond)) && strings.Contains(e.what, sub) {
				return e.at, true
			}
		}
		return time.Time{}, false
	}
	out := make([]phase, len(ps))
	for i, p := range ps {
		a, okA := at(p.from, send)
		b, okB := at(p.to, token)
		p.ok = okA && okB
		if p.ok {
			p.d = b.Sub(a)
		}
		out[i] = p
	}
	return out
}

// printPhases prints a round's resume phases as a table.
func printPhases(round string, ps []phase, total time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s resume phases (total %v):\n", round, total.Round(time.Millisecond))
	for _, p := range ps {
		if !p.ok {
			fmt.Fprintf(&b, "  phase %-58s   (not seen)\n", p.name)
			continue
		}
		fmt.Fprintf(&b, "  phase %-58s %7.3fs\n", p.name, p.d.Seconds())
	}
	fmt.Print(b.String())
}

// floors are the lower bounds measured in this run for moving a checkpoint of bytes bytes.
type floors struct {
	bytes      int64
	diskRead   time.Duration // sequential read of the stored chunks, page cache dropped
	sha256     time.Duration // sha256 over the same bytes on one core
	filesTried int
}

// measureFloors reads every chunk file under the store directory (the checkpoints of this run)
// once sequentially after dropping their pages from the page cache (fdatasync, then
// POSIX_FADV_DONTNEED on each file: only these files, not the whole cache), hashing nothing, and
// then hashes the same bytes from memory: the disk's read floor and the verification floor, per
// GiB scaled to the checkpoint's size.
func measureFloors(t *testing.T, storeDir string, ckBytes int64) floors {
	t.Helper()
	var files []string
	_ = filepath.WalkDir(storeDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, string(filepath.Separator)+"chunks"+string(filepath.Separator)) {
			files = append(files, p)
		}
		return nil
	})
	for _, f := range files {
		if fd, err := unix.Open(f, unix.O_RDONLY, 0); err == nil {
			_ = unix.Fdatasync(fd)
			_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
			_ = unix.Close(fd)
		}
	}
	buf := make([]byte, 4<<20)
	var read int64
	start := time.Now()
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		n, _ := io.CopyBuffer(io.Discard, fh, buf)
		read += n
		fh.Close()
	}
	disk := time.Since(start)
	// sha256 of 256 MiB from memory, one core.
	mem := make([]byte, 256<<20)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	hstart := time.Now()
	sum := sha256.Sum256(mem)
	hash := time.Since(hstart)
	_ = sum
	f := floors{bytes: ckBytes, filesTried: len(files)}
	if read > 0 {
		f.diskRead = time.Duration(float64(disk) * float64(ckBytes) / float64(read))
	}
	f.sha256 = time.Duration(float64(hash) * float64(ckBytes) / float64(len(mem)))
	t.Logf("floors: read %d MiB of %d chunk files in %v with their pages dropped (%.0f MiB/s); sha256 %.0f MiB/s on one core",
		read>>20, len(files), disk.Round(time.Millisecond), float64(read)/(1<<20)/disk.Seconds(), float64(len(mem))/(1<<20)/hash.Seconds())
	return f
}

// reportBreakdown prints the median of each resume phase, the floors, the budget the target
// leaves (0.3x the cold start) and what is over it.
func reportBreakdown(cold, resume time.Duration, rounds [][]phase, fl floors, lazy, cache, warmHosts bool) {
	budget := time.Duration(0.3 * float64(cold))
	fmt.Printf("session bench budget: 0.3 x cold %v = %v; resume median %v (lazy pages %v, local cache %v, warm restore hosts %v)\n", cold.Round(time.Millisecond), budget.Round(time.Millisecond), resume.Round(time.Millisecond), lazy, cache, warmHosts)
	if len(rounds) == 0 {
		return
	}
	med := map[string]time.Duration{}
	for i, p := range rounds[0] {
		var ds []time.Duration
		for _, r := range rounds {
			if i < len(r) && r[i].ok {
				ds = append(ds, r[i].d)
			}
		}
		if len(ds) == 0 {
			fmt.Printf("session bench phase: %-58s not seen\n", p.name)
			continue
		}
		med[p.name] = median(ds)
		fmt.Printf("session bench phase: %-58s median %7.3fs over %d rounds\n", p.name, med[p.name].Seconds(), len(ds))
	}
	fmt.Printf("session bench floor: checkpoint %d MiB: disk sequential read %.3fs (pages dropped, %d chunk files of this run's store), sha256 verification %.3fs (one core)\n",
		fl.bytes>>20, fl.diskRead.Seconds(), fl.filesTried, fl.sha256.Seconds())
	if resume <= budget {
		return
	}
	ps := rounds[0]
	podStart := med[ps[2].name] + med[ps[3].name]
	fetch := med[ps[4].name]
	restore := med[ps[8].name]
	fmt.Printf("session bench missing: resume is %v over the %v budget\n", (resume - budget).Round(time.Millisecond), budget.Round(time.Millisecond))
	if warmHosts {
		fmt.Printf("session bench missing: no pod start on the path (warm restore host claimed); controller reaction %.3fs, Resuming -> restore picked up %.3fs\n", med[ps[1].name].Seconds(), med[ps[7].name].Seconds())
	} else {
		fmt.Printf("session bench missing: pod start on the path (created -> host running) %.3fs: warm restore hosts are off (NEURONETES_BENCH_WARM_HOSTS=0)\n", podStart.Seconds())
	}
	fmt.Printf("session bench missing: restore done -> session Running %.3fs, session Running -> first token %.3fs\n", med[ps[9].name].Seconds(), med[ps[10].name].Seconds())
	fmt.Printf("session bench missing: from the restore call to the restored agent (CRIU restore%s) %.3fs\n", map[bool]string{true: " with lazy pages", false: ", every page copied"}[lazy], restore.Seconds())
	var split []string
	for _, p := range restoreStepPhases("") {
		if d, ok := med[p.name]; ok {
			split = append(split, fmt.Sprintf("%s %.3fs", strings.TrimPrefix(p.name, "  restore: "), d.Seconds()))
		}
	}
	fmt.Printf("session bench missing: that restore's steps (medians): %s\n", strings.Join(split, "; "))
	if fetch > 0 {
		fmt.Printf("session bench missing: the whole image is fetched and verified before CRIU runs (%.3fs, overlapped with the pod start); its floor here is max(disk read %.3fs, sha256 %.3fs) unless only the pages the first token touches are fetched: a page server that fetches and verifies chunks on demand is not built\n",
			fetch.Seconds(), fl.diskRead.Seconds(), fl.sha256.Seconds())
	}
	if !lazy {
		fmt.Printf("session bench missing: CRIU copies every page before the agent runs (NEURONETES_BENCH_LAZY=0)\n")
	}
	if !cache {
		fmt.Printf("session bench missing: no local cache of the node's dumps (NEURONETES_BENCH_LOCAL_CACHE=0): every resume fetches the whole image\n")
	}
}
