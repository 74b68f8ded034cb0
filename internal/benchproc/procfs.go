package benchproc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: 100 on Linux.
const userHZ = 100

// tailBytes is how much of a log Tail returns.
const tailBytes = 2000

// CPUOf is the user plus system CPU seconds of pid (utime+stime in /proc/<pid>/stat), 0 when
// that cannot be read.
func CPUOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return cpuOfStat(string(b))
}

// cpuOfStat is utime+stime in seconds from the text of a /proc/<pid>/stat file, 0 when it is
// malformed.
func cpuOfStat(s string) float64 {
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / userHZ
}

// SelfCPU is the calling process's own CPU seconds.
func SelfCPU() float64 { return CPUOf(os.Getpid()) }

// LoadAvg is the machine's 1-minute load average as /proc/loadavg writes it, "?" when it cannot
// be read.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// Tail is the last 2000 bytes of the file at path, "" when it cannot be read.
func Tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
	}
	return string(b)
}
