package scale

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat (100 on every Linux ABI Go
// supports).
const clockTicks = 100

// ProcSample is one reading of a process.
type ProcSample struct {
	CPU time.Duration // user+system time since the process started
	RSS int64         // resident set size in bytes
}

// ReadProc reads /proc/<pid>/stat and /proc/<pid>/status under procRoot (normally "/proc").
func ReadProc(procRoot string, pid int) (ProcSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", procRoot, pid))
	if err != nil {
		return ProcSample{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	// The command name may contain spaces and parentheses: fields start after the last ')'.
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return ProcSample{}, fmt.Errorf("pid %d: malformed stat %q", pid, stat)
	}
	f := strings.Fields(string(stat[end+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return ProcSample{}, fmt.Errorf("pid %d: stat has %d fields after comm", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return ProcSample{}, fmt.Errorf("pid %d: utime %q stime %q not numbers", pid, f[11], f[12])
	}
	s := ProcSample{CPU: time.Duration(ut+st) * time.Second / clockTicks}
	status, err := os.ReadFile(fmt.Sprintf("%s/%d/status", procRoot, pid))
	if err != nil {
		return ProcSample{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return ProcSample{}, fmt.Errorf("pid %d: VmRSS %q: %w", pid, rest, err)
			}
			s.RSS = kb * 1024
		}
	}
	return s, nil
}

// PidFromFile reads a pid file (a decimal pid, optionally followed by whitespace).
func PidFromFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("pid file %s: empty", path)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", path, err)
	}
	return pid, nil
}

// ProcUsage is what a process used during a measured interval.
type ProcUsage struct {
	CPU     time.Duration // CPU time consumed in the interval
	Wall    time.Duration
	PeakRSS int64 // highest RSS sampled
}

// Cores returns the average number of cores used.
func (u ProcUsage) Cores() float64 {
	if u.Wall <= 0 {
		return 0
	}
	return u.CPU.Seconds() / u.Wall.Seconds()
}

// Sampler samples processes periodically between Start and Stop.
type Sampler struct {
	procRoot string
	pids     map[string]int
	interval time.Duration

	mu    sync.Mutex
	first map[string]ProcSample
	last  map[string]ProcSample
	peak  map[string]int64
	start time.Time
	stop  chan struct{}
	done  chan struct{}
}

// NewSampler samples the named pids every interval.
func NewSampler(procRoot string, pids map[string]int, interval time.Duration) *Sampler {
	return &Sampler{procRoot: procRoot, pids: pids, interval: interval}
}

// Start takes the first sample and starts sampling in the background.
func (s *Sampler) Start() {
	s.first, s.last, s.peak = map[string]ProcSample{}, map[string]ProcSample{}, map[string]int64{}
	s.start = time.Now()
	s.sample(true)
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample(false)
			}
		}
	}()
}

func (s *Sampler) sample(first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, pid := range s.pids {
		ps, err := ReadProc(s.procRoot, pid)
		if err != nil {
			continue // process gone: the interval reports what was seen
		}
		if first {
			s.first[name] = ps
		}
		s.last[name] = ps
		s.peak[name] = max(s.peak[name], ps.RSS)
	}
}

// Stop takes a last sample and returns the usage of every process seen at Start.
func (s *Sampler) Stop() map[string]ProcUsage {
	close(s.stop)
	<-s.done
	s.sample(false)
	wall := time.Since(s.start)
	out := map[string]ProcUsage{}
	for name, f := range s.first {
		out[name] = ProcUsage{CPU: s.last[name].CPU - f.CPU, Wall: wall, PeakRSS: s.peak[name]}
	}
	return out
}
